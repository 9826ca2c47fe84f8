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
from torchloom.errors import ManifestError, MissingFileError
from torchloom.io.table import MANIFEST_SUFFIXES, read_table

IMAGE_COLUMNS = ("image", "image_path", "path", "file", "filename", "filepath")
LABEL_COLUMNS = ("label", "class", "category", "target")
SPLIT_COLUMNS = ("split", "subset", "fold")


def find_layout(data: str, *, allow_outside_root: bool = False) -> Discovery:
    """The files of ``data``: a manifest file, a split root, a class folder or a folder of images.

    Raises :class:`MissingFileError` when ``data`` does not exist, :class:`ManifestError` when
    a manifest lacks an image column, and the file layer's errors for a manifest that is not a
    regular file (a FIFO) or cannot be read.
    """
    if os.path.isdir(data):
        return find_every_split(data, allow_outside_root=allow_outside_root)
    if not os.path.lexists(data):
        raise MissingFileError(f"{data!r} does not exist; pass a class folder, a split root or a manifest")
    return _manifest_layout(data, allow_outside_root)


def data_root(layout: Discovery) -> str:
    """The real folder the files of ``layout`` lie in: the folder read, or the manifest's folder."""
    folder = os.path.dirname(os.path.abspath(layout.root)) if layout.layout == "manifest" else layout.root
    return os.path.realpath(folder)


def _manifest_layout(path: str, allow_outside_root: bool) -> Discovery:
    if os.path.splitext(path)[1].lower() not in MANIFEST_SUFFIXES:
        raise ManifestError(
            f"{path!r} is neither a folder nor a manifest; expected a folder or one of {MANIFEST_SUFFIXES}"
        )
    table = read_table(path)
    names = {name.lower(): name for name in table.column_names}
    image_column = next((names[c] for c in IMAGE_COLUMNS if c in names), None)
    if image_column is None:
        raise ManifestError(
            f"manifest {path!r} has no image column; name one of {IMAGE_COLUMNS} "
            f"(columns: {table.column_names})"
        )
    root = os.path.dirname(os.path.abspath(path))
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
