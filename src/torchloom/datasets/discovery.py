"""Which files under a folder are a dataset's samples: one walker, one set of rules, one wording.

Every folder reader in torchloom finds its files here: :class:`torchloom.FolderDataset`, the
folder sources of ``VideoClipDataset`` and ``VolumeDataset``, ``torchloom doctor``, ``torchloom
prepare``, and (through FolderDataset) ``show``, ``bench`` and ``cache``. The rules:

- **Extensions** match in any case (``a.JPG`` and ``b.Png`` are images); a file with another
  extension is left out (:data:`REASON_EXTENSION`).
- **Hidden** files and folders (the name starts with ``.``: ``.DS_Store``, ``._a.jpg``, ``.git``)
  are left out (:data:`REASON_HIDDEN`); a hidden folder is noted once and not read.
- **Metadata folders** that operating systems and archivers write beside the data
  (:data:`METADATA_FOLDERS`: an unzipped macOS archive's ``__MACOSX``, Synology's ``@eaDir``) are
  left out as hidden ones are (:data:`REASON_METADATA`): never a class, never read.
- **Nesting**: files at any depth below a class folder belong to that class.
- **Symlinks** to files and to folders are followed while they resolve inside the root; one that
  leads outside is refused (:data:`REASON_OUTSIDE_ROOT`) unless ``allow_outside_root=True``, even
  when what it points to does not exist (yet). A folder link to a folder already on its own path
  is a loop and is not followed (:data:`REASON_LOOP`). A link to nothing is listed, so that
  validation reports the file missing; where a class folder is expected, a link to nothing named
  as folders are (no extension: a class folder on a disk not mounted) keeps its class and is
  refused (:data:`REASON_MISSING_FOLDER`).
- **Not regular files**: a FIFO, device or socket named like a sample is listed, so that the
  reader refuses it with its reason before reading a byte (it never blocks a worker).
- **Stray files** where no sample can be (beside the class folders, beside the split folders) are
  left out (:data:`REASON_NOT_IN_CLASS`), as are folders beside the split folders
  (:data:`REASON_BESIDE_SPLITS`).
- **Empty classes** stay in ``classes``, so label numbers do not shift
  (:attr:`Discovery.empty_classes` names them).
- **Unlistable folders** are refused (:data:`REASON_UNLISTABLE`, with the system's error); a root
  that cannot be listed is an :class:`~torchloom.errors.UnreadableFileError` naming the fix.
- **Order** follows the path's components: class folders sorted by name, and within each folder
  its entries sorted by name, a sub-folder's files coming where the sub-folder sorts.

Layouts: class folders ``root/<class>/...``; a split root ``root/<split>/<class>/...`` when one of
root's folders has a name of :data:`SPLIT_NAMES` (in any case), read one split at a time by a
dataset (its classes taken from every split, so label numbers agree between splits: a split that
cannot be listed for its class names is a :class:`~torchloom.errors.ConfigError` naming the fix)
or all at once by :func:`find_every_split`; files directly in a root without class folders (unlabelled);
and, for ``torchloom prepare``, a tree of sample files at any depth (:func:`find_tree`).

Manifests are not walked (a row names its file). Of the rules above, those about the file a row
names apply to it and :class:`torchloom.ManifestDataset` applies them: the path must resolve
inside the root, symlinks included, and a FIFO, device, folder or missing file is refused by
validation with the same reason. Hidden names and extensions are not judged there: a row is a
deliberate choice, and whether a file decodes depends on its bytes, not on its name.

Example:
    >>> import os, tempfile
    >>> from torchloom.datasets import find_samples
    >>> root = tempfile.mkdtemp()
    >>> for name in ("cat/1.JPG", "cat/more/2.png", "dog/.DS_Store", "dog/3.jpg", "notes.txt"):
    ...     os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
    ...     _ = open(os.path.join(root, name), "wb").write(b"x")
    >>> found = find_samples(root)
    >>> found.relative_paths(), found.labels.tolist(), found.classes
    (['cat/1.JPG', 'cat/more/2.png', 'dog/3.jpg'], [0, 0, 1], ['cat', 'dog'])
    >>> [(os.path.relpath(e.path, root), e.reason) for e in found.excluded]
    [('dog/.DS_Store', "hidden (name starts with '.')"), ('notes.txt', 'not in a class folder')]
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from torchloom.datasets.index import DatasetReport, StringColumn
from torchloom.datasets.walk import (
    METADATA_FOLDERS,
    REASON_BESIDE_SPLITS,
    REASON_EXTENSION,
    REASON_HIDDEN,
    REASON_LOOP,
    REASON_METADATA,
    REASON_MISSING_FOLDER,
    REASON_NOT_IN_CLASS,
    REASON_OUTSIDE_ROOT,
    REASON_UNLISTABLE,
    REFUSAL_FIXES,
    REFUSALS,
    Exclusion,
    FolderEntry,
    FolderWalk,
    Lister,
    is_class_folder,
    left_out_by_name,
    list_folder,
)
from torchloom.errors import ConfigError

__all__ = [
    "IMAGE_EXTENSIONS",
    "METADATA_FOLDERS",
    "NO_SPLIT",
    "REASON_BESIDE_SPLITS",
    "REASON_EXTENSION",
    "REASON_HIDDEN",
    "REASON_LOOP",
    "REASON_METADATA",
    "REASON_MISSING_FOLDER",
    "REASON_NOT_IN_CLASS",
    "REASON_OUTSIDE_ROOT",
    "REASON_UNLISTABLE",
    "REFUSALS",
    "SPLIT_NAMES",
    "Discovery",
    "Exclusion",
    "FolderEntry",
    "Layout",
    "find_every_split",
    "find_samples",
    "find_tree",
    "list_folder",
]

#: File extensions that are images (matched in any case).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".gif")
#: Folder names that make a folder a split root (compared case-insensitively).
SPLIT_NAMES = ("train", "training", "val", "valid", "validation", "dev", "test", "testing", "holdout")
#: The split name of a dataset that has no splits.
NO_SPLIT = "all"

Layout = Literal["classes", "splits", "files", "tree", "manifest"]


@dataclass(frozen=True)
class Discovery:
    """The samples of a folder and what was left out, by the rules of
    :mod:`torchloom.datasets.discovery` (extensions in any case; hidden files, metadata folders and
    stray files left out; symlinks followed while they stay inside the root).

    ``paths[i]`` (joined to ``root``) has label ``labels[i]`` (an index into ``classes``, ``-1``
    when unlabelled) and split ``splits[i]`` (an index into ``split_names``, which is
    ``[NO_SPLIT]`` without splits). ``excluded`` lists every exclusion, in walking order.
    ``root`` is the folder read (for the doctor's manifests, the manifest file).

    Example:
        >>> import os, tempfile
        >>> from torchloom.datasets import find_samples
        >>> with tempfile.TemporaryDirectory() as root:
        ...     for name in ("cat/1.jpg", "dog/2.jpg", "dog/3.jpg", "bird/", "dog/.DS_Store"):
        ...         os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
        ...         _ = name.endswith("/") or open(os.path.join(root, name), "wb").write(b"x")
        ...     found = find_samples(root)
        ...     print(found.classes, found.labels.tolist(), found.empty_classes, found.counts())
        ['bird', 'cat', 'dog'] [1, 2, 2] ['bird'] {"hidden (name starts with '.')": 1}
    """

    root: str
    layout: Layout
    paths: StringColumn
    labels: np.ndarray
    classes: list[str]
    splits: np.ndarray
    split_names: list[str]
    excluded: list[Exclusion]

    @property
    def empty_classes(self) -> list[str]:
        """Classes without a single sample file."""
        counts = np.bincount(self.labels[self.labels >= 0], minlength=len(self.classes))
        return [name for name, count in zip(self.classes, counts.tolist(), strict=True) if count == 0]

    @property
    def refused(self) -> list[Exclusion]:
        """The exclusions of would-be samples (links leading outside, unlistable folders; for a
        manifest, every row left out: a row names its file)."""
        return [item for item in self.excluded if self._refuses(item)]

    @property
    def ignored(self) -> list[Exclusion]:
        """The exclusions of entries that are not samples (hidden, another extension, stray)."""
        return [item for item in self.excluded if not self._refuses(item)]

    def _refuses(self, item: Exclusion) -> bool:
        return item.refused or self.layout == "manifest"

    def counts(self) -> dict[str, int]:
        """How many entries each reason left out.

        Example:
            >>> import tempfile
            >>> find_samples(tempfile.mkdtemp()).counts()
            {}
        """
        return dict(Counter(item.reason for item in self.excluded))

    def relative(self, path: str) -> str:
        """A path of this discovery (a sample's or an exclusion's) relative to ``root``, with ``/``
        between components."""
        return path[len(os.path.join(self.root, "")) :].replace(os.sep, "/")

    def relative_paths(self) -> list[str]:
        """The sample paths relative to ``root`` (see :meth:`relative`)."""
        return [self.relative(path) for path in self.paths.to_list()]

    def add_to(self, report: DatasetReport) -> None:
        """Record the exclusions in a dataset's report: refusals as invalid, the rest as ignored."""
        for item in self.excluded:
            if self._refuses(item):
                report.invalid.append((item.path, item.text))
            else:
                report.ignore(item.path, item.text, kind=item.reason)


def find_samples(
    root: str | os.PathLike[str],
    *,
    extensions: Sequence[str] = IMAGE_EXTENSIONS,
    split: str | None = None,
    allow_outside_root: bool = False,
    what: str = "the dataset",
    lister: Lister | None = None,
) -> Discovery:
    """The samples of a class folder, of one split of a split root (``split=``), or the files
    directly in a root without class folders (unlabelled); ``what`` names the reader in errors;
    ``lister`` lists a folder in place of ``os.scandir`` (an object store's
    :class:`~torchloom.datasets.listing.PrefixListing`).

    Raises :class:`torchloom.errors.ConfigError` for a split root without ``split`` (naming the
    splits found) and for a ``split`` the root does not have.

    Example:
        >>> import os, tempfile
        >>> from torchloom.datasets import find_samples
        >>> with tempfile.TemporaryDirectory() as root:
        ...     for name in ("train/cat/1.jpg", "train/dog/2.jpg", "val/cat/3.jpg"):
        ...         os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
        ...         _ = open(os.path.join(root, name), "wb").write(b"x")
        ...     found = find_samples(root, split="val")
        ...     print(found.relative_paths(), found.labels.tolist(), found.classes)
        ['val/cat/3.jpg'] [0] ['cat', 'dog']
    """
    walk = FolderWalk(root, extensions, allow_outside_root=allow_outside_root, lister=lister)
    entries = walk.top()
    splits = _split_folders(entries)
    if not splits:
        if split is not None:
            raise ConfigError(
                f"split={split!r} chooses a split folder, but {walk.root!r} has none (split folders "
                f"are named {', '.join(SPLIT_NAMES)}); leave split=None to read its class folders"
            )
        return _classes_or_files(walk, entries)
    names = [entry.name for entry in splits]
    if split is None:
        example = next((n for n in names if n.lower() in ("train", "training")), names[0])
        beside = [e.name for e in entries if is_class_folder(e) and e.name not in names]
        renaming = f" (if {names} are classes beside {beside}, rename them)" if beside else ""
        raise ConfigError(
            f"{walk.root!r} holds split folders {names}, not class folders: {what} reads classes "
            f"(root/<class>/<file>); choose one split with split={example!r} (on the command line: "
            f"--split {example}), or run `torchloom doctor {walk.root}` to examine every split{renaming}"
        )
    chosen = [entry for entry in splits if entry.name == split] or [
        entry for entry in splits if entry.name.lower() == split.lower()
    ]
    if len(chosen) != 1:
        raise ConfigError(f"split={split!r} is not one of the split folders {names} of {walk.root!r}")
    return _splits(walk, entries, splits, chosen, what)


def find_every_split(
    root: str | os.PathLike[str],
    *,
    extensions: Sequence[str] = IMAGE_EXTENSIONS,
    allow_outside_root: bool = False,
    lister: Lister | None = None,
) -> Discovery:
    """As :func:`find_samples`, but a split root is read whole, every split (``torchloom doctor``).

    Example:
        >>> import os, tempfile
        >>> from torchloom.datasets import find_every_split
        >>> with tempfile.TemporaryDirectory() as root:
        ...     for name in ("train/cat/1.jpg", "train/dog/2.jpg", "val/cat/3.jpg"):
        ...         os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
        ...         _ = open(os.path.join(root, name), "wb").write(b"x")
        ...     found = find_every_split(root)
        ...     print(found.split_names, found.splits.tolist(), found.labels.tolist())
        ['train', 'val'] [0, 0, 1] [0, 1, 0]
    """
    walk = FolderWalk(root, extensions, allow_outside_root=allow_outside_root, lister=lister)
    entries = walk.top()
    splits = _split_folders(entries)
    return _splits(walk, entries, splits, splits) if splits else _classes_or_files(walk, entries)


def find_tree(
    root: str | os.PathLike[str],
    *,
    extensions: Sequence[str] = IMAGE_EXTENSIONS,
    lister: Lister | None = None,
) -> Discovery:
    """Every sample file at any depth below ``root``, unlabelled (``torchloom prepare``'s RAW);
    ``lister`` as :func:`find_samples` takes it.

    Example:
        >>> import os, tempfile
        >>> root = tempfile.mkdtemp()
        >>> os.makedirs(os.path.join(root, "day 1"))
        >>> for name in ("day 1/a.jpg", "b.PNG", "b.txt"):
        ...     _ = open(os.path.join(root, name), "wb").write(b"x")
        >>> found = find_tree(root)
        >>> found.relative_paths(), [e.reason for e in found.excluded]
        (['b.PNG', 'day 1/a.jpg'], ['extension not in extensions'])
    """
    walk = FolderWalk(root, extensions, allow_outside_root=False, lister=lister)
    return _discovery(walk, "tree", walk.below(walk.root, walk.real_root, (), walk.top()))


def _split_folders(entries: list[FolderEntry]) -> list[FolderEntry]:
    return [e for e in entries if is_class_folder(e) and e.name.lower() in SPLIT_NAMES]


def _classes_or_files(walk: FolderWalk, entries: list[FolderEntry]) -> Discovery:
    """Class folders, or (without any) the files directly in the root, unlabelled."""
    if not any(is_class_folder(entry) for entry in entries):
        return _discovery(walk, "files", walk.below(walk.root, walk.real_root, (), entries))
    classes = walk.class_names([entries])
    files, labels = walk.class_root(walk.real_root, entries, classes)
    return _discovery(walk, "classes", files, labels, classes)


def _splits(
    walk: FolderWalk,
    entries: list[FolderEntry],
    splits: list[FolderEntry],
    chosen: list[FolderEntry],
    what: str = "the dataset",
) -> Discovery:
    """The ``chosen`` splits of a split root, with the classes of every split: a split not chosen
    that cannot be listed is a :class:`~torchloom.errors.ConfigError` (without its class names,
    the label numbers could differ from those of a dataset of that split)."""
    for entry in entries:
        reason = left_out_by_name(entry.name)
        if reason is not None:
            walk.exclude(entry.path, reason)
        elif not any(entry is split for split in splits):
            walk.exclude(entry.path, REASON_BESIDE_SPLITS if is_class_folder(entry) else REASON_NOT_IN_CLASS)
    listed: list[tuple[str, list[FolderEntry]]] = []
    for split in splits:  # the splits not chosen are listed for their class names only
        noted = len(walk.excluded)
        listing = walk.folder_listing(split, walk.real_root, (walk.real_root,))
        if listing is None and split not in chosen and len(walk.excluded) > noted:
            refusal = walk.excluded[noted]
            raise ConfigError(
                f"the split folder {split.path!r} cannot be read ({refusal.text}), and {what} numbers "
                "its labels by the classes of every split, so that they agree between splits; "
                f"{REFUSAL_FIXES.get(refusal.reason, 'fix it')}"
            )
        listed.append(listing or ("", []))
    classes = walk.class_names([listing for _, listing in listed])
    files: list[str] = []
    labels: list[int] = []
    split_ids: list[int] = []
    for number, split in enumerate(chosen):
        found, found_labels = walk.class_root(*listed[splits.index(split)], classes)
        files += found
        labels += found_labels
        split_ids += [number] * len(found)
    return _discovery(walk, "splits", files, labels, classes, split_ids, [split.name for split in chosen])


def _discovery(
    walk: FolderWalk,
    layout: Layout,
    files: list[str],
    labels: list[int] | None = None,
    classes: Sequence[str] = (),
    split_ids: list[int] | None = None,
    split_names: Sequence[str] = (NO_SPLIT,),
) -> Discovery:
    """The result of ``walk``: ``files``, unlabelled without ``labels``, one split without
    ``split_ids``."""
    count = len(files)
    return Discovery(
        walk.root,
        layout,
        StringColumn.from_strings(files),
        np.asarray(labels, np.int64) if labels is not None else np.full(count, -1, np.int64),
        list(classes),
        np.asarray(split_ids, np.int64) if split_ids is not None else np.zeros(count, np.int64),
        list(split_names),
        walk.excluded,
    )
