"""``torchloom check-resume module:function``: interrupt and resume a pipeline at every seam.

The function is ``make_loader(rank, world_size, num_workers)`` (see :func:`torchloom.check_resume`);
``--sample-id module:function`` names a function of a batch returning its samples' ids when the
batches have no ``"index"`` field.

Exit status: 0 when every case resumed exactly; 1 when one did not (each such case is printed,
with the first sample lost or repeated) or the pipeline raised; 2 for a usage error.
"""

from __future__ import annotations

import argparse
from typing import Any

from torchloom.errors import TorchloomError
from torchloom.resume.check import check_resume
from torchloom.tools.check_resume.entry import load_entry
from torchloom.tools.terminal import (
    EXIT_CLEAN,
    EXIT_PROBLEMS,
    fail,
    non_negative_int,
    positive_int,
    printable,
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``check-resume`` on the ``torchloom`` command's subparsers; its handler is ``run``."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "check-resume", help="prove that a pipeline resumes exactly: interrupt it at every seam and compare"
    )
    parser.add_argument("entry", help="make_loader(rank, world_size, num_workers), as module:function")
    parser.add_argument("--epochs", type=positive_int, default=2, help="epochs of the reference run")
    parser.add_argument(
        "--world-sizes",
        type=positive_int,
        nargs="+",
        default=[1],
        help="ranks to resume with (first: reference)",
    )
    parser.add_argument(
        "--num-workers", type=non_negative_int, nargs="+", default=[0], help="workers to resume with"
    )
    parser.add_argument(
        "--stops", type=non_negative_int, nargs="*", default=[], help="further steps to stop at"
    )
    parser.add_argument("--random-stops", type=non_negative_int, default=2, help="random steps to stop at")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seeds the random stops")
    parser.add_argument("--sample-id", default=None, help="a function of a batch returning its ids")
    parser.set_defaults(handler=run, parser=parser)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run ``torchloom check-resume`` with parsed arguments; returns the exit status."""
    try:
        make_loader = load_entry(args.entry)
        sample_id = load_entry(args.sample_id) if args.sample_id else None
        report = check_resume(
            make_loader,
            epochs=args.epochs,
            world_sizes=args.world_sizes,
            num_workers=args.num_workers,
            stops=args.stops,
            random_stops=args.random_stops,
            seed=args.seed,
            sample_id=sample_id,
        )
    except TorchloomError as error:
        return fail("check-resume", error)
    print(printable(report.summary()))
    return EXIT_CLEAN if report.ok else EXIT_PROBLEMS
