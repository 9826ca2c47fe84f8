"""Shard readers: a shard (local path or fsspec URL) -> an iterator of dict records.

Example:
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "part.jsonl")
    >>> _ = open(path, "w").write('{"x": 1}\\n{"x": 2}\\n')
    >>> list(read_jsonl(path))
    [{'x': 1}, {'x': 2}]
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import fsspec
import pyarrow.csv as pa_csv
import pyarrow.parquet as pa_parquet

from torchloom.errors import ManifestError

Reader = Callable[[str], Iterator[Any]]


def read_jsonl(shard: str) -> Iterator[dict[str, Any]]:
    """One JSON object per line; blank lines are skipped; a bad line names the shard and line."""
    with fsspec.open(shard, "rt", encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise ManifestError(f"shard {shard!r} line {number}: invalid JSON ({exc})") from exc


def read_csv(shard: str) -> Iterator[dict[str, Any]]:
    """CSV with a header row, read in record batches."""
    with fsspec.open(shard, "rb") as handle:
        reader = pa_csv.open_csv(io.BytesIO(handle.read()))
        for batch in reader:
            yield from batch.to_pylist()


def read_parquet(shard: str) -> Iterator[dict[str, Any]]:
    """Parquet, read one row group at a time."""
    with fsspec.open(shard, "rb") as handle:
        parquet = pa_parquet.ParquetFile(handle)
        for group in range(parquet.num_row_groups):
            yield from parquet.read_row_group(group).to_pylist()


READERS: dict[str, Reader] = {
    ".jsonl": read_jsonl,
    ".ndjson": read_jsonl,
    ".csv": read_csv,
    ".parquet": read_parquet,
    ".pq": read_parquet,
}


def reader_for(shard: str) -> Reader:
    """The built-in reader for a shard's extension."""
    suffix = os.path.splitext(shard.split("?", 1)[0])[1].lower()
    if suffix not in READERS:
        raise ManifestError(
            f"no built-in reader for shard {shard!r} (extension {suffix!r}); pass reader= "
            f"(a callable shard -> iterator of records) or use one of {sorted(READERS)}"
        )
    return READERS[suffix]
