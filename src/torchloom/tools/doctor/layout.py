"""Find a dataset's image files, their classes and their splits, whatever its layout.

:func:`find_layout` accepts:

- a class folder, ``DATA/<class>/<image>`` (images at any depth below their class folder);
- a split root, ``DATA/<split>/<class>/<image>``, when ``DATA``'s sub-folders include one of
  :data:`SPLIT_NAMES` (``train``, ``val``, ``test``, ...);
- a manifest (``.csv``, ``.jsonl``, ``.json``, ``.parquet``) with an image column (one of
  :data:`IMAGE_COLUMNS`), optionally a label column (:data:`LABEL_COLUMNS`) and a split column
  (:data:`SPLIT_COLUMNS`); paths are relative to the manifest's folder and may not leave it.

Files whose extension is not an image extension are listed in ``ignored``, not examined.

Example:
    >>> import os, tempfile
    >>> root = tempfile.mkdtemp()
    >>> for split, name in [("train", "cat"), ("train", "dog"), ("val", "cat")]:
    ...     os.makedirs(os.path.join(root, split, name))
    ...     _ = open(os.path.join(root, split, name, "1.jpg"), "wb").write(b"x")
    >>> layout = find_layout(root)
    >>> layout.split_names, layout.class_names, layout.labels.tolist(), layout.splits.tolist()
    (['train', 'val'], ['cat', 'dog'], [0, 1, 0], [0, 0, 1])
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from torchloom.datasets.fields import FieldContext, Image
from torchloom.datasets.folder import IMAGE_EXTENSIONS
from torchloom.errors import ManifestError, MissingFileError
from torchloom.io.table import MANIFEST_SUFFIXES, read_table

#: Sub-folder names that make a folder a split root (compared case-insensitively).
SPLIT_NAMES = ("train", "training", "val", "valid", "validation", "dev", "test", "testing", "holdout")
IMAGE_COLUMNS = ("image", "image_path", "path", "file", "filename", "filepath")
LABEL_COLUMNS = ("label", "class", "category", "target")
SPLIT_COLUMNS = ("split", "subset", "fold")
#: The split name of a dataset that has no splits.
NO_SPLIT = "all"


@dataclass
class DataLayout:
    """The files of a dataset: ``paths[i]`` has label ``labels[i]`` (an index into
    ``class_names``, ``-1`` without one) and split ``splits[i]`` (an index into ``split_names``)."""

    source: str
    kind: str
    paths: list[str]
    labels: np.ndarray
    splits: np.ndarray
    class_names: list[str]
    split_names: list[str]
    ignored: list[tuple[str, str]] = field(default_factory=list)


def find_layout(data: str) -> DataLayout:
    """The layout of ``data``: a manifest file, a split root or a class folder (see the module).

    Raises :class:`MissingFileError` when ``data`` does not exist and :class:`ManifestError` when
    a manifest lacks an image column.
    """
    if os.path.isfile(data):
        return _manifest_layout(data)
    if not os.path.isdir(data):
        raise MissingFileError(f"{data!r} does not exist; pass a class folder, a split root or a manifest")
    folders = sorted(
        entry.name for entry in os.scandir(data) if entry.is_dir() and not entry.name.startswith(".")
    )
    splits = [name for name in folders if name.lower() in SPLIT_NAMES]
    layout = DataLayout(
        data, "splits" if splits else "classes", [], np.zeros(0, np.int64), np.zeros(0, np.int64), [], []
    )
    labels: list[int] = []
    split_ids: list[int] = []
    roots = [(name, os.path.join(data, name)) for name in splits] if splits else [(NO_SPLIT, data)]
    for name in folders if splits else []:
        if name not in splits:
            layout.ignored.append((os.path.join(data, name), f"folder beside the splits {splits}"))
    for split_id, (split, root) in enumerate(roots):
        layout.split_names.append(split)
        for entry in sorted(os.scandir(root), key=lambda entry: entry.name):
            if entry.name.startswith("."):
                continue
            if not entry.is_dir():
                layout.ignored.append((entry.path, "file outside any class folder"))
                continue
            if entry.name not in layout.class_names:
                layout.class_names.append(entry.name)
            found = _images_below(entry.path, layout.ignored)
            layout.paths.extend(found)
            labels.extend([layout.class_names.index(entry.name)] * len(found))
            split_ids.extend([split_id] * len(found))
    order = sorted(layout.class_names)
    remap = np.array([order.index(name) for name in layout.class_names], dtype=np.int64)
    layout.class_names = order
    layout.labels = remap[np.asarray(labels, dtype=np.int64)] if labels else np.zeros(0, np.int64)
    layout.splits = np.asarray(split_ids, dtype=np.int64)
    return layout


def _images_below(folder: str, ignored: list[tuple[str, str]]) -> list[str]:
    found: list[str] = []

    def note(error: OSError) -> None:
        ignored.append((str(error.filename), f"cannot list folder: {type(error).__name__}: {error}"))

    for current, subfolders, files in os.walk(folder, onerror=note):
        subfolders[:] = sorted(name for name in subfolders if not name.startswith("."))
        for name in files:
            path = os.path.join(current, name)
            if os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS:
                found.append(path)
            elif not name.startswith("."):
                ignored.append((path, "extension is not an image extension"))
    return sorted(found)


def _manifest_layout(path: str) -> DataLayout:
    if os.path.splitext(path)[1].lower() not in MANIFEST_SUFFIXES:
        raise ManifestError(f"{path!r} is a file but not a manifest; expected one of {MANIFEST_SUFFIXES}")
    table = read_table(path)
    names = {name.lower(): name for name in table.column_names}
    image_column = next((names[c] for c in IMAGE_COLUMNS if c in names), None)
    if image_column is None:
        raise ManifestError(
            f"manifest {path!r} has no image column; name one of {IMAGE_COLUMNS} "
            f"(columns: {table.column_names})"
        )
    root = os.path.dirname(os.path.abspath(path))
    images = Image(image_column).compile(table, FieldContext(root))
    paths = images.values.to_list()
    rows = np.array([row for row in range(table.num_rows) if row not in images.invalid], dtype=np.int64)
    class_names, labels = _categories(table, names, LABEL_COLUMNS, rows, missing=-1)
    split_names, splits = _categories(table, names, SPLIT_COLUMNS, rows, missing=0)
    layout = DataLayout(
        path,
        "manifest",
        [paths[row] for row in rows.tolist()],
        labels,
        splits,
        class_names,
        split_names or [NO_SPLIT],
    )
    layout.ignored.extend((f"{path} row {row}", reason) for row, reason in sorted(images.invalid.items()))
    return layout


def _categories(
    table: pa.Table, names: dict[str, str], candidates: tuple[str, ...], rows: np.ndarray, *, missing: int
) -> tuple[list[str], np.ndarray]:
    column = next((names[c] for c in candidates if c in names), None)
    if column is None:
        return [], np.full(len(rows), missing, dtype=np.int64)
    values = table.column(column).to_pylist()
    text = ["" if values[row] is None else str(values[row]) for row in rows.tolist()]
    categories = sorted(set(text))
    lookup = {name: i for i, name in enumerate(categories)}
    return categories, np.array([lookup[value] for value in text], dtype=np.int64)
