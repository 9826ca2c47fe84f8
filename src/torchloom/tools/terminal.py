"""How the `torchloom` commands write: rich tables on a terminal, aligned plain text when piped.

Every command prints through one :class:`Output`, so a person at a terminal gets coloured tables
and a progress bar, and a pipe (``torchloom doctor data | grep``) gets plain aligned columns with
no box drawing and no escape codes. Exit statuses are shared by every subcommand, and so is the one
line a command prints when it cannot go on, with its status (:func:`fail`): 2 when the command was
given something it cannot use (a :class:`~torchloom.errors.ConfigError`: a bad argument, or a data
layout the arguments do not fit, such as a split root without ``--split``), 1 otherwise. File
names that are not valid UTF-8 (kept in ``str`` as surrogate escapes) are printed with
:func:`printable` and written into JSON with :func:`json_text`, so that every file is named and no
output stream refuses the text.

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
import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TextIO, TypeVar

from rich.console import Console
from rich.table import Table
from tqdm.auto import tqdm

from torchloom.errors import ConfigError
from torchloom.io.threads import MAX_FILE_THREADS
from torchloom.tools.storage import add_storage_arguments

EXIT_CLEAN = 0
"""Nothing wrong was found."""
EXIT_PROBLEMS = 1
"""The command ran and found problems in the data (or could not read it)."""
EXIT_USAGE = 2
"""The command line was wrong, or does not fit the data (argparse's own status for usage errors)."""

PROGRESS_DELAY_S = 1.0
"""A progress bar appears only once the work has taken this long."""

T = TypeVar("T")


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1, or a usage error naming what was given.

    Example:
        >>> positive_int("4")
        4
    """
    return _int_at_least(text, 1, "a positive integer")


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number of at least 0 (a count that may be none, a seed), or a
    usage error naming what was given.

    Example:
        >>> non_negative_int("0")
        0
    """
    return _int_at_least(text, 0, "an integer >= 0")


def _int_at_least(text: str, least: int, expected: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {value}")
    return value


def printable(text: str) -> str:
    """``text`` as any output takes it: the bytes of a file name that are not valid UTF-8 (kept in
    ``str`` as surrogate escapes) shown as ``\\xNN``.

    Example:
        >>> print(printable("caf\\udce9.jpg"), printable("猫.jpg"))
        caf\\xe9.jpg 猫.jpg
    """
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that no file name decodes to
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def json_text(document: object) -> str:
    """``document`` as indented JSON that any output takes: non-ASCII text as it is, a file name's
    bytes that are not valid UTF-8 as ``\\udcNN`` escapes, which :func:`json.loads` turns back into
    the very name Python uses for that file.

    Example:
        >>> text = json_text({"path": "caf\\udce9.jpg"})
        >>> "\\\\udce9" in text, json.loads(text)["path"] == "caf\\udce9.jpg"
        (True, True)
    """
    return json.dumps(document, indent=2, ensure_ascii=False).encode("utf-8", "backslashreplace").decode()


def fail(command: str, error: BaseException, *, usage: bool | None = None) -> int:
    """Print the one line a command prints when it cannot go on, ``torchloom <command>: <error>``,
    on stderr; returns the exit status: :data:`EXIT_USAGE` for a
    :class:`~torchloom.errors.ConfigError` (or with ``usage=True``: a file named on the command
    line that is not there), :data:`EXIT_PROBLEMS` for anything else.

    Example:
        >>> import contextlib, io
        >>> with contextlib.redirect_stderr(io.StringIO()) as err:
        ...     fail("doctor", OSError("disk full")), fail("show", ConfigError("--n must be >= 1"))
        (1, 2)
        >>> err.getvalue().splitlines()
        ['torchloom doctor: OSError: disk full', 'torchloom show: ConfigError: --n must be >= 1']
    """
    print(f"torchloom {command}: {type(error).__name__}: {printable(str(error))}", file=sys.stderr)
    if usage is None:
        usage = isinstance(error, ConfigError)
    return EXIT_USAGE if usage else EXIT_PROBLEMS


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """The DATA argument of the commands that read a dataset as FolderDataset or ManifestDataset
    would (a local path or a URL), ``--split``, the split folder to read when DATA is a split root,
    ``--allow-outside-root`` and the storage options of a URL
    (:func:`~torchloom.tools.storage.add_storage_arguments`).

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> add_data_arguments(parser)
        >>> parser.parse_args(["data", "--split", "val"]).split
        'val'
    """
    parser.add_argument(
        "data",
        help="a class folder (DATA/<class>/<image>) or a manifest (.csv, .jsonl, .parquet, ...), "
        "local or a URL (s3://bucket/train)",
    )
    parser.add_argument(
        "--split", default=None, help="the split folder to read when DATA is a split root (train, val, ...)"
    )
    add_outside_root_argument(parser)
    add_storage_arguments(parser)


def add_threads_argument(parser: argparse.ArgumentParser, work: str) -> None:
    """``--threads``: how many threads do the command's file work (``work``, for its help), as
    ``num_threads=`` does; by default :func:`~torchloom.io.threads.file_threads`.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> add_threads_argument(parser, "decoding")
        >>> parser.parse_args(["--threads", "3"]).threads, parser.parse_args([]).threads
        (3, None)
    """
    parser.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help=f"threads {work} (default: one per core this process may use, at most {MAX_FILE_THREADS})",
    )


def add_outside_root_argument(parser: argparse.ArgumentParser) -> None:
    """``--allow-outside-root``: follow symlinks (and manifest paths) that lead outside DATA, as
    ``allow_outside_root=True`` does."""
    parser.add_argument(
        "--allow-outside-root",
        action="store_true",
        help="follow symlinks and manifest paths that lead outside DATA (refused by default)",
    )


def print_left_out(command: str, lines: Sequence[str]) -> None:
    """Print on stderr what a dataset left out (:meth:`torchloom.datasets.DatasetReport.summary`'s
    lines), the first prefixed ``torchloom <command>:``."""
    for number, line in enumerate(lines):
        print(f"torchloom {command}: {printable(line)}" if number == 0 else printable(line), file=sys.stderr)


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
        """Print one line of plain text (no markup is interpreted; file names made :func:`printable`)."""
        self.stream.write(printable(text) + "\n")

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
    return printable(str(value)).replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def _is_number(text: str) -> bool:
    try:
        float(text.replace(",", ""))
    except ValueError:
        return False
    return True


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())
