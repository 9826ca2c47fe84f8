"""The splits a previous ``torchloom prepare`` gave its files, so that a re-run keeps them.

A manifest that prepare wrote (``manifest.parquet``, or ``manifest.csv``, whose escaped paths are
read back as the same names: see :mod:`torchloom.tools.output_files`) names each file by its
``source`` (the path relative to RAW) and its ``split``. :func:`read_previous_splits` maps the
one to the other; :func:`previous_manifest` says which manifest a run reads.

Example:
    >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq
    >>> path = os.path.join(tempfile.mkdtemp(), "manifest.parquet")
    >>> pq.write_table(pa.table({"source": ["a.jpg", "b.jpg"], "split": ["train", "val"]}), path)
    >>> read_previous_splits(path, ("train", "val", "test"))
    {'a.jpg': 0, 'b.jpg': 1}
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from torchloom.errors import ConfigError, ManifestError
from torchloom.io.table import read_table
from torchloom.tools.output_files import PATH_ESCAPE

#: The manifest's columns a previous split is read from.
SOURCE_COLUMN, SPLIT_COLUMN = "source", "split"


def previous_manifest(out: str, previous: str | None) -> str | None:
    """The manifest whose splits a run keeps: ``previous`` when given, else ``OUT/manifest.parquet``
    when an earlier run wrote one, else none."""
    if previous is not None:
        return previous
    written = os.path.join(out, "manifest.parquet")
    return written if os.path.isfile(written) else None


def read_previous_splits(path: str, split_names: Sequence[str]) -> dict[str, int]:
    """``{source: split number}`` of the manifest at ``path`` (split numbers index
    ``split_names``). A manifest without the columns, naming a file twice, or using a split this
    run does not have is refused, naming the file and the fix."""
    try:
        table = read_table(path, string_columns=(SOURCE_COLUMN, SPLIT_COLUMN))
    except ManifestError as error:
        raise ManifestError(
            f"{error}; this is the previous manifest whose splits the run keeps: restore it, pass "
            "--previous with another manifest that torchloom prepare wrote, or delete it to split afresh"
        ) from error
    missing = [name for name in (SOURCE_COLUMN, SPLIT_COLUMN) if name not in table.column_names]
    if missing:
        raise ManifestError(
            f"previous manifest {path!r} has no {' or '.join(map(repr, missing))} column (columns: "
            f"{table.column_names}); pass a manifest.parquet or manifest.csv that torchloom prepare wrote"
        )
    for name in (SOURCE_COLUMN, SPLIT_COLUMN):
        empty = table.column(name).null_count
        if empty:
            raise ManifestError(
                f"previous manifest {path!r} has {empty} row(s) with no {name!r}; every row prepare "
                "writes has one: fill them or remove those rows"
            )
    sources = [_unescaped(str(value)) for value in table.column(SOURCE_COLUMN).to_pylist()]
    splits = [str(value) for value in table.column(SPLIT_COLUMN).to_pylist()]
    number = {name: i for i, name in enumerate(split_names)}
    unknown = sorted(set(splits) - set(number))
    if unknown:
        raise ConfigError(
            f"previous manifest {path!r} puts files in split(s) {unknown}, which --fractions "
            f"({len(split_names)} fractions: {', '.join(split_names)}) does not make; give one fraction per "
            "split it has, or write to another --out for a new split"
        )
    found: dict[str, int] = {}
    for source, split in zip(sources, splits, strict=True):
        if found.setdefault(source, number[split]) != number[split]:
            raise ManifestError(
                f"previous manifest {path!r} puts {source!r} in two splits; fix or remove that manifest"
            )
    return found


def _unescaped(source: str) -> str:
    """A CSV's path as prepare named it: without the ``./`` that keeps spreadsheets from running it."""
    return source[len(PATH_ESCAPE) :] if source.startswith(PATH_ESCAPE) else source
