"""``torchloom cache DATA --out DIR``: decode a dataset once into a :class:`~torchloom.DecodedCache`.

DATA is a local class folder or manifest, or one in an object store (``s3://...``, with
``--storage-option``: :mod:`torchloom.tools.storage`); the cache (``--out``) is a local folder.

Exit status: 0 when the cache was built or reused (what the dataset left out is printed on
stderr, a line per reason); 1 when the data could not be read or the cache not built (one line
says why); 2 for a usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from torchloom.cache import DecodedCache
from torchloom.datasets.index import DatasetReport
from torchloom.datasets.opening import open_image_dataset
from torchloom.errors import ConfigError, TorchloomError
from torchloom.io.files import is_url, lies_inside
from torchloom.tools.storage import refuse_url_output, storage_options_of
from torchloom.tools.terminal import (
    EXIT_CLEAN,
    EXIT_USAGE,
    add_data_arguments,
    add_threads_argument,
    fail,
    positive_int,
    print_left_out,
    printable,
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``cache`` on the ``torchloom`` command's subparsers; its handler is ``run``."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "cache", help="decode a dataset's images once into a memory-mapped cache"
    )
    add_data_arguments(parser)
    parser.add_argument("--out", required=True, help="the cache folder to build (reused when up to date)")
    parser.add_argument(
        "--max-side", type=positive_int, default=None, help="shrink images so their longer side is at most N"
    )
    parser.add_argument(
        "--memory",
        action="store_true",
        help="also copy it into /dev/shm, as location='memory' does, to check it fits",
    )
    add_threads_argument(parser, "decoding the images")
    parser.set_defaults(handler=run, parser=parser)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run ``torchloom cache`` with parsed arguments; returns the exit status."""
    if not is_url(args.data) and not os.path.exists(args.data):
        args.parser.error(f"DATA {args.data!r} does not exist; pass a class folder or a manifest file")
    try:
        refuse_url_output("--out", args.out)
        storage_options = storage_options_of(args)
    except ConfigError as exc:
        return fail("cache", exc)
    return run_cache(
        args.data,
        args.out,
        max_side=args.max_side,
        memory=args.memory,
        num_threads=args.threads,
        split=args.split,
        allow_outside_root=args.allow_outside_root,
        storage_options=storage_options,
    )


def run_cache(
    data: str,
    out: str,
    *,
    max_side: int | None,
    memory: bool,
    num_threads: int | None,
    split: str | None = None,
    allow_outside_root: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> int:
    """Build (or reuse) the cache of ``data`` (a local path, or a URL read with ``storage_options``)
    at ``out``; print what it holds and, on stderr, what the dataset left out. Returns the exit
    status."""
    if os.path.isdir(data) and is_within(out, data):
        print(
            f"torchloom cache: --out {out!r} is inside the data folder {data!r}, where the next run "
            "would take the cache for data (a class folder); pass a path outside it",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        dataset = open_image_dataset(
            data,
            split=split,
            on_error="skip",
            num_threads=num_threads,
            allow_outside_root=allow_outside_root,
            storage_options=storage_options,
        )
        cache = DecodedCache(
            dataset, out, max_side=max_side, location="memory" if memory else "disk", num_threads=num_threads
        )
    except (TorchloomError, OSError) as exc:
        return fail("cache", exc)
    with cache:
        print(printable(f"{cache.path}: {cache.report}"))
        report = getattr(dataset, "report", None)
        if isinstance(report, DatasetReport):
            print_left_out("cache", report.summary(root=getattr(dataset, "root", None)))
        if memory:
            print(f"fits in shared memory: copied {cache.nbytes:,} bytes to /dev/shm and removed them")
    return EXIT_CLEAN


def is_within(path: str, folder: str) -> bool:
    """``path`` is ``folder`` or lies inside it (symbolic links resolved).

    Example:
        >>> is_within("/data/train/cache", "/data/train"), is_within("/data/trainer", "/data/train")
        (True, False)
    """
    return lies_inside(os.path.realpath(path), os.path.realpath(folder))
