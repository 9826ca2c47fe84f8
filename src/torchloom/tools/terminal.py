"""How the `torchloom` commands write: rich tables on a terminal, aligned plain text when piped.

Every command prints through one :class:`Output`, so a person at a terminal gets coloured tables
and a progress bar, and a pipe (``torchloom doctor data | grep``) gets plain aligned columns with
no box drawing and no escape codes. Exit statuses are shared by every subcommand.

Example:
    >>> import io
    >>> out = Output(io.StringIO(), rich=False)
    >>> out.table("classes", ["class", "files"], [["cat", 3], ["dog", 12]])
    >>> print(out.stream.getvalue().rstrip())
    classes
    class  files
    cat        3
    dog       12
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TextIO, TypeVar

from rich.console import Console
from rich.table import Table
from tqdm.auto import tqdm

EXIT_CLEAN = 0
"""Nothing wrong was found."""
EXIT_PROBLEMS = 1
"""The command ran and found problems in the data (or could not read it)."""
EXIT_USAGE = 2
"""The command line was wrong (argparse's own status for usage errors)."""

PROGRESS_DELAY_S = 1.0
"""A progress bar appears only once the work has taken this long."""

T = TypeVar("T")


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1, or a usage error naming what was given.

    Example:
        >>> positive_int("4")
        4
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """The DATA argument of the commands that read a dataset as FolderDataset or ManifestDataset
    would, and ``--split``, the split folder to read when DATA is a split root.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> add_data_arguments(parser)
        >>> parser.parse_args(["data", "--split", "val"]).split
        'val'
    """
    parser.add_argument(
        "data", help="a class folder (DATA/<class>/<image>) or a manifest (.csv, .jsonl, .parquet, ...)"
    )
    parser.add_argument(
        "--split", default=None, help="the split folder to read when DATA is a split root (train, val, ...)"
    )


@dataclass
class Output:
    """A command's output stream: ``rich=True`` draws tables, ``False`` prints aligned plain text.

    Example:
        >>> import io
        >>> Output.for_stream(io.StringIO()).rich  # not a terminal: plain text
        False
    """

    stream: TextIO = field(default_factory=lambda: sys.stdout)
    rich: bool = False

    @classmethod
    def for_stream(cls, stream: TextIO | None = None) -> Output:
        """Rich output when ``stream`` (default stdout) is a terminal, plain text otherwise."""
        stream = sys.stdout if stream is None else stream
        return cls(stream, rich=_is_terminal(stream))

    def line(self, text: str = "") -> None:
        """Print one line of plain text (no markup is interpreted)."""
        self.stream.write(text + "\n")

    def table(self, title: str, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
        """Print a table; numbers are right-aligned, everything else left-aligned."""
        cells = [[_cell(value) for value in row] for row in rows]
        numeric = [bool(cells) and all(_is_number(row[i]) for row in cells) for i in range(len(columns))]
        if self.rich:
            table = Table(title=title, title_justify="left")
            for name, right in zip(columns, numeric, strict=True):
                table.add_column(name, justify="right" if right else "left", overflow="fold")
            for row in cells:
                table.add_row(*row)
            Console(file=self.stream, highlight=False).print(table)
            return
        widths = [max([len(name)] + [len(row[i]) for row in cells]) for i, name in enumerate(columns)]
        self.line(title)
        for row in [list(columns), *cells]:
            padded = [
                text.rjust(width) if right and row is not columns else text.ljust(width)
                for text, width, right in zip(row, widths, numeric, strict=True)
            ]
            self.line("  ".join(padded).rstrip())

    def progress(
        self, items: Iterable[T], *, total: int | None, description: str, unit: str = "file"
    ) -> Iterator[T]:
        """Iterate ``items`` with a progress bar on stderr, shown only when the work takes over a second."""
        yield from tqdm(
            items,
            total=total,
            desc=description,
            unit=unit,
            delay=PROGRESS_DELAY_S,
            leave=False,
            disable=not _is_terminal(sys.stderr),
        )


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    return str(value).replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def _is_number(text: str) -> bool:
    try:
        float(text.replace(",", ""))
    except ValueError:
        return False
    return True


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())
