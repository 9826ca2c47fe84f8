"""Declared manifest fields: which columns a ManifestDataset reads and how.

Each field compiles a manifest table into compact per-row storage plus the rows it finds
invalid (with a reason), once, at dataset construction.

Example:
    >>> import pyarrow as pa
    >>> from torchloom.datasets import FieldContext, Label
    >>> table = pa.table({"defect": ["scratch", "ok", "ok"]})
    >>> column = Label("defect").compile(table, FieldContext(root="."))
    >>> column.values.tolist(), column.classes
    ([1, 0, 0], ['ok', 'scratch'])
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from torchloom.datasets.index import StringColumn
from torchloom.datasets.url_keys import resolve_key, url_keys
from torchloom.errors import ConfigError, ManifestError, PathOutsideRootError
from torchloom.io.files import is_url, lies_inside
from torchloom.io.table import as_id_array

NanPolicy = Literal["raise", "drop", "mean", "keep"] | float
NAN_POLICIES = ("raise", "drop", "mean", "keep")
# How many offending rows an error message names before summarising.
ROWS_NAMED_IN_ERRORS = 5


@dataclass(frozen=True)
class FieldContext:
    """What fields need to know beyond the table: the folder paths are relative to and whether they
    may lead outside it (a :class:`~torchloom.ManifestDataset` builds it from its own arguments).

    Example:
        >>> import pyarrow as pa
        >>> from torchloom.datasets import FieldContext, Image
        >>> context = FieldContext(root="/data/photos", allow_outside_root=True)
        >>> Image("file").compile(pa.table({"file": ["a.jpg", "../shared/b.jpg"]}), context).values.to_list()
        ['/data/photos/a.jpg', '/data/photos/../shared/b.jpg']
    """

    root: str
    allow_outside_root: bool = False
    check_symlinks: bool = True


@dataclass
class CompiledField:
    """A field's per-row values and the rows it rejects (row number -> reason).

    Example:
        >>> import pyarrow as pa
        >>> from torchloom.datasets import FieldContext, Label
        >>> compiled = Label("kind").compile(pa.table({"kind": ["b", None, "a"]}), FieldContext(root="."))
        >>> compiled.name, compiled.values.tolist(), compiled.invalid, compiled.classes
        ('label', [1, -1, 0], {1: "label column 'kind' is empty"}, ['a', 'b'])
    """

    #: The field's name in a sample.
    name: str
    values: Any
    invalid: dict[int, str] = field(default_factory=dict)
    classes: list[Any] | None = None

    def take(self, rows: np.ndarray) -> CompiledField:
        values = self.values.take(rows) if isinstance(self.values, StringColumn) else self.values[rows]
        return CompiledField(self.name, values, {}, self.classes)


def require_column(table: pa.Table, name: str, what: str) -> pa.ChunkedArray:
    """The column ``name`` (dictionary-encoded columns decoded), or a :class:`ManifestError`
    naming it and the columns that exist."""
    if name not in table.column_names:
        raise ManifestError(
            f"{what} needs column {name!r}, which the manifest lacks; columns present: {table.column_names}"
        )
    column = table.column(name)
    if pa.types.is_dictionary(column.type):
        column = pa.chunked_array(
            [chunk.dictionary_decode() for chunk in column.chunks], type=column.type.value_type
        )
    return column


def _rows_text(rows: np.ndarray) -> str:
    named = ", ".join(str(int(row)) for row in rows[:ROWS_NAMED_IN_ERRORS])
    more = f" and {len(rows) - ROWS_NAMED_IN_ERRORS} more" if len(rows) > ROWS_NAMED_IN_ERRORS else ""
    return named + more


@dataclass(frozen=True)
class Image:
    """A column of image paths, relative to the dataset's ``root``; ``name``: the field's name in a sample.

    Example:
        >>> import pyarrow as pa
        >>> from torchloom import Image
        >>> from torchloom.datasets import FieldContext
        >>> table = pa.table({"file": ["cat/1.jpg", "dog/2.jpg"]})
        >>> Image("file").compile(table, FieldContext(root="/data")).values.to_list()
        ['/data/cat/1.jpg', '/data/dog/2.jpg']
    """

    column: str
    name: str = "image"

    def compile(self, table: pa.Table, context: FieldContext) -> CompiledField:
        raw = require_column(table, self.column, f"Image({self.column!r})")
        if not (pa.types.is_string(raw.type) or pa.types.is_large_string(raw.type)):
            raise ManifestError(f"Image column {self.column!r} must hold strings, has {raw.type}")
        if is_url(context.root):
            return self._compile_keys(raw, context)
        values = raw.to_pylist()
        invalid: dict[int, str] = {}
        resolved: list[str] = []
        real_folders: dict[str, str] = {}  # one realpath() per folder, not per file
        for row, value in enumerate(values):
            if value is None or value == "":
                invalid[row] = f"column {self.column!r} is empty"
                resolved.append("")
                continue
            resolved.append(self._resolve(row, value, context, real_folders))
        return CompiledField(self.name, StringColumn.from_strings(resolved), invalid)

    def _compile_keys(self, raw: pa.ChunkedArray, context: FieldContext) -> CompiledField:
        """The column below a root URL, checked and joined by Arrow (see :func:`url_keys`)."""
        joined, empty_rows = url_keys(raw, context.root, allow_outside_root=context.allow_outside_root)
        invalid = {int(row): f"column {self.column!r} is empty" for row in empty_rows}
        return CompiledField(self.name, StringColumn.from_arrow(joined), invalid)

    def _resolve(self, row: int, value: str, context: FieldContext, real_folders: dict[str, str]) -> str:
        """The path of ``value`` (relative to the root, or absolute inside it), refused when it
        leads outside the root; keys below a root URL are joined to it."""
        if is_url(context.root):
            return resolve_key(row, value, context.root, allow_outside_root=context.allow_outside_root)
        if is_url(value):
            if context.allow_outside_root:
                return value
            raise PathOutsideRootError(row, value, context.root, "is a URL, and the root is a local folder")
        joined = os.path.join(context.root, value)  # an absolute value stays as it is
        if context.allow_outside_root:
            return joined
        absolute = os.path.isabs(value)
        normal = os.path.normpath(value)
        if not absolute and (normal == ".." or normal.startswith(".." + os.sep)):
            raise PathOutsideRootError(row, value, context.root, "climbs with '..'")
        plainly_inside = not absolute or lies_inside(normal, os.path.normpath(os.path.abspath(context.root)))
        if context.check_symlinks:
            real = _real_path(joined, real_folders)
            if not lies_inside(real, _real_path(context.root, real_folders)):
                why = f"is a symlink to {real!r}" if plainly_inside else "is absolute"
                raise PathOutsideRootError(row, value, context.root, why)
        elif not plainly_inside:
            raise PathOutsideRootError(row, value, context.root, "is absolute")
        return joined


def _real_path(path: str, real_folders: dict[str, str]) -> str:
    """``os.path.realpath`` with the folder part cached: one lstat per file, not per component."""
    folder, name = os.path.split(path)
    real_folder = real_folders.get(folder)
    if real_folder is None:
        real_folder = real_folders[folder] = os.path.realpath(folder)
    candidate = os.path.join(real_folder, name)
    return os.path.realpath(candidate) if os.path.islink(candidate) else os.path.normpath(candidate)


@dataclass(frozen=True)
class Label:
    """A class label column, mapped to integers.

    With ``classes`` given, a label's number is its position there and any other value makes
    the row invalid. Without, an integer column is used as is (values must be >= 0; ``classes`` is
    ``0..max``) and any other column is numbered by its sorted distinct values. Empty labels make
    the row invalid. ``name``: the field's name in a sample.

    Example:
        >>> import pyarrow as pa
        >>> from torchloom import Label
        >>> from torchloom.datasets import FieldContext
        >>> table = pa.table({"defect": ["ok", "scratch", "dent"]})
        >>> compiled = Label("defect", classes=["ok", "scratch"]).compile(table, FieldContext(root="."))
        >>> compiled.values.tolist()[:2], compiled.invalid
        ([0, 1], {2: "label 'dent' is not one of classes ['ok', 'scratch']"})
    """

    column: str
    classes: Sequence[Any] | None = None
    name: str = "label"

    def compile(self, table: pa.Table, context: FieldContext) -> CompiledField:
        raw = require_column(table, self.column, f"Label({self.column!r})")
        values = raw.combine_chunks() if raw.num_chunks else pa.array([], raw.type)
        invalid = {
            int(row): f"label column {self.column!r} is empty"
            for row in np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))
        }
        if self.classes is not None:
            classes = list(self.classes)
            try:
                positions = pc.index_in(values, value_set=pa.array(classes))
            except pa.ArrowException as exc:
                raise ManifestError(
                    f"Label({self.column!r}): classes {classes[:5]} do not match the column type "
                    f"{values.type} ({exc}); give classes of the column's type"
                ) from exc
            unknown = positions.is_null().to_numpy(zero_copy_only=False)
            for row in np.flatnonzero(unknown):
                invalid.setdefault(
                    int(row), f"label {values[int(row)].as_py()!r} is not one of classes {classes}"
                )
            labels = positions.fill_null(-1).to_numpy().astype(np.int64)
        elif pa.types.is_integer(values.type) or _integral_floats(values):
            if pa.types.is_floating(values.type):
                values = values.cast(pa.int64())
            labels = values.fill_null(-1).to_numpy().astype(np.int64)
            for row in np.flatnonzero(labels < 0):
                invalid.setdefault(int(row), f"label {int(labels[row])} is negative")
            classes = self._integer_classes(labels)
        elif pa.types.is_floating(values.type):
            floats = values.fill_null(np.nan).to_numpy(zero_copy_only=False)
            for row in np.flatnonzero(~np.isfinite(floats)):
                invalid.setdefault(int(row), f"label column {self.column!r} is {floats[row]} (not a class)")
            finite = np.isfinite(floats)
            classes = sorted(set(floats[finite].tolist()))
            labels = np.full(len(floats), -1, dtype=np.int64)
            labels[finite] = np.searchsorted(np.asarray(classes), floats[finite])
        else:
            classes = sorted(pc.unique(values.drop_null()).to_pylist())
            positions = pc.index_in(values, value_set=pa.array(classes, type=values.type))
            labels = positions.fill_null(-1).to_numpy().astype(np.int64)
        return CompiledField(self.name, labels, invalid, classes)

    def _integer_classes(self, labels: np.ndarray) -> list[int]:
        """Integer labels are class numbers: the classes are 0..max (so len(classes) is the number
        of outputs a model needs even when some label never occurs). A far outlier is refused
        rather than turned into millions of classes."""
        valid = labels[labels >= 0]
        if not len(valid):
            return []
        top = int(valid.max())
        distinct = len(np.unique(valid))
        if top + 1 > MAX_SPARSE_CLASSES and top + 1 > SPARSE_CLASS_FACTOR * distinct:
            row = int(np.flatnonzero(labels == top)[0])
            raise ManifestError(
                f"Label({self.column!r}): integer labels are class numbers 0..max, but row {row} holds "
                f"{top:,} while only {distinct} distinct label(s) occur; fix that row, or pass "
                "Label(..., classes=[...]) listing the labels"
            )
        return list(range(top + 1))


def _integral_floats(values: pa.Array) -> bool:
    """True for a float column whose values (nulls aside) are all finite whole numbers."""
    if not pa.types.is_floating(values.type):
        return False
    floats = values.drop_null().to_numpy(zero_copy_only=False)
    return bool(len(floats)) and bool(np.all(np.isfinite(floats) & (floats == np.round(floats))))


# Integer labels may leave gaps (classes that never occur), but not a thousandfold sparse range.
MAX_SPARSE_CLASSES = 65_536
SPARSE_CLASS_FACTOR = 100


@dataclass(frozen=True)
class Numeric:
    """Numeric columns gathered into one ``float32`` vector per sample.

    ``nan`` says what a missing or NaN value does: ``"raise"`` (a :class:`ManifestError` naming
    the rows and columns), ``"drop"`` (the row is excluded and reported), ``"mean"`` (the
    column's mean over valid rows), ``"keep"`` (NaN stays) or a number to put in its place.
    ``name``: the field's name in a sample.

    Example:
        >>> import pyarrow as pa
        >>> from torchloom import Numeric
        >>> from torchloom.datasets import FieldContext
        >>> table = pa.table({"age": [30.0, None], "glucose": [5.5, 6.0]})
        >>> Numeric(["age", "glucose"], nan="mean").compile(table, FieldContext(root=".")).values.tolist()
        [[30.0, 5.5], [30.0, 6.0]]
    """

    columns: str | Sequence[str]
    name: str = "numeric"
    nan: NanPolicy = "raise"

    def __post_init__(self) -> None:
        valid_word = isinstance(self.nan, str) and self.nan in NAN_POLICIES
        valid_number = isinstance(self.nan, (int, float)) and not isinstance(self.nan, bool)
        if not (valid_word or valid_number):
            raise ConfigError(f"Invalid nan={self.nan!r}; use one of {NAN_POLICIES} or a number")

    def compile(self, table: pa.Table, context: FieldContext) -> CompiledField:
        names = [self.columns] if isinstance(self.columns, str) else list(self.columns)
        if not names:
            raise ManifestError("Numeric needs at least one column")
        matrix = np.empty((table.num_rows, len(names)), dtype=np.float32)
        for position, name in enumerate(names):
            raw = require_column(table, name, f"Numeric({name!r})")
            try:
                wide = raw.cast(pa.float64()).to_numpy(zero_copy_only=False)
            except (pa.ArrowException, ValueError) as exc:
                raise ManifestError(
                    f"Numeric column {name!r} has type {raw.type} and cannot be read as numbers ({exc})"
                ) from exc
            with np.errstate(over="ignore"):
                matrix[:, position] = wide
            overflow = np.flatnonzero(np.isfinite(wide) & ~np.isfinite(matrix[:, position]))
            if len(overflow):
                raise ManifestError(
                    f"Numeric column {name!r} holds values beyond float32's range in rows "
                    f"{_rows_text(overflow)}; rescale the column"
                )
        missing = ~np.isfinite(matrix)  # NaN, missing and +-inf all follow the nan= policy
        invalid: dict[int, str] = {}
        if missing.any():
            bad_rows = np.flatnonzero(missing.any(axis=1))
            bad_names = [names[i] for i in np.flatnonzero(missing.any(axis=0))]
            if self.nan == "raise":
                raise ManifestError(
                    f"Numeric columns {bad_names} have missing, NaN or infinite values in rows "
                    f"{_rows_text(bad_rows)}; choose Numeric(..., nan='drop' | 'mean' | 'keep' | <number>)"
                )
            if self.nan == "drop":
                for row in bad_rows:
                    columns = [names[i] for i in np.flatnonzero(missing[row])]
                    invalid[int(row)] = f"NaN, infinite or missing in {columns}"
            elif self.nan == "mean":
                with np.errstate(invalid="ignore"):
                    means = np.nanmean(np.where(missing, np.nan, matrix), axis=0)
                if np.isnan(means).any():
                    empty = [names[i] for i in np.flatnonzero(np.isnan(means))]
                    raise ManifestError(f"Numeric columns {empty} have no values to take a mean of")
                matrix = np.where(missing, means[None, :], matrix).astype(np.float32)
            elif isinstance(self.nan, (int, float)) and not isinstance(self.nan, bool):
                matrix[missing] = float(self.nan)
            elif self.nan != "keep":
                raise ConfigError(
                    f"Invalid nan={self.nan!r}; use 'raise', 'drop', 'mean', 'keep' or a number"
                )
        return CompiledField(self.name, matrix, invalid)


@dataclass(frozen=True)
class Text:
    """A text column returned as a raw string; ``missing`` is ``"raise"``, ``"drop"`` or ``"empty"``;
    ``name``: the field's name in a sample (default: the column's).

    Example:
        >>> import pyarrow as pa
        >>> from torchloom import Text
        >>> from torchloom.datasets import FieldContext
        >>> table = pa.table({"title": ["bolt", None]})
        >>> compiled = Text("title", missing="empty").compile(table, FieldContext(root="."))
        >>> compiled.name, compiled.values.to_list()
        ('title', ['bolt', ''])
    """

    column: str
    name: str | None = None
    missing: Literal["raise", "drop", "empty"] = "raise"

    def __post_init__(self) -> None:
        if self.missing not in ("raise", "drop", "empty"):
            raise ConfigError(f"Invalid missing={self.missing!r}; use 'raise', 'drop' or 'empty'")

    def compile(self, table: pa.Table, context: FieldContext) -> CompiledField:
        raw = require_column(table, self.column, f"Text({self.column!r})")
        try:
            strings = raw.cast(pa.large_string())
        except (pa.ArrowException, ValueError) as exc:
            raise ManifestError(
                f"Text column {self.column!r} of type {raw.type} is not text ({exc})"
            ) from exc
        null_rows = np.flatnonzero(strings.is_null().to_numpy(zero_copy_only=False))
        invalid: dict[int, str] = {}
        if len(null_rows):
            if self.missing == "raise":
                raise ManifestError(
                    f"Text column {self.column!r} is empty in rows {_rows_text(null_rows)}; "
                    "choose Text(..., missing='drop' | 'empty')"
                )
            if self.missing == "drop":
                invalid = {int(row): f"text column {self.column!r} is empty" for row in null_rows}
        values = StringColumn.from_arrow(strings.fill_null(""))
        return CompiledField(self.name or self.column, values, invalid)


@dataclass(frozen=True)
class JoinKey:
    """An identifier column (for joins): integers (and text that is all canonical integers, as
    CSV ids are read) become ``int``; other ids stay ``str``. Empty ids make the row invalid.
    ``name``: the field's name in a sample (default: the column's), the ``on=`` of a
    :class:`~torchloom.fusion.JoinedDataset`.

    Example:
        >>> import pyarrow as pa
        >>> from torchloom.datasets import FieldContext, JoinKey
        >>> JoinKey("id").compile(pa.table({"id": [7, 9]}), FieldContext(root=".")).values.tolist()
        [7, 9]
    """

    column: str
    name: str | None = None

    def compile(self, table: pa.Table, context: FieldContext) -> CompiledField:
        raw = require_column(table, self.column, f"JoinKey({self.column!r})")
        ids = as_id_array(raw)
        nulls = np.flatnonzero(ids.is_null().to_numpy(zero_copy_only=False))
        invalid = {int(row): f"join key column {self.column!r} is empty" for row in nulls}
        name = self.name or self.column
        if pa.types.is_integer(ids.type):
            return CompiledField(name, ids.fill_null(0).to_numpy().astype(np.int64), invalid)
        try:
            strings = ids.cast(pa.large_string()).fill_null("")
        except (pa.ArrowException, ValueError) as exc:
            raise ManifestError(
                f"JoinKey column {self.column!r} of type {raw.type} is not an id ({exc})"
            ) from exc
        return CompiledField(name, StringColumn.from_arrow(strings), invalid)


Field = Image | Label | Numeric | Text | JoinKey
