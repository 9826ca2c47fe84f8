"""Find a dataset's image files, their classes and their splits, whatever its layout.

:func:`find_layout` accepts:

- a class folder, ``DATA/<class>/<image>``, a split root, ``DATA/<split>/<class>/<image>`` (every
  split read), or a folder of images without class folders: found by
  :func:`torchloom.datasets.discovery.find_every_split`, with the rules and the wording every
  folder reader shares (hidden files, symlinks, stray files...);
- a manifest (``.csv``, ``.jsonl``, ``.json``, ``.parquet``) with an image column (one of
  :data:`IMAGE_COLUMNS`), optionally a label column (:data:`LABEL_COLUMNS`) and a split column
  (:data:`SPLIT_COLUMNS`); paths are relative to the manifest's folder (or absolute inside it)
  and may not leave it.

Links and paths leading outside DATA are refused unless ``allow_outside_root=True``. What is left
out is listed in the result's ``excluded``, not examined; :func:`data_root` is the folder every
examined file must resolve into.

DATA may be a URL (``s3://bucket/train``, any fsspec URL): a manifest when its name ends as one
does, else a prefix listed once (:class:`~torchloom.datasets.PrefixListing`) and walked by the same
rules; :func:`object_root` is then the root prefix every examined object must lie below, and the
store that serves them.

Example:
    >>> import os, tempfile
    >>> root = tempfile.mkdtemp()
    >>> for split, name in [("train", "cat"), ("train", "dog"), ("val", "cat")]:
    ...     os.makedirs(os.path.join(root, split, name))
    ...     _ = open(os.path.join(root, split, name, "1.jpg"), "wb").write(b"x")
    >>> layout = find_layout(root)
    >>> layout.split_names, layout.classes, layout.labels.tolist(), layout.splits.tolist()
    (['train', 'val'], ['cat', 'dog'], [0, 1, 0], [0, 0, 1])
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from torchloom.datasets.discovery import NO_SPLIT, Discovery, Exclusion, find_every_split
from torchloom.datasets.fields import FieldContext, Image
from torchloom.datasets.listing import PrefixListing
from torchloom.errors import ManifestError, MissingFileError
from torchloom.io.files import is_url
from torchloom.io.objects import ObjectRoot, ObjectStore
from torchloom.io.table import MANIFEST_SUFFIXES, read_table

IMAGE_COLUMNS = ("image", "image_path", "path", "file", "filename", "filepath")
LABEL_COLUMNS = ("label", "class", "category", "target")
SPLIT_COLUMNS = ("split", "subset", "fold")


def find_layout(
    data: str, *, allow_outside_root: bool = False, inside: ObjectRoot | None = None, progress: bool = False
) -> Discovery:
    """The files of ``data``: a manifest file, a split root, a class folder or a folder of images;
    for a URL, read through ``inside`` (its :func:`object_root`; by default one reached with no
    storage options), with a progress bar while a prefix is listed when ``progress``.

    Raises :class:`MissingFileError` when ``data`` does not exist (for a prefix: holds no objects),
    :class:`ManifestError` when a manifest lacks an image column, and the file layer's errors for a
    manifest that is not a regular file (a FIFO) or cannot be read.
    """
    if is_url(data):
        root = inside or object_root(data, ObjectStore(), allow_outside_root=allow_outside_root)
        if _is_manifest_name(data):
            return _manifest_layout(data, allow_outside_root, root)
        listing = PrefixListing(root, progress=progress)
        return find_every_split(root.url, allow_outside_root=allow_outside_root, lister=listing)
    if os.path.isdir(data):
        return find_every_split(data, allow_outside_root=allow_outside_root)
    if not os.path.lexists(data):
        raise MissingFileError(f"{data!r} does not exist; pass a class folder, a split root or a manifest")
    return _manifest_layout(data, allow_outside_root)


def object_root(data: str, store: ObjectStore, *, allow_outside_root: bool = False) -> ObjectRoot:
    """The root prefix the objects of the URL ``data`` lie below: ``data`` itself, or the prefix
    of a manifest (``s3://bucket/train/manifest.csv`` -> ``s3://bucket/train``), reached through
    ``store``; confined to it unless ``allow_outside_root``.

    Example:
        >>> object_root("s3://shop/train/manifest.csv", ObjectStore()).url
        's3://shop/train'
    """
    prefix = data.rsplit("/", 1)[0] if _is_manifest_name(data) else data
    return ObjectRoot(prefix, store, confined=not allow_outside_root)


def data_root(layout: Discovery) -> str:
    """The real folder the files of ``layout`` lie in: the folder read, or the manifest's folder."""
    folder = os.path.dirname(os.path.abspath(layout.root)) if layout.layout == "manifest" else layout.root
    return os.path.realpath(folder)


def _is_manifest_name(url: str) -> bool:
    return url.lower().endswith(MANIFEST_SUFFIXES)


def _manifest_layout(path: str, allow_outside_root: bool, inside: ObjectRoot | None = None) -> Discovery:
    if os.path.splitext(path)[1].lower() not in MANIFEST_SUFFIXES:
        raise ManifestError(
            f"{path!r} is neither a folder nor a manifest; expected a folder or one of {MANIFEST_SUFFIXES}"
        )
    table = read_table(path, inside=inside)
    names = {name.lower(): name for name in table.column_names}
    image_column = next((names[c] for c in IMAGE_COLUMNS if c in names), None)
    if image_column is None:
        raise ManifestError(
            f"manifest {path!r} has no image column; name one of {IMAGE_COLUMNS} "
            f"(columns: {table.column_names})"
        )
    root = inside.url if inside is not None else os.path.dirname(os.path.abspath(path))
    try:
        images = Image(image_column).compile(table, FieldContext(root, allow_outside_root))
    except ManifestError as exc:  # say which manifest; text that is not UTF-8 reads as binary
        hint = "; save it as UTF-8 text" if pa.types.is_binary(table.schema.field(image_column).type) else ""
        raise ManifestError(f"manifest {path!r}: {exc}{hint}") from exc
    rows = np.array([row for row in range(table.num_rows) if row not in images.invalid], dtype=np.int64)
    class_names, labels = _categories(table, names, LABEL_COLUMNS, rows, missing=-1, empty_is_missing=True)
    split_names, splits = _categories(table, names, SPLIT_COLUMNS, rows, missing=0)
    return Discovery(
        path,
        "manifest",
        images.values.take(rows),
        labels,
        class_names,
        splits,
        split_names or [NO_SPLIT],
        [Exclusion(f"{path} row {row}", reason) for row, reason in sorted(images.invalid.items())],
    )


def _categories(
    table: pa.Table,
    names: dict[str, str],
    candidates: tuple[str, ...],
    rows: np.ndarray,
    *,
    missing: int,
    empty_is_missing: bool = False,
) -> tuple[list[str], np.ndarray]:
    """The sorted values of the first column of ``candidates`` and each row's number among them;
    ``missing`` for every row without the column (and, with ``empty_is_missing``, an empty cell)."""
    column = next((names[c] for c in candidates if c in names), None)
    if column is None:
        return [], np.full(len(rows), missing, dtype=np.int64)
    values = table.column(column).to_pylist()
    text = ["" if values[row] is None else str(values[row]) for row in rows.tolist()]
    categories = sorted(value for value in set(text) if value.strip() or not empty_is_missing)
    lookup = {name: i for i, name in enumerate(categories)}
    return categories, np.array([lookup.get(value, missing) for value in text], dtype=np.int64)
