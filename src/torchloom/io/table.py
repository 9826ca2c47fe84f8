"""Read manifests (JSON, JSONL, CSV, Parquet) into pyarrow tables.

Example:
    >>> import tempfile, os
    >>> from torchloom.io import read_table
    >>> path = os.path.join(tempfile.mkdtemp(), "m.csv")
    >>> _ = open(path, "w").write("image,label\\na.jpg,cat\\n")
    >>> read_table(path).column_names
    ['image', 'label']
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence
from typing import BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pa_parquet

from torchloom.errors import ManifestError
from torchloom.io.files import Inside, is_url, open_file, read_bytes

MANIFEST_SUFFIXES = (".json", ".jsonl", ".ndjson", ".csv", ".tsv", ".parquet", ".pq")
# Bytes copied at a time from a manifest into Arrow's memory.
_COPY_CHUNK = 1 << 20


def read_table(
    path: str | os.PathLike[str], *, string_columns: Sequence[str] = (), inside: Inside = None
) -> pa.Table:
    """Read a manifest file into a table, choosing the format from its extension.

    ``.json`` may hold a list of objects or one object per line; ``.jsonl``/``.ndjson`` hold one
    object per line; ``.csv``/``.tsv`` have a header row (empty cells are missing values, and
    ``string_columns`` are kept as text rather than guessed as numbers); ``.parquet``/``.pq`` are
    Parquet. A URL is read with one GET, from the store of ``inside`` (an
    :class:`~torchloom.io.ObjectRoot`) when given.

    Example:
        >>> import os, tempfile
        >>> from torchloom.io import read_table
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = os.path.join(folder, "m.csv")
        ...     _ = open(path, "w").write("id,image,label\\n007,a.jpg,cat\\n012,b.jpg,\\n")
        ...     table = read_table(path, string_columns=["id"])
        >>> table.num_rows, table.column("id").to_pylist(), table.column("label").to_pylist()
        (2, ['007', '012'], ['cat', None])
    """
    text_path = os.fspath(path)
    suffix = os.path.splitext(text_path)[1].lower()
    if suffix not in MANIFEST_SUFFIXES:
        raise ManifestError(
            f"manifest {text_path!r} has extension {suffix!r}; expected one of {MANIFEST_SUFFIXES}"
        )
    if is_url(text_path):
        data = arrow_buffer(io.BytesIO(read_bytes(text_path, inside=inside)))
    else:
        with open_file(text_path, inside=inside) as handle:  # opened once, read once, into Arrow's memory
            data = arrow_buffer(handle)
    try:
        return _read_buffer_table(text_path, suffix, data, string_columns)
    except ManifestError:
        raise
    except (pa.ArrowException, ValueError, UnicodeDecodeError, OSError) as exc:
        # The bytes are in memory: an OSError here is Arrow's word for a corrupt file, not I/O.
        raise ManifestError(f"cannot read manifest {text_path!r}: {exc}") from exc


def arrow_buffer(handle: BinaryIO) -> pa.Buffer:
    """The rest of an open file's bytes, copied into memory Arrow owns, for Arrow's readers.

    Arrow's readers work on Arrow's own threads, and the last task to finish drops the reader's
    references there, after the read has returned. Were one a Python object (a file, ``bytes``),
    that thread would take the GIL to release it; at interpreter exit Python ends a thread that
    asks for the GIL, inside Arrow's destructor, and the process aborts ("terminate called
    without an active exception"). Memory Arrow owns is released without the GIL.

    Example:
        >>> import io
        >>> arrow_buffer(io.BytesIO(b"a,b\\n1,2\\n")).to_pybytes()
        b'a,b\\n1,2\\n'
    """
    sink = pa.BufferOutputStream()
    while chunk := handle.read(_COPY_CHUNK):
        sink.write(chunk)
    buffer: pa.Buffer = sink.getvalue()
    return buffer


def _read_buffer_table(path: str, suffix: str, data: pa.Buffer, string_columns: Sequence[str]) -> pa.Table:
    if suffix in (".parquet", ".pq"):
        return pa_parquet.read_table(pa.BufferReader(data))
    if suffix in (".csv", ".tsv"):
        options = pa_csv.ParseOptions(delimiter="\t" if suffix == ".tsv" else ",")
        convert = pa_csv.ConvertOptions(
            column_types={name: pa.string() for name in string_columns}, strings_can_be_null=True
        )
        try:
            return pa_csv.read_csv(pa.BufferReader(data), parse_options=options, convert_options=convert)
        except pa.ArrowInvalid as exc:
            line = csv_problem_line(data.to_pybytes(), options.delimiter)
            raise ManifestError(f"cannot read manifest {path!r}{line}: {exc}") from exc
    if suffix == ".json" and data[:4096].to_pybytes().lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"["):
        try:
            rows = json.loads(data.to_pybytes().decode("utf-8-sig"))
        except json.JSONDecodeError as exc:
            where = f"manifest {path!r} line {exc.lineno} column {exc.colno}"
            raise ManifestError(f"{where}: invalid JSON ({exc.msg})") from exc
        if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
            raise ManifestError(f"manifest {path!r} must be a JSON list of objects")
        return _rows_table(rows)
    try:
        return pa_json.read_json(pa.BufferReader(data))
    except pa.ArrowInvalid:
        # Arrow's reader cannot say which line failed (it counts rows within a block) and
        # refuses lines longer than its block: read line by line to load it or name the line.
        return _read_json_lines(path, io.BytesIO(data.to_pybytes()))


_CANONICAL_INT = r"^-?(0|[1-9][0-9]{0,17})$"
_CANONICAL_FLOAT = r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?$|^-?\.[0-9]+$|^(-?inf|nan)$"


def read_csv_as_text(source: io.BytesIO, delimiter: str = ",") -> pa.Table:
    """CSV bytes with every column read as text (empty cells null); the header row names them."""
    data = arrow_buffer(source)  # Arrow's threads never hold the Python object (see arrow_buffer)
    parse = pa_csv.ParseOptions(delimiter=delimiter)
    names = pa_csv.open_csv(pa.BufferReader(data), parse_options=parse).schema.names
    convert = pa_csv.ConvertOptions(column_types=dict.fromkeys(names, pa.string()), strings_can_be_null=True)
    return pa_csv.read_csv(pa.BufferReader(data), parse_options=parse, convert_options=convert)


def csv_problem_line(data: bytes, delimiter: str = ",") -> str:
    """Where a CSV that Arrow refused goes wrong, as ``" line N"`` (or ``""`` if Python's reader
    finds nothing): the first row whose field count differs from the header's, or a quoting error.

    Example:
        >>> csv_problem_line(b"a,b\\n1,2\\n3,4,5\\n")
        ' line 3'
    """
    text = data.decode("utf-8-sig", errors="replace").splitlines()
    reader = csv.reader(text, delimiter=delimiter)
    try:
        header = next(reader, None)
        for row in reader:
            if header is not None and row and len(row) != len(header):
                return f" line {reader.line_num}"
    except csv.Error:
        return f" line {reader.line_num}"
    return ""


def typed_text_columns(table: pa.Table) -> pa.Table:
    """Text columns whose every value is a canonical integer become int64, canonical numbers
    float64; others (codes like ``007``, ``+1``, ``1e``) stay text, as manifests keep them.

    Example:
        >>> table = pa.table({"a": ["1", "-2"], "b": ["007", "8"], "c": ["0.5", "2"]})
        >>> typed_text_columns(table).to_pylist()[0]
        {'a': 1, 'b': '007', 'c': 0.5}
    """
    columns = {}
    for name in table.column_names:
        column = table.column(name)
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            columns[name] = column
            continue
        valid = column.drop_null()
        if len(valid) and pc.all(pc.match_substring_regex(valid, _CANONICAL_INT)).as_py():
            columns[name] = column.cast(pa.int64())
        elif len(valid) and pc.all(pc.match_substring_regex(valid, _CANONICAL_FLOAT)).as_py():
            columns[name] = column.cast(pa.float64())
        else:
            columns[name] = column
    return pa.table(columns)


def _rows_table(rows: list[dict[str, object]]) -> pa.Table:
    if not rows:
        return pa.table({})
    # Infer the schema from every row, not the first: optional keys stay columns.
    return pa.Table.from_batches([pa.RecordBatch.from_struct_array(pa.array(rows))])


def _read_json_lines(path: str, handle: BinaryIO) -> pa.Table:
    """One JSON object per line (a BOM and very long lines allowed); a bad line is named."""
    rows: list[dict[str, object]] = []
    with io.TextIOWrapper(handle, encoding="utf-8-sig") as text:
        for number, line in enumerate(text, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ManifestError(
                    f"manifest {path!r} line {number} column {exc.colno}: invalid JSON ({exc.msg})"
                ) from exc
            if not isinstance(row, dict):
                raise ManifestError(
                    f"manifest {path!r} line {number}: expected a JSON object, got {line[:60]!r}"
                )
            rows.append(row)
    return _rows_table(rows)


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
