"""The ``torchloom`` command line: ``doctor``, ``prepare``, ``show``, ``bench``, ``cache``, ``demo``,
``check-resume``.

Each command is a module with ``add_parser`` (its arguments) and ``run`` (its handler).

Example:
    >>> build_parser().parse_args(["demo", "--workers", "0"]).workers
    0
    >>> build_parser().parse_args(["cache", "data", "--out", "cache", "--max-side", "256"]).max_side
    256
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from torchloom.tools.bench import command as bench
from torchloom.tools.cache import command as cache
from torchloom.tools.check_resume import command as check_resume
from torchloom.tools.demo import command as demo
from torchloom.tools.doctor import command as doctor
from torchloom.tools.prepare import command as prepare
from torchloom.tools.show import command as show

COMMANDS = (demo, bench, cache, check_resume, doctor, prepare, show)


def build_parser() -> argparse.ArgumentParser:
    """The ``torchloom`` argument parser, one subcommand per module of :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="torchloom", description="Messy data into fast, correct PyTorch batches."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``torchloom`` script; returns the exit status."""
    args = build_parser().parse_args(argv)
    status: int = args.handler(args)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
