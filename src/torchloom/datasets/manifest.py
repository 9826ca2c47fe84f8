"""ManifestDataset: samples described by rows of a JSON, JSONL, CSV or Parquet manifest."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from typing_extensions import Unpack

from torchloom._compat import user_stacklevel
from torchloom.datasets.base import IndexedDataset, Slot
from torchloom.datasets.fields import CompiledField, Field, FieldContext, Image, JoinKey, Label, Text
from torchloom.datasets.index import (
    DatasetReport,
    SampleIndex,
    StringColumn,
    check_image_file,
    keep_valid,
    validate_files,
)
from torchloom.datasets.options import IndexingOptions, indexing_settings
from torchloom.datasets.shared_index import built_once, shares_index
from torchloom.errors import EmptyDatasetError, FieldNotFoundError, ManifestError
from torchloom.io.file_errors import REASON_MISSING
from torchloom.io.files import Inside, is_url
from torchloom.io.image import DEFAULT_MAX_PIXELS
from torchloom.io.object_urls import root_url
from torchloom.io.objects import ObjectRoot, ObjectStore
from torchloom.io.table import read_table

DEFAULT_FIELDS: tuple[Field, ...] = (Image("image"), Label("label"))
class MissingFilesWarning(UserWarning):
    """Rows of a manifest name files that are not there: they are left out (``ds.report`` lists them)."""


#: The column of each row's file size in bytes: on an object store, what every read is checked against.
SIZE_COLUMN = "bytes"
#: Names every sample carries itself; fields may not take them.
RESERVED_NAMES = frozenset({"index", "path"})


class ManifestDataset(IndexedDataset):
    """Samples from the rows of a manifest, with declared fields.

    Each field reads its columns once, at construction, into numpy buffers: ``Image`` paths
    (relative to ``root``, by default the manifest's folder, or absolute; either must resolve
    inside ``root``), ``Label`` numbers, ``Numeric`` float32 vectors (with a NaN policy) and
    ``Text`` strings. Rows a field rejects and images that fail validation are excluded and listed
    in :attr:`report`, or raise one error listing them all with ``strict=True``; rows whose file
    does not exist are also said once, as a :class:`MissingFilesWarning` with their count. A path that
    leaves ``root`` (``..``, an absolute path elsewhere, or a symlink) always raises
    :class:`torchloom.errors.PathOutsideRootError` naming the row, unless
    ``allow_outside_root=True``. The manifest and ``root`` may be URLs (``s3://bucket/train``, with
    ``storage_options=``): rows are then keys below the root prefix, confined to it segment by
    segment, and a URL row under a local root is refused.

    On an object store (a manifest URL, or ``root`` a URL), a ``bytes`` column (:data:`SIZE_COLUMN`,
    which ``torchloom prepare`` writes) gives each row's object size: a read of an object of
    another size is an :class:`~torchloom.errors.ObjectChangedError`, and ``validate="exists"``
    sends no request for such a row (the manifest vouches for it; an object missing after all is
    a :class:`~torchloom.errors.MissingFileError` when read, under ``on_error`` as any failed read).

    Samples are dicts with one entry per field (under its ``name``), plus ``"index"`` and, with
    an image, ``"path"``.

    Args:
        manifest: a ``.json``, ``.jsonl``, ``.csv``, ``.tsv`` or ``.parquet`` file, or a pyarrow table.
        fields: the declared fields (default ``Image("image"), Label("label")``).
        root: folder image paths are relative to (default: the manifest's folder; required for
            a table).
        max_pixels: larger images are refused (decompression-bomb guard).
        exif_orientation: turn photos upright as their EXIF tag says (default).
        options: :class:`~torchloom.datasets.IndexingOptions`, as in :class:`torchloom.FolderDataset`
            (``validate`` checks the image field's files).

    Example:
        >>> import numpy as np, os, simplejpeg, tempfile
        >>> from torchloom import Image, Label, Numeric
        >>> root = tempfile.mkdtemp()
        >>> _ = open(os.path.join(root, "a.jpg"), "wb").write(
        ...     simplejpeg.encode_jpeg(np.zeros((8, 8, 3), np.uint8)))
        >>> _ = open(os.path.join(root, "m.csv"), "w").write("file,defect,size\\na.jpg,ok,1.5\\n")
        >>> dataset = ManifestDataset(os.path.join(root, "m.csv"), progress=False,
        ...     fields=[Image("file"), Label("defect"), Numeric("size")])
        >>> sample = dataset[0]
        >>> sample["image"].shape, sample["label"], sample["numeric"].tolist()
        (torch.Size([3, 8, 8]), 0, [1.5])
    """

    _reads_whole_files = True

    def __init__(
        self,
        manifest: str | os.PathLike[str] | pa.Table,
        *,
        fields: Sequence[Field] = DEFAULT_FIELDS,
        root: str | os.PathLike[str] | None = None,
        max_pixels: int = DEFAULT_MAX_PIXELS,
        exif_orientation: bool = True,
        **options: Unpack[IndexingOptions],
    ) -> None:
        sample, indexing = indexing_settings(options, what=type(self))
        if not fields:
            raise ManifestError("ManifestDataset needs at least one field, e.g. Image('path')")
        share = shares_index(indexing.share_index, manifest, root)
        table, self.source, root_path = built_once(
            lambda: _load_manifest(manifest, root, _string_columns(fields), sample.store),
            share=share and not isinstance(manifest, pa.Table),
            what=f"the manifest of ManifestDataset {_named(manifest)} (root={_named(root)})",
            store=sample.store,
        )
        self.root = root_path
        names = [f.name or getattr(f, "column", "") for f in fields]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise ManifestError(f"fields {duplicated} share a name; give each field its own name=")
        reserved = sorted(set(names) & RESERVED_NAMES)
        if reserved:
            raise ManifestError(
                f"field name(s) {reserved} are reserved for the sample's own {sorted(RESERVED_NAMES)}; "
                "give the field another name=, e.g. Text('path', name='source_path')"
            )
        images = [f for f in fields if isinstance(f, Image)]
        if len(images) > 1:
            raise ManifestError("ManifestDataset reads one Image field; join datasets for more")
        context = FieldContext(self.root, indexing.allow_outside_root)
        compiled = [f.compile(table, context) for f in fields]
        self.report = DatasetReport()
        self.image_field = images[0].name if images else None
        reasons = np.full(table.num_rows, None, dtype=object)
        for column in compiled:
            for row, reason in column.invalid.items():
                reasons[row] = reasons[row] or reason
        paths = self._image_paths(compiled, table.num_rows)
        read_root = indexing.read_root(self.root, sample.store)
        vouched = _expect_sizes(table, paths, read_root)
        if self.image_field is not None:
            pending = np.flatnonzero(reasons == None)  # noqa: E711
            if indexing.validate == "exists":  # a size from the manifest says the object is there
                pending = pending[~vouched[pending]]

            def validated() -> tuple[np.ndarray, Inside]:
                checks = validate_files(
                    [paths[int(row)] for row in pending],
                    lambda path: check_image_file(path, indexing.validate, max_pixels, inside=read_root),
                    num_threads=indexing.threads_for(read_root),
                    progress=indexing.progress and indexing.validate != "none",
                    description=f"validating {os.path.basename(self.source)}",
                )
                return checks, read_root  # with the sizes and ETags the checks saw

            what = f"ManifestDataset {self.source!r}"
            reasons[pending], read_root = built_once(validated, share=share, what=what, store=sample.store)
        keep = keep_valid(
            reasons,
            lambda row: self._row_name(row, paths),
            self.report,
            strict=indexing.strict,
            what=f"ManifestDataset {self.source!r}",
        )
        if len(keep) == 0:
            raise EmptyDatasetError(f"ManifestDataset {self.source!r} has no usable rows:\n{self.report}")
        self._warn_missing()
        self.fields = [column.take(keep) for column in compiled]
        self.rows = keep
        label = next((c for c in self.fields if c.classes is not None), None)
        self.classes = label.classes if label is not None else None
        image_column = next((c for c in self.fields if c.name == self.image_field), None)
        index = SampleIndex(
            image_column.values if image_column is not None else StringColumn.from_strings([]),
            label.values if label is not None else np.full(len(keep), -1, np.int64),
        )
        super().__init__(index, sample, max_pixels=max_pixels, exif_orientation=exif_orientation)
        self.read_root = read_root

    def _warn_missing(self) -> None:
        """Say once how many rows name files that are not there: a silent drop looks like a smaller
        dataset (a moved folder, a manifest from another machine)."""
        missing = [path for path, reason in self.report.invalid if reason.startswith(REASON_MISSING)]
        if missing:
            warnings.warn(
                f"ManifestDataset {self.source!r}: {len(missing)} row(s) name files that do not exist "
                f"(first: {missing[0]!r}) and are left out; ds.report lists them (ds.report.summary()). "
                "Fix the paths or root=, or pass strict=True to refuse such a manifest",
                MissingFilesWarning,
                stacklevel=user_stacklevel(),
            )

    def column(self, name: str) -> np.ndarray | StringColumn:
        """The values field ``name`` gives its samples, one per sample, e.g. the ids of a ``JoinKey``."""
        for field in self.fields:
            if field.name == name:
                values: np.ndarray | StringColumn = field.values
                return values
        raise FieldNotFoundError(
            f"{self!r} has no field named {name!r}; its fields: {[f.name for f in self.fields]}"
        )

    @property
    def targets(self) -> np.ndarray:
        """The label of every sample (``-1`` everywhere without a Label field)."""
        return self.index.labels

    def _image_paths(self, compiled: list[CompiledField], rows: int) -> list[str]:
        for column in compiled:
            if column.name == self.image_field:
                values: StringColumn = column.values
                return values.to_list()
        return [""] * rows

    def _row_name(self, row: int, paths: list[str]) -> str:
        return paths[row] if paths[row] else f"{self.source} row {row}"

    def _load(self, index: int, key: int, slot: Slot | None) -> dict[str, Any]:
        sample: dict[str, Any] = {}
        for column in self.fields:
            values = column.values
            if column.name == self.image_field:
                sample["path"] = values[index]
                sample[column.name] = self.load_image(values[index], self.rng(key, slot), slot)
            elif isinstance(values, StringColumn):
                sample[column.name] = values[index]
            elif values.ndim == 2:
                sample[column.name] = torch.from_numpy(values[index].copy())
            else:
                sample[column.name] = values[index].item()
        sample["index"] = key
        return sample

    def __repr__(self) -> str:
        names = [f.name for f in self.fields]
        return f"ManifestDataset({self.source!r}, {len(self)} samples, fields={names})"


def _expect_sizes(table: pa.Table, paths: list[str], read_root: Inside) -> np.ndarray:
    """Tell an object store's root the size of each row's object, from the manifest's
    :data:`SIZE_COLUMN` (``torchloom prepare`` writes it): a read of another size is then an
    ``ObjectChangedError``, and the row needs no request to be known to exist. Which rows got one."""
    vouched = np.zeros(table.num_rows, dtype=bool)
    if not isinstance(read_root, ObjectRoot) or SIZE_COLUMN not in table.column_names:
        return vouched
    column = table.column(SIZE_COLUMN)
    if pa.types.is_null(column.type):  # every size empty: none known
        return vouched
    if not pa.types.is_integer(column.type):
        raise ManifestError(
            f"the manifest's {SIZE_COLUMN!r} column holds each file's size in bytes, whole numbers; it "
            f"holds {column.type}: fix it or rename the column"
        )
    try:
        sizes = column.cast(pa.int64()).fill_null(-1).to_numpy()  # checked: a uint64 past int64 raises
    except pa.ArrowInvalid as exc:
        why = f"the manifest's {SIZE_COLUMN!r} column holds a size too large to be one"
        raise ManifestError(f"{why}: {exc}") from None
    for row in np.flatnonzero(sizes >= 0).tolist():
        if paths[row]:
            read_root.expect(paths[row], int(sizes[row]))
            vouched[row] = True
    return vouched


def _string_columns(fields: Sequence[Field]) -> list[str]:
    """Columns that must stay text when a CSV is read (no ``00123`` -> ``123``)."""
    return [f.column for f in fields if isinstance(f, (Image, Text, JoinKey))]


def _load_manifest(
    manifest: str | os.PathLike[str] | pa.Table,
    root: str | os.PathLike[str] | None,
    string_columns: list[str],
    store: ObjectStore,
) -> tuple[pa.Table, str, str]:
    """The manifest's table, its name, and the root its rows are relative to (by default its
    folder, or the prefix of a manifest URL: ``s3://bucket/train/manifest.csv`` -> ``s3://bucket/train``)."""
    if isinstance(manifest, pa.Table):
        if root is None:
            raise ManifestError("a manifest given as a table needs root= for its relative paths")
        return manifest, "<table>", _root_text(os.fspath(root))
    source = os.fspath(manifest)
    given = None if root is None else _root_text(os.fspath(root))
    if is_url(source):
        folder = source.rsplit("/", 1)[0]
        where = ObjectRoot(folder, store, confined=False)
        table = read_table(source, string_columns=string_columns, inside=where)
        return table, source, given or root_url(folder)
    table = read_table(source, string_columns=string_columns)
    return table, source, given or os.path.dirname(os.path.abspath(source))


def _named(source: object) -> str:
    """A manifest or root as the ranks compare them: its path or URL, or what kind it is."""
    return repr(os.fspath(source)) if isinstance(source, (str, os.PathLike)) else type(source).__name__


def _root_text(root: str) -> str:
    """A root as rows are joined to it: a root URL normalised, a local folder as given."""
    return root_url(root) if is_url(root) else root
