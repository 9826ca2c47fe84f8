"""How the commands write their files: whole or not at all, under any name, safe to open, and
never into the data they read (:func:`refuse_output_inside`).

- **Atomically**: :func:`write_atomically` writes beside the target and renames, so a reader
  never sees half a file and a write that fails (a bug, a full disk) leaves the previous file as
  it was, never an empty one.
- **Through an opened file**: the writer gets a handle, not a name, so an output folder whose
  name is not valid UTF-8 (kept in ``str`` as surrogate escapes) works with every library,
  pyarrow included (it encodes names it is given as strict UTF-8).
- **CSV a spreadsheet opens as data**: Excel, LibreOffice and Google Sheets run a cell that
  begins with ``=``, ``+``, ``-``, ``@`` (or a tab or carriage return) as a formula, so a file
  named ``=HYPERLINK(...).jpg`` would run when a CSV naming it is opened (CSV injection).
  :func:`write_csv` escapes such text cells: a path gets ``./`` before it (the same file, and
  :class:`torchloom.ManifestDataset` reads it as before), other text a ``'`` (OWASP's advice).
  Numbers are not escaped: ``-1.5`` is a number to a spreadsheet, not a formula.

Example:
    >>> import io, pyarrow as pa
    >>> table = pa.table({"image": ["-1.jpg", "ok.jpg"], "label": ["=cmd|' /C calc'!A0", "-1"]})
    >>> handle = io.BytesIO()
    >>> write_csv(table, handle, path_columns=("image",))
    >>> print(handle.getvalue().decode().strip())
    "image","label"
    "./-1.jpg","'=cmd|' /C calc'!A0"
    "ok.jpg","-1"
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from typing import BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from torchloom.errors import ConfigError
from torchloom.io.files import lies_inside

#: Characters that make a spreadsheet read a cell as a formula when it begins with one.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_FORMULA_START = r"^[=+\-@\t\r]"  # FORMULA_STARTS, as a pattern
_NUMBER = r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$"
#: What goes before a path cell that would be a formula, and before any other such text cell.
PATH_ESCAPE, TEXT_ESCAPE = "./", "'"


def refuse_output_inside(data: str, out: str, name: str, why: str) -> None:
    """A :class:`ConfigError` when the folder ``out`` is (or lies inside) the folder ``data``,
    symlinks resolved; ``name`` is what the command calls ``data``, ``why`` says the harm.

    Example:
        >>> refuse_output_inside("/data", "/reports", "DATA", "it would be read as data")
    """
    if lies_inside(os.path.realpath(out), os.path.realpath(data)):
        raise ConfigError(f"--out {out!r} is inside {name} {data!r} ({why}); choose a folder outside it")


def write_atomically(path: str, write: Callable[[BinaryIO], object]) -> None:
    """Call ``write`` with a file opened beside ``path``, then rename it to ``path``; if ``write``
    raises, the file is removed and ``path`` is untouched.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "report.json")
        >>> write_atomically(path, lambda handle: handle.write(b"{}"))
        >>> open(path).read(), os.listdir(os.path.dirname(path))
        ('{}', ['report.json'])
    """
    temporary = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp-{os.getpid()}")
    try:
        with open(temporary, "wb") as handle:
            write(handle)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def escape_cell(text: str, *, path: bool = False) -> str:
    """``text`` as a CSV cell no spreadsheet runs as a formula (see the module docstring).

    Example:
        >>> escape_cell("@SUM(A1)"), escape_cell("-3.5"), escape_cell("=x.jpg", path=True)
        ("'@SUM(A1)", '-3.5', './=x.jpg')
    """
    if not text.startswith(FORMULA_STARTS) or re.match(_NUMBER, text):
        return text
    return (PATH_ESCAPE if path else TEXT_ESCAPE) + text


def write_csv(table: pa.Table, handle: BinaryIO, *, path_columns: Sequence[str] = ()) -> None:
    """Write ``table`` as CSV to the opened ``handle``, every text cell escaped by
    :func:`escape_cell` (as a path in ``path_columns``)."""
    columns = []
    for name, column in zip(table.column_names, table.columns, strict=True):
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            formula = pc.and_(
                pc.match_substring_regex(column, _FORMULA_START),
                pc.invert(pc.match_substring_regex(column, _NUMBER)),
            )
            prefix = PATH_ESCAPE if name in path_columns else TEXT_ESCAPE
            column = pc.if_else(formula, pc.binary_join_element_wise(prefix, column, ""), column)
        columns.append(column)
    pa_csv.write_csv(pa.table(columns, names=table.column_names), handle)
