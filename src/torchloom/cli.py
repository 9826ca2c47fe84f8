"""The ``torchloom`` command line.

Example:
    >>> build_parser().parse_args(["demo", "--workers", "0"]).workers
    0
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from torchloom.demo import DEMO_COUNTS, run_demo


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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``torchloom`` script; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        if args.images < len(DEMO_COUNTS):
            raise SystemExit(f"--images must be at least {len(DEMO_COUNTS)}, got {args.images}")
        total = sum(DEMO_COUNTS)
        counts = [max(1, round(count * args.images / total)) for count in DEMO_COUNTS]
        run_demo(counts=counts, batch_size=args.batch_size, num_workers=args.workers, seed=args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
