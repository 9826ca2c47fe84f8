"""``torchloom bench DATA``: the command line of :func:`~torchloom.tools.bench.run_bench`."""

from __future__ import annotations

import argparse
import os
from typing import Any

from torchloom.errors import TorchloomError
from torchloom.tools.bench.measure import run_bench
from torchloom.tools.terminal import add_data_arguments, fail, positive_int

#: Where the plot goes unless ``--plot`` says otherwise.
DEFAULT_PLOT = "torchloom-bench.png"


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``bench`` on the ``torchloom`` command's subparsers; its handler is ``run``."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "bench", help="measure DataLoader/Loader settings on your data, pick the fastest"
    )
    add_data_arguments(parser)
    parser.add_argument(
        "--batch-size", type=positive_int, default=64, help="the batch size training will use (default 64)"
    )
    parser.add_argument(
        "--budget", type=float, default=30.0, help="seconds the whole search may take (default 30)"
    )
    parser.add_argument("--json", action="store_true", help="print the measurements as JSON")
    parser.add_argument(
        "--plot",
        default=DEFAULT_PLOT,
        help=f"the PNG of samples/s against workers to write (default ./{DEFAULT_PLOT}; '' for none)",
    )
    parser.set_defaults(handler=run, parser=parser)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run ``torchloom bench`` with parsed arguments; returns the exit status."""
    if not os.path.exists(args.data):
        args.parser.error(f"DATA {args.data!r} does not exist; pass a class folder or a manifest file")
    if args.budget <= 0:
        args.parser.error(f"--budget must be positive, got {args.budget}")
    try:
        return run_bench(
            args.data,
            batch_size=args.batch_size,
            budget_s=args.budget,
            as_json=args.json,
            plot=args.plot or None,
            split=args.split,
            allow_outside_root=args.allow_outside_root,
        )
    except (TorchloomError, OSError) as exc:  # the data could not be read, the plot not written
        return fail("bench", exc)
