"""TableDataset: the rows of a table (Arrow, CSV, Parquet, JSON) as dict samples.

Columns are held as numpy arrays (numbers, booleans) or :class:`torchloom.datasets.StringColumn`
(text), so workers share them without copy-on-write growth. Missing numbers are NaN; missing
text is ``None``; other column types (lists, structs) stay Arrow arrays, read per row.

Example:
    >>> import pyarrow as pa
    >>> from torchloom import TableDataset
    >>> rows = TableDataset(pa.table({"id": [3, 4], "title": ["bolt", None], "price": [1.5, None]}))
    >>> rows[1]
    {'id': 4, 'title': None, 'price': nan}
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
from torch.utils.data import Dataset

from torchloom.datasets.index import StringColumn
from torchloom.datasets.options import object_store, takes_no_sample_options
from torchloom.errors import FieldNotFoundError, SampleIndexError
from torchloom.io.files import is_url
from torchloom.io.objects import ObjectRoot, ObjectStore
from torchloom.io.table import as_id_array, read_table


class TableColumn:
    """One column's values in compact storage, with nulls known per row."""

    def __init__(self, array: pa.ChunkedArray) -> None:
        if pa.types.is_dictionary(array.type):
            array = pa.chunked_array(
                [c.dictionary_decode() for c in array.chunks], type=array.type.value_type
            )
        self.type = array.type
        self.arrow = array
        self.nulls = array.is_null().to_numpy(zero_copy_only=False) if array.null_count else None
        self.values: np.ndarray | StringColumn | pa.Array
        if pa.types.is_integer(array.type) and array.null_count == 0:
            self.values = array.to_numpy().astype(np.int64)
        elif pa.types.is_integer(array.type) or pa.types.is_floating(array.type):
            self.values = array.cast(pa.float64()).to_numpy(zero_copy_only=False)
        elif pa.types.is_boolean(array.type) and array.null_count == 0:
            self.values = array.to_numpy(zero_copy_only=False).astype(bool)
        elif pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
            self.values = StringColumn.from_arrow(array.fill_null(""))
        else:
            self.values = array.combine_chunks() if array.num_chunks else pa.array([], array.type)

    def __getitem__(self, row: int) -> Any:
        if isinstance(self.values, StringColumn):
            return None if self.nulls is not None and self.nulls[row] else self.values[row]
        if isinstance(self.values, np.ndarray):
            return self.values[row].item()
        return self.values[row].as_py()

    def __len__(self) -> int:
        return len(self.values)


class TableDataset(Dataset[dict[str, Any]]):
    """Each row of a table as ``{column: value}``; ``columns`` picks and orders the columns.

    ``id_column`` is read as an id: from CSV as text first (``"007"`` keeps its zeros), then as
    integers when every value is a canonical integer. A table URL (``s3://bucket/parts.parquet``)
    is read in one GET from the store ``storage_options`` reaches (fsspec options or an
    :class:`~torchloom.io.ObjectStore`; default: credentials from the environment).

    Example:
        >>> import os, tempfile
        >>> from torchloom import TableDataset
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = os.path.join(folder, "parts.csv")
        ...     _ = open(path, "w").write("id,name,price\\n007,bolt,1.5\\n012,nut,0.25\\n")
        ...     parts = TableDataset(path, columns=["id", "price"], id_column="id")
        >>> len(parts), parts[0]
        (2, {'id': '007', 'price': 1.5})
    """

    @takes_no_sample_options(
        "its rows are read whole at construction: nothing is decoded or can fail per row (wrap it in a "
        "Dataset of your own to transform rows)"
    )
    def __init__(
        self,
        table: pa.Table | str | os.PathLike[str],
        *,
        columns: list[str] | None = None,
        id_column: str | None = None,
        storage_options: Mapping[str, Any] | ObjectStore | None = None,
    ) -> None:
        self.source = "<table>" if isinstance(table, pa.Table) else os.fspath(table)
        text = [id_column] if id_column is not None else []
        store = object_store(storage_options)
        if isinstance(table, pa.Table):
            loaded = table
        elif is_url(self.source):
            where = ObjectRoot(self.source.rsplit("/", 1)[0], store, confined=False)
            loaded = read_table(self.source, string_columns=text, inside=where)
        else:
            loaded = read_table(self.source, string_columns=text)
        self.id_column = id_column
        if id_column is not None and id_column in loaded.column_names:
            ids = as_id_array(loaded.column(id_column))
            loaded = loaded.set_column(loaded.column_names.index(id_column), id_column, ids)
        names = columns if columns is not None else loaded.column_names
        missing = [name for name in names if name not in loaded.column_names]
        if missing:
            raise FieldNotFoundError(
                f"table {self.source!r} lacks columns {missing}; it has {loaded.column_names}"
            )
        self.columns = {name: TableColumn(loaded.column(name)) for name in names}
        self._length = loaded.num_rows

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, row: int) -> dict[str, Any]:
        index = int(row)
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise SampleIndexError(f"row {int(row)} out of range for a table of {self._length} rows")
        return {name: column[index] for name, column in self.columns.items()}

    def join_keys(self, name: str) -> pa.Array:
        """Column ``name`` as Arrow with its nulls, as ids (see :func:`torchloom.io.table.as_id_array`)."""
        if name not in self.columns:
            raise FieldNotFoundError(
                f"table {self.source!r} has no column {name!r}; it has {list(self.columns)}"
            )
        return as_id_array(self.columns[name].arrow)

    def column(self, name: str) -> np.ndarray | StringColumn | pa.Array:
        """The stored values of column ``name`` (used for join keys)."""
        if name not in self.columns:
            raise FieldNotFoundError(
                f"table {self.source!r} has no column {name!r}; it has {list(self.columns)}"
            )
        return self.columns[name].values

    def __repr__(self) -> str:
        return f"TableDataset({self.source!r}, {len(self)} rows, columns={list(self.columns)})"
