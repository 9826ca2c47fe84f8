"""Datasets of one file per sample: where they find their files, and the header probe that indexes them.

A source is a folder (one sub-folder per class, as ImageFolder and UCF101 lay files out; one
split of a split root, chosen with ``split=``; or files directly in it, unlabelled; its files
found by :mod:`torchloom.datasets.discovery`, as every folder's are), a manifest (a file
:func:`torchloom.io.read_table` reads, with a ``path`` and an optional ``label`` column, or
a :class:`Manifest` naming its columns and root), or a list of paths. Manifest paths go through
the same :class:`torchloom.Image` field compilation as :class:`torchloom.ManifestDataset` (paths
must stay inside the root), labels through :class:`torchloom.Label`.

"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeAlias, TypeVar

import numpy as np
import pyarrow as pa
from typing_extensions import Unpack

from torchloom.datasets.base import IndexedDataset
from torchloom.datasets.discovery import find_samples
from torchloom.datasets.fields import FieldContext, Image, Label
from torchloom.datasets.index import (
    Column,
    DatasetReport,
    SampleIndex,
    StringColumn,
    keep_valid,
    validate_files,
)
from torchloom.datasets.listing import walked_root
from torchloom.datasets.manifest import _load_manifest
from torchloom.datasets.options import IndexingOptions, IndexingSettings, indexing_settings
from torchloom.errors import ConfigError, DataError, EmptyDatasetError, MissingFileError, UsageError
from torchloom.io.file_errors import failure_reason
from torchloom.io.files import Inside, is_url
from torchloom.io.object_urls import split_url
from torchloom.io.objects import ObjectRoot, ObjectStore
from torchloom.io.table import MANIFEST_SUFFIXES

Header = TypeVar("Header")
#: Validation modes of datasets that read every file's header to index it.
PROBE_VALIDATE = ("header", "full")


@dataclass(frozen=True, eq=False)
class Manifest:
    """A manifest as the source of a dataset of one file per sample: its rows' paths and labels.

    Args:
        table: a file :func:`torchloom.io.read_table` reads (CSV, TSV, JSON, JSONL, Parquet)
            or a pyarrow table.
        path_column: the column of file paths, relative to ``root``.
        label_column: the column of labels (class names or numbers), read as
            :class:`torchloom.Label` reads it; a table without it, or ``None``, is unlabelled.
        root: the folder the paths are relative to (default: the manifest file's folder; a table
            needs one).

    Example:
        >>> import pyarrow as pa
        >>> clips = Manifest(pa.table({"file": ["a.mp4"]}), path_column="file", root="/data/clips")
        >>> clips.path_column, clips.label_column
        ('file', 'label')
    """

    table: str | os.PathLike[str] | pa.Table
    path_column: str = "path"
    label_column: str | None = "label"
    root: str | os.PathLike[str] | None = None


Source: TypeAlias = str | os.PathLike[str] | Manifest | Sequence[str | os.PathLike[str]]


@dataclass
class FoundFiles:
    """The files of a source: paths, labels (``-1`` when unlabelled) and class names (or None)."""

    paths: list[str]
    labels: np.ndarray
    classes: list[Any] | None
    #: How the source is named in messages.
    name: str
    #: A real folder every read must resolve into (a folder source, a manifest's root), or None.
    read_root: Inside = None


def find_files(
    source: Source,
    *,
    extensions: Sequence[str],
    report: DatasetReport,
    indexing: IndexingSettings,
    split: str | None = None,
    what: str = "the dataset",
    store: ObjectStore | None = None,
) -> FoundFiles:
    """The sample files of ``source`` (a folder, a manifest or a list of paths); what is left out
    goes to ``report``.

    A folder is read by :func:`torchloom.datasets.discovery.find_samples` (``split`` chooses the
    split folder of a split root; ``what`` names the reader in its errors). A manifest's rows with
    an empty path or label are left out and listed in ``report``. Paths and symlinks that leave
    the folder or the manifest's root are refused unless ``indexing.allow_outside_root``. A root
    URL (``s3://bucket/train``) is listed once (:class:`~torchloom.datasets.PrefixListing`) and
    walked as a folder; ``store`` reaches it, a manifest URL and the URLs in a list of paths.

    Example:
        >>> import os, tempfile
        >>> root = tempfile.mkdtemp()
        >>> for name in ("walk/a.avi", "run/b.avi", "run/notes.txt"):
        ...     os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
        ...     _ = open(os.path.join(root, name), "wb").write(b"x")
        >>> report, indexing = DatasetReport(), IndexingSettings()
        >>> found = find_files(root, extensions=(".avi",), report=report, indexing=indexing)
        >>> found.classes, [os.path.basename(p) for p in found.paths], found.labels.tolist()
        (['run', 'walk'], ['b.avi', 'a.avi'], [0, 1])
    """
    if isinstance(source, pa.Table):
        raise UsageError(
            f"{what} got a pyarrow table; say which folder its paths are relative to: "
            "Manifest(table, root=...) (and path_column=, label_column= if not 'path' and 'label')"
        )
    if isinstance(source, (str, os.PathLike)) and _is_manifest(source):
        source = Manifest(source)
    folder = isinstance(source, (str, os.PathLike))
    if split is not None and not folder:
        raise ConfigError(
            f"split={split!r} chooses a split folder of a folder source; for a manifest or a list "
            "of paths, pass the rows or paths of that split instead"
        )
    store = store or ObjectStore()
    if isinstance(source, Manifest):
        return _from_manifest(source, report, indexing, store)
    if isinstance(source, (str, os.PathLike)):
        return _from_folder(os.fspath(source), extensions, split, indexing, report, what, store)
    paths = [os.fspath(path) for path in source]
    read_root: Inside = None
    if paths and is_url(paths[0]):
        # The paths were chosen one by one: no root confines them, but the store serves them all.
        scheme, rest = split_url(paths[0])
        read_root = ObjectRoot(f"{scheme}://{rest.split('/', 1)[0]}", store, confined=False)
    return FoundFiles(paths, np.full(len(paths), -1, np.int64), None, f"{len(paths)} paths", read_root)


def _is_manifest(source: str | os.PathLike[str]) -> bool:
    return os.fspath(source).lower().endswith(MANIFEST_SUFFIXES)


def _from_manifest(
    manifest: Manifest, report: DatasetReport, indexing: IndexingSettings, store: ObjectStore
) -> FoundFiles:
    columns = [manifest.path_column]
    table, name, root_path = _load_manifest(manifest.table, manifest.root, columns, store)
    context = FieldContext(root_path, indexing.allow_outside_root)
    # The Image field resolves any path column: joined to root, refused when it leaves root.
    compiled = [Image(manifest.path_column, name="path").compile(table, context)]
    label_column = manifest.label_column
    if label_column is not None and label_column in table.column_names:
        compiled.append(Label(label_column).compile(table, context))
    reasons = np.full(table.num_rows, None, dtype=object)
    for column in compiled:
        for row, reason in column.invalid.items():
            reasons[row] = reasons[row] or reason
    all_paths: StringColumn = compiled[0].values
    keep = keep_valid(reasons, lambda row: f"{name} row {row}", report, strict=False, what=name)
    labelled = len(compiled) > 1
    return FoundFiles(
        [all_paths[int(row)] for row in keep],
        compiled[1].values[keep] if labelled else np.full(len(keep), -1, np.int64),
        compiled[1].classes if labelled else None,
        name,
        indexing.read_root(root_path, store),
    )


def _from_folder(
    root: str,
    extensions: Sequence[str],
    split: str | None,
    indexing: IndexingSettings,
    report: DatasetReport,
    what: str,
    store: ObjectStore,
) -> FoundFiles:
    read_root = indexing.read_root(root, store)
    root, lister = walked_root(root, read_root, progress=indexing.progress)
    if lister is None and not os.path.isdir(root):
        suffixes = ", ".join(MANIFEST_SUFFIXES)
        raise MissingFileError(
            f"{root!r} is neither a folder nor a manifest ({suffixes}); pass single files as a list of paths"
        )
    found = find_samples(
        root,
        extensions=extensions,
        split=split,
        allow_outside_root=indexing.allow_outside_root,
        what=what,
        lister=lister,
    )
    found.add_to(report)
    report.empty_classes += found.empty_classes
    return FoundFiles(found.paths.to_list(), found.labels, found.classes or None, root, read_root)


def probe_files(
    found: FoundFiles,
    probe: Callable[[str], Header],
    *,
    report: DatasetReport,
    indexing: IndexingSettings,
    what: str,
) -> tuple[np.ndarray, list[Header]]:
    """Probe every file in ``indexing.num_threads`` threads; return the rows that probed cleanly
    and their headers.

    A file whose probe raises a data fault (:class:`DataError` or ``OSError``) is left out and
    listed in ``report`` with the reason (``indexing.strict`` raises one error listing them all);
    any other exception is a bug and propagates. No usable file is an :class:`EmptyDatasetError`.
    """
    headers: dict[str, Header] = {}

    def check(path: str) -> str | None:
        try:
            headers[path] = probe(path)
        except (DataError, OSError) as exc:
            return failure_reason(exc, path)
        return None

    reasons = validate_files(
        found.paths,
        check,
        num_threads=indexing.threads_for(found.read_root),
        progress=indexing.progress,
        description=f"probing {what}",
    )
    keep = keep_valid(
        reasons, found.paths.__getitem__, report, strict=indexing.strict, what=f"{what} {found.name!r}"
    )
    if len(keep) == 0:
        raise EmptyDatasetError(f"{what} {found.name!r} has no usable files:\n{report}")
    return keep, [headers[found.paths[int(row)]] for row in keep]


class ProbedFileDataset(IndexedDataset, Generic[Header]):
    """Base of the datasets of one file per sample, each file's header probed at construction.

    Finds the files of ``source`` (:func:`find_files`), probes them in threads with
    :meth:`probe` (files that fail are left out and listed in :attr:`report`), and indexes the
    paths, labels and the columns :meth:`header_columns` makes from the headers. Subclasses set
    what ``probe`` needs before calling ``__init__`` (which sets :attr:`validate`, ``"header"`` or
    ``"full"``, before probing) and build samples with :meth:`labelled`.
    """

    def __init__(
        self,
        source: Source,
        *,
        extensions: Sequence[str],
        split: str | None,
        **options: Unpack[IndexingOptions],
    ) -> None:
        what = type(self).__name__
        sample, indexing = indexing_settings(options, what=type(self), validate=PROBE_VALIDATE)
        #: ``"header"``: each file's header is probed; ``"full"``: each file is read whole too.
        self.validate = indexing.validate
        self.report = DatasetReport()
        found = find_files(
            source,
            extensions=extensions,
            report=self.report,
            indexing=indexing,
            split=split,
            what=what,
            store=sample.store,
        )
        self.source_name = found.name
        #: Class names (folder names or the label column's classes), or None when unlabelled.
        self.classes = found.classes
        self.class_to_idx = {name: i for i, name in enumerate(self.classes or [])}
        keep, headers = probe_files(
            found,
            lambda path: self.probe(path, found.read_root),
            report=self.report,
            indexing=indexing,
            what=what,
        )
        columns: dict[str, Column] = dict(self.header_columns(headers))
        index = SampleIndex(
            StringColumn.from_strings(found.paths[int(row)] for row in keep), found.labels[keep], columns
        )
        super().__init__(index, sample)
        self.read_root = found.read_root

    def probe(self, path: str, inside: Inside) -> Header:
        """The header of ``path`` (a file that must resolve inside ``inside`` when given); raises a
        data fault (``DataError`` or ``OSError``) when the file cannot be a sample."""
        raise NotImplementedError

    def header_columns(self, headers: list[Header]) -> Mapping[str, np.ndarray]:
        """The index columns made from the headers of the kept files, one row per file."""
        raise NotImplementedError

    @property
    def targets(self) -> np.ndarray:
        """The label of every sample (``-1`` when unlabelled)."""
        return self.index.labels

    def labelled(self, sample: dict[str, Any], index: int, key: int) -> dict[str, Any]:
        """``sample`` with ``"label"`` (when labels are known), ``"index"`` and ``"path"`` added."""
        if self.classes is not None:
            sample["label"] = int(self.index.labels[index])
        sample["index"] = key
        sample["path"] = self.index.paths[index]
        return sample
