"""The ``torchloom`` command line.

Example:
    >>> build_parser().parse_args(["demo", "--workers", "0"]).workers
    0
    >>> build_parser().parse_args(["cache", "data", "--out", "cache", "--max-side", "256"]).max_side
    256
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from torchloom.cache import DecodedCache
from torchloom.datasets.opening import open_image_dataset
from torchloom.demo import DEFAULT_OUT, DEMO_COUNTS, run_demo
from torchloom.demo_data import MIN_IMAGES_PER_CLASS
from torchloom.diagnose import doctor, prepare, show
from torchloom.errors import TorchloomError
from torchloom.loader.bench import run_bench


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchloom", description="Messy data into fast, correct PyTorch batches."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="generate data, train a tiny CNN for one epoch, report")
    demo.add_argument("--images", type=int, default=sum(DEMO_COUNTS), help="number of images to generate")
    demo.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    demo.add_argument("--batch-size", type=int, default=64)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument(
        "--out", default=DEFAULT_OUT, help=f"folder for the report and plots (default ./{DEFAULT_OUT})"
    )
    bench = commands.add_parser(
        "bench", help="measure DataLoader/Loader settings on your data, pick the fastest"
    )
    bench.add_argument("data", help="a class folder (DATA/<class>/<image>) or a manifest (.csv, .jsonl, ...)")
    bench.add_argument("--batch-size", type=_positive_int, default=64)
    bench.add_argument("--budget", type=float, default=30.0, help="seconds the whole search may take")
    bench.add_argument("--json", action="store_true", help="print the measurements as JSON")
    bench.add_argument(
        "--plot", default="torchloom-bench.png", help="PNG of samples/s against workers ('' for none)"
    )
    cache = commands.add_parser("cache", help="decode a dataset's images once into a memory-mapped cache")
    cache.add_argument("data", help="a class folder (DATA/<class>/<image>) or a manifest (.csv, .jsonl, ...)")
    cache.add_argument("--out", required=True, help="the cache folder to build (reused when up to date)")
    cache.add_argument(
        "--max-side", type=_positive_int, default=None, help="shrink images so their longer side is at most N"
    )
    cache.add_argument(
        "--memory",
        action="store_true",
        help="also copy it into /dev/shm, as location='memory' does, to check it fits",
    )
    cache.add_argument(
        "--workers", type=_positive_int, default=None, help="decoding threads (default: one per CPU)"
    )
    for command in (doctor, prepare, show):
        command.add_parser(commands)
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``torchloom`` script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is not None:
        status: int = handler(args)
        return status
    if args.command == "bench":
        if not os.path.exists(args.data):
            parser.error(f"DATA {args.data!r} does not exist; pass a class folder or a manifest file")
        if args.budget <= 0:
            parser.error(f"--budget must be positive, got {args.budget}")
        try:
            return run_bench(
                args.data,
                batch_size=args.batch_size,
                budget_s=args.budget,
                as_json=args.json,
                plot=args.plot or None,
            )
        except TorchloomError as exc:
            print(f"torchloom bench: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
    if args.command == "cache":
        if not os.path.exists(args.data):
            parser.error(f"DATA {args.data!r} does not exist; pass a class folder or a manifest file")
        return run_cache(
            args.data, args.out, max_side=args.max_side, memory=args.memory, workers=args.workers
        )
    if args.command == "demo":
        smallest = MIN_IMAGES_PER_CLASS * len(DEMO_COUNTS)
        if args.images < smallest:
            parser.error(f"--images must be at least {smallest}, got {args.images}")
        total = sum(DEMO_COUNTS)
        counts = [max(MIN_IMAGES_PER_CLASS, round(count * args.images / total)) for count in DEMO_COUNTS]
        run_demo(
            counts=counts, batch_size=args.batch_size, num_workers=args.workers, seed=args.seed, out=args.out
        )
    return 0


def run_cache(data: str, out: str, *, max_side: int | None, memory: bool, workers: int | None) -> int:
    """Build (or reuse) the cache of ``data`` at ``out``; print what it holds. Returns the exit status."""
    if os.path.isdir(data) and is_within(out, data):
        print(
            f"torchloom cache: --out {out!r} is inside the data folder {data!r}, where the next run "
            "would take the cache for data (a class folder); pass a path outside it",
            file=sys.stderr,
        )
        return 2
    try:
        dataset = open_image_dataset(data, on_error="skip", workers=workers)
        cache = DecodedCache(
            dataset, out, max_side=max_side, location="memory" if memory else "disk", workers=workers
        )
    except (TorchloomError, OSError) as exc:
        print(f"torchloom cache: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    with cache:
        print(f"{cache.path}: {cache.report}")
        invalid = getattr(dataset, "report", None)
        if invalid is not None and invalid.invalid:
            print(f"{len(invalid.invalid)} file(s) failed validation and are not in the dataset:")
            print("\n".join(f"  {path}: {reason}" for path, reason in invalid.invalid))
        if memory:
            print(f"fits in shared memory: copied {cache.nbytes:,} bytes to /dev/shm and removed them")
    return 0


def is_within(path: str, folder: str) -> bool:
    """``path`` is ``folder`` or lies inside it (symbolic links resolved).

    Example:
        >>> is_within("/data/train/cache", "/data/train"), is_within("/data/trainer", "/data/train")
        (True, False)
    """
    resolved, root = os.path.realpath(path), os.path.realpath(folder)
    return resolved == root or resolved.startswith(root.rstrip(os.sep) + os.sep)


if __name__ == "__main__":
    raise SystemExit(main())
