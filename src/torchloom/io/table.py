"""Read manifests (JSON, JSONL, CSV, Parquet) into pyarrow tables.

Example:
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "m.csv")
    >>> _ = open(path, "w").write("image,label\\na.jpg,cat\\n")
    >>> read_table(path).column_names
    ['image', 'label']
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pa_parquet

from torchloom.errors import ManifestError

MANIFEST_SUFFIXES = (".json", ".jsonl", ".ndjson", ".csv", ".tsv", ".parquet", ".pq")


def read_table(path: str | os.PathLike[str], *, string_columns: Sequence[str] = ()) -> pa.Table:
    """Read a manifest file into a table, choosing the format from its extension.

    ``.json`` may hold a list of objects or one object per line; ``.jsonl``/``.ndjson`` hold one
    object per line; ``.csv``/``.tsv`` have a header row (empty cells are missing values, and
    ``string_columns`` are kept as text rather than guessed as numbers); ``.parquet``/``.pq`` are
    Parquet.
    """
    text_path = os.fspath(path)
    suffix = os.path.splitext(text_path)[1].lower()
    if suffix not in MANIFEST_SUFFIXES:
        raise ManifestError(
            f"manifest {text_path!r} has extension {suffix!r}; expected one of {MANIFEST_SUFFIXES}"
        )
    if not os.path.isfile(text_path):
        raise FileNotFoundError(f"manifest {text_path!r} does not exist")
    try:
        if suffix in (".parquet", ".pq"):
            return pa_parquet.read_table(text_path)
        if suffix in (".csv", ".tsv"):
            options = pa_csv.ParseOptions(delimiter="\t" if suffix == ".tsv" else ",")
            convert = pa_csv.ConvertOptions(
                column_types={name: pa.string() for name in string_columns}, strings_can_be_null=True
            )
            return pa_csv.read_csv(text_path, parse_options=options, convert_options=convert)
        if suffix == ".json" and _starts_with_bracket(text_path):
            with open(text_path, encoding="utf-8") as handle:
                rows = json.load(handle)
            if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
                raise ManifestError(f"manifest {text_path!r} must be a JSON list of objects")
            if not rows:
                return pa.table({})
            # Infer the schema from every row, not the first: optional keys stay columns.
            return pa.Table.from_batches([pa.RecordBatch.from_struct_array(pa.array(rows))])
        return pa_json.read_json(text_path)
    except ManifestError:
        raise
    except (pa.ArrowException, ValueError, UnicodeDecodeError) as exc:
        raise ManifestError(f"cannot read manifest {text_path!r}: {exc}") from exc


def _starts_with_bracket(path: str) -> bool:
    with open(path, "rb") as handle:
        head = handle.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head.startswith(b"[")


def as_id_array(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Ids as Arrow: integers stay integers (int64); text whose every value is a canonical
    integer (``"10"``, not ``"007"``) becomes int64, so ids read from CSV match ids from Parquet;
    other text stays text. Nulls stay nulls.

    Example:
        >>> as_id_array(pa.array(["10", "-3", None])).to_pylist(), as_id_array(pa.array(["007"])).to_pylist()
        ([10, -3, None], ['007'])
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks else pa.array([], array.type)
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if pa.types.is_integer(array.type):
        if pa.types.is_unsigned_integer(array.type) and len(array) and (pc.max(array).as_py() or 0) >= 2**63:
            raise ManifestError("ids above 2**63 - 1 cannot be held as int64; store them as text")
        return array.cast(pa.int64())
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        text = array.cast(pa.large_string())
        valid = text.drop_null()
        if len(valid) and pc.all(pc.match_substring_regex(valid, r"^-?(0|[1-9][0-9]{0,17})$")).as_py():
            return text.cast(pa.int64())
        return text
    return array
