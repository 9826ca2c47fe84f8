"""``torchloom demo``: the command line of :func:`~torchloom.tools.demo.run_demo`."""

from __future__ import annotations

import argparse
from typing import Any

from torchloom.tools.demo.data import MIN_IMAGES_PER_CLASS
from torchloom.tools.demo.run import DEFAULT_OUT, DEMO_COUNTS, run_demo
from torchloom.tools.terminal import EXIT_CLEAN, non_negative_int, positive_int


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``demo`` on the ``torchloom`` command's subparsers; its handler is ``run``."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "demo", help="generate data, train a tiny CNN for one epoch, report"
    )
    parser.add_argument(
        "--images",
        type=positive_int,
        default=sum(DEMO_COUNTS),
        help=f"number of images to generate (default {sum(DEMO_COUNTS)})",
    )
    parser.add_argument(
        "--workers", type=non_negative_int, default=2, help="DataLoader worker processes (default 2; 0: none)"
    )
    parser.add_argument(
        "--batch-size", type=positive_int, default=64, help="samples per training batch (default 64)"
    )
    parser.add_argument(
        "--seed",
        type=non_negative_int,
        default=0,
        help="seed of the generated data, the split and the training (default 0)",
    )
    parser.add_argument(
        "--out", default=DEFAULT_OUT, help=f"folder for the report and plots (default ./{DEFAULT_OUT})"
    )
    parser.set_defaults(handler=run, parser=parser)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run ``torchloom demo`` with parsed arguments; returns the exit status."""
    smallest = MIN_IMAGES_PER_CLASS * len(DEMO_COUNTS)
    if args.images < smallest:
        args.parser.error(f"--images must be at least {smallest}, got {args.images}")
    total = sum(DEMO_COUNTS)
    counts = [max(MIN_IMAGES_PER_CLASS, round(count * args.images / total)) for count in DEMO_COUNTS]
    run_demo(
        counts=counts, batch_size=args.batch_size, num_workers=args.workers, seed=args.seed, out=args.out
    )
    return EXIT_CLEAN
