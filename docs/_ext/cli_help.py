"""``.. cli-help::``: the ``--help`` of ``torchloom`` and of each of its commands, at build time.

The text is what the installed parser prints, so the page cannot drift from the code. Each command
module of :data:`torchloom.tools.cli.COMMANDS` registers its own parser; a new command appears
here as soon as it is in that tuple.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from typing import Any

from generated_rst import GeneratedRst
from sphinx.application import Sphinx

from torchloom.tools.cli import COMMANDS, build_parser

#: Help text is wrapped to this width, whatever terminal builds the docs.
WIDTH = 100


@contextlib.contextmanager
def _columns(width: int) -> Iterator[None]:
    """argparse wraps to the terminal's width, read from ``COLUMNS``: pin it while formatting."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        yield
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def command_helps() -> list[tuple[str, str]]:
    """``(prog, help text)`` of ``torchloom`` and of each command, in :data:`COMMANDS` order."""
    with _columns(WIDTH):
        helps = [("torchloom", build_parser().format_help())]
        commands = argparse.ArgumentParser(prog="torchloom").add_subparsers()
        for command in COMMANDS:
            parser = command.add_parser(commands)
            helps.append((parser.prog, parser.format_help()))
    return helps


class CliHelp(GeneratedRst):
    """A section per command holding its ``--help``."""

    source = "torchloom --help"

    def lines(self) -> list[str]:
        lines: list[str] = []
        for prog, text in command_helps():
            title = f"``{prog}``"
            lines += [title, "-" * len(title), "", ".. code-block:: text", ""]
            lines += [f"   {line}" if line else "" for line in text.rstrip().splitlines()]
            lines.append("")
        return lines


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("cli-help", CliHelp)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
