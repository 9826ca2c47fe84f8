"""An object store's prefix listed once, then walked as folders are.

A store has keys, not folders: ``s3://bucket/train/cat/1.jpg`` lies in the "folder"
``s3://bucket/train/cat`` only by its name. :class:`PrefixListing` lists every object below a
root once (the root's first level, then each first-level prefix at the same time, with a progress
bar), and answers the walk's ``list_folder`` calls from memory, so the one walker of
:mod:`torchloom.datasets.discovery` applies its rules (extensions, hidden names, metadata folders,
class folders) to a bucket as to a disk. Each object's size and ETag go to the dataset's
:class:`~torchloom.io.ObjectRoot`: a later read of a changed object is named.

Example:
    >>> import fsspec
    >>> from torchloom.datasets import PrefixListing
    >>> from torchloom.io import ObjectRoot, ObjectStore
    >>> for key in ("cat/1.jpg", "cat/2.jpg", "dog/3.jpg", ".DS_Store"):
    ...     fsspec.filesystem("memory").pipe(f"memory://listed/train/{key}", b"x")
    >>> listing = PrefixListing(ObjectRoot("memory://listed/train", ObjectStore()), progress=False)
    >>> [entry.name for entry in listing("memory://listed/train")], len(listing)
    (['.DS_Store', 'cat', 'dog'], 4)
"""

from __future__ import annotations

from dataclasses import dataclass

from torchloom.datasets.walk import FolderEntry
from torchloom.errors import MissingFileError
from torchloom.io.files import Inside
from torchloom.io.object_urls import relative_key
from torchloom.io.objects import ObjectRoot


@dataclass(frozen=True)
class ObjectEntry:
    """One name in a listed folder: an object, or a prefix that holds objects.

    Example:
        >>> ObjectEntry("cat", "s3://b/train/cat", folder=True).is_dir()
        True
    """

    name: str
    path: str
    folder: bool

    def is_dir(self) -> bool:
        return self.folder

    def is_symlink(self) -> bool:
        return False  # a store has no links: nothing below a root leads out of it


class PrefixListing:
    """Every object below ``root``, listed once, served folder by folder (a walk's lister).

    Raises :class:`~torchloom.errors.MissingFileError` when nothing lies below the root.

    Example:
        >>> import fsspec
        >>> from torchloom.io import ObjectRoot, ObjectStore
        >>> fsspec.filesystem("memory").pipe("memory://one/set/a/b.jpg", b"x")
        >>> listing = PrefixListing(ObjectRoot("memory://one/set", ObjectStore()), progress=False)
        >>> [(entry.name, entry.is_dir()) for entry in listing("memory://one/set/a")]
        [('b.jpg', False)]
    """

    def __init__(self, root: ObjectRoot, *, progress: bool = True) -> None:
        self.root = root.url
        try:
            objects = root.store.list_below(root.url, progress=progress)
        except MissingFileError:
            objects = []  # s3fs says a prefix with nothing below it is not there
        if not objects:
            raise MissingFileError(
                f"{root.url!r} holds no objects: check the bucket and prefix (and storage_options' "
                "endpoint and credentials)"
            )
        # Keyed by name and kind: an object "cat" beside the prefix "cat/" is two entries.
        folders: dict[str, dict[tuple[str, bool], ObjectEntry]] = {}
        for item in objects:
            url = item["name"]
            root.expect(url, item["size"], item["etag"])
            parent = self.root
            *prefixes, name = relative_key(url, self.root).split("/")
            for prefix in prefixes:
                below = f"{parent}/{prefix}"
                entry = ObjectEntry(prefix, below, folder=True)
                folders.setdefault(parent, {}).setdefault((prefix, True), entry)
                parent = below
            folders.setdefault(parent, {})[(name, False)] = ObjectEntry(name, url, folder=False)
        self._folders = {
            folder: sorted(entries.values(), key=_name_of) for folder, entries in folders.items()
        }
        self._count = len(objects)

    def __call__(self, folder: str) -> list[FolderEntry]:
        listed: list[FolderEntry] = list(self._folders.get(folder, []))
        return listed

    def __len__(self) -> int:
        """The number of objects listed."""
        return self._count


def walked_root(root: str, read_root: Inside, *, progress: bool) -> tuple[str, PrefixListing | None]:
    """The root as the walk names it and the listing it walks: a store's prefix (its URL as the
    :class:`~torchloom.io.ObjectRoot` normalised it) listed once, or a local folder as given, with
    no listing (``os.scandir`` walks it).

    Example:
        >>> walked_root("/data/train", "/data/train", progress=False)
        ('/data/train', None)
    """
    if isinstance(read_root, ObjectRoot):
        return read_root.url, PrefixListing(read_root, progress=progress)
    return root, None


def _name_of(entry: ObjectEntry) -> str:
    return entry.name
