"""Shard readers: a shard (local path or fsspec URL) -> an iterator of dict records.

Example:
    >>> import tempfile, os
    >>> from torchloom.streaming import read_jsonl
    >>> path = os.path.join(tempfile.mkdtemp(), "part.jsonl")
    >>> _ = open(path, "w").write('{"x": 1}\\n{"x": 2}\\n')
    >>> list(read_jsonl(path))
    [{'x': 1}, {'x': 2}]
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any, BinaryIO, Protocol

import fsspec
import pyarrow as pa
import pyarrow.parquet as pa_parquet

from torchloom.errors import ManifestError
from torchloom.io.files import open_file
from torchloom.io.table import csv_problem_line, read_csv_as_text, typed_text_columns

Reader = Callable[[str], Iterator[Any]]


class BuiltinReader(Protocol):
    """A built-in shard reader: a shard and the fsspec options of a URL one -> its records.

    Example:
        >>> from torchloom.streaming import BuiltinReader, read_jsonl
        >>> reader: BuiltinReader = read_jsonl
        >>> reader.__name__
        'read_jsonl'
    """

    def __call__(self, shard: str, *, storage_options: Mapping[str, Any] | None = None) -> Iterator[Any]: ...


@contextlib.contextmanager
def _open_shard(shard: str, storage_options: Mapping[str, Any] | None) -> Iterator[BinaryIO]:
    """A shard's bytes: a local path (or ``file://`` URL) through the file layer, opened once and
    checked on its descriptor (a FIFO would block the reader forever); other URLs through fsspec,
    with ``storage_options`` (credentials, ``client_kwargs={"endpoint_url": ...}``)."""
    if "://" in shard and not shard.startswith("file://"):
        with fsspec.open(shard, "rb", **dict(storage_options or {})) as remote:
            yield remote
        return
    with open_file(shard.removeprefix("file://")) as local:
        yield local


def read_jsonl(shard: str, *, storage_options: Mapping[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """One JSON object per line (a BOM allowed); blank lines are skipped; a bad line names the
    shard and line.

    Example:
        >>> import os, tempfile
        >>> from torchloom.streaming import read_jsonl
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = os.path.join(folder, "part-0.jsonl")
        ...     _ = open(path, "w").write('{"id": 1, "text": "bolt"}\\n\\n{"id": 2, "text": "nut"}\\n')
        ...     print([record["text"] for record in read_jsonl(path)])
        ['bolt', 'nut']
    """
    with _open_shard(shard, storage_options) as raw, io.TextIOWrapper(raw, encoding="utf-8-sig") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise ManifestError(f"shard {shard!r} line {number}: invalid JSON ({exc})") from exc


def read_csv(shard: str, *, storage_options: Mapping[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """CSV with a header row. Values are typed as in manifests: a column of canonical integers
    becomes ints, of numbers floats; anything else, a code like ``007`` included, stays text.

    Example:
        >>> import os, tempfile
        >>> from torchloom.streaming import read_csv
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = os.path.join(folder, "part-0.csv")
        ...     _ = open(path, "w").write("code,count,price\\n007,3,1.5\\n012,4,2\\n")
        ...     print(list(read_csv(path)))
        [{'code': '007', 'count': 3, 'price': 1.5}, {'code': '012', 'count': 4, 'price': 2.0}]
    """
    with _open_shard(shard, storage_options) as handle:
        data = handle.read()
    try:
        table = read_csv_as_text(io.BytesIO(data))
    except (pa.ArrowException, ValueError) as exc:
        raise ManifestError(
            f"shard {shard!r}{csv_problem_line(data)}: cannot read it as CSV ({exc})"
        ) from exc
    yield from typed_text_columns(table).to_pylist()


def read_parquet(
    shard: str, *, storage_options: Mapping[str, Any] | None = None
) -> Iterator[dict[str, Any]]:
    """Parquet, read one row group at a time.

    Example:
        >>> import os, tempfile
        >>> import pyarrow as pa, pyarrow.parquet as pq
        >>> from torchloom.streaming import read_parquet
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = os.path.join(folder, "part-0.parquet")
        ...     pq.write_table(pa.table({"id": [1, 2, 3]}), path, row_group_size=2)
        ...     print(list(read_parquet(path)))
        [{'id': 1}, {'id': 2}, {'id': 3}]
    """
    with _open_shard(shard, storage_options) as handle:
        try:
            parquet = pa_parquet.ParquetFile(handle)
            for group in range(parquet.num_row_groups):
                rows = parquet.read_row_group(group).to_pylist()
                yield from rows
        except (pa.ArrowException, OSError) as exc:
            raise ManifestError(f"shard {shard!r}: cannot read it as Parquet ({exc})") from exc


READERS: dict[str, BuiltinReader] = {
    ".jsonl": read_jsonl,
    ".ndjson": read_jsonl,
    ".csv": read_csv,
    ".parquet": read_parquet,
    ".pq": read_parquet,
}


def reader_for(shard: str) -> BuiltinReader:
    """The built-in reader for a shard's extension.

    Example:
        >>> from torchloom.streaming import reader_for
        >>> reader_for("s3://bucket/train/part-0.parquet").__name__, reader_for("part-1.JSONL").__name__
        ('read_parquet', 'read_jsonl')
    """
    suffix = os.path.splitext(shard.split("?", 1)[0])[1].lower()
    if suffix not in READERS:
        raise ManifestError(
            f"no built-in reader for shard {shard!r} (extension {suffix!r}); pass reader= "
            f"(a callable shard -> iterator of records) or use one of {sorted(READERS)}"
        )
    return READERS[suffix]
