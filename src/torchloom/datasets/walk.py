"""The walk behind :mod:`torchloom.datasets.discovery`: each entry of a folder tree judged by the
rules, in order, with one wording per reason something is left out.

The module docstring of :mod:`torchloom.datasets.discovery` states the rules; this module applies
them. Listing goes through :func:`list_folder` alone, so another lister can stand in for
``os.scandir``.

Example:
    >>> import os, tempfile
    >>> root = tempfile.mkdtemp()
    >>> for name in ("a.jpg", ".b.jpg", "c/d.JPG"):
    ...     os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
    ...     _ = open(os.path.join(root, name), "wb").write(b"x")
    >>> walk = FolderWalk(root, (".jpg",), allow_outside_root=False)
    >>> found = walk.below(root, walk.real_root, (), walk.top())
    >>> [os.path.relpath(path, root) for path in found], [e.reason for e in walk.excluded]
    (['a.jpg', 'c/d.JPG'], ["hidden (name starts with '.')"])
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import NamedTuple, Protocol

from torchloom.errors import ConfigError, MissingFileError
from torchloom.io.files import lies_inside

REASON_HIDDEN = "hidden (name starts with '.')"
REASON_EXTENSION = "extension not in extensions"
REASON_NOT_IN_CLASS = "not in a class folder"
REASON_BESIDE_SPLITS = "folder beside the split folders"
REASON_OUTSIDE_ROOT = "symlink leading outside the root"
REASON_LOOP = "symlink loop (a folder already on its own path)"
REASON_UNLISTABLE = "cannot list folder"
#: Reasons that leave out something that should have been a sample (the rest are not samples).
REFUSALS = frozenset({REASON_OUTSIDE_ROOT, REASON_UNLISTABLE})


class Exclusion(NamedTuple):
    """A file or folder left out: its path, one of the ``REASON_*`` wordings and any detail."""

    path: str
    reason: str
    detail: str = ""

    @property
    def text(self) -> str:
        """The reason as reports print it, with its detail."""
        return f"{self.reason}: {self.detail}" if self.detail else self.reason

    @property
    def refused(self) -> bool:
        """Whether a would-be sample was refused (rather than something that is not a sample)."""
        return self.reason in REFUSALS


class FolderEntry(Protocol):
    """One entry of a folder listing (``os.DirEntry`` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def path(self) -> str: ...

    def is_dir(self) -> bool: ...

    def is_symlink(self) -> bool: ...


def list_folder(folder: str) -> list[FolderEntry]:
    """The entries of ``folder``, sorted by name: the walk's one listing call (an ``OSError``
    when the folder cannot be listed)."""
    with os.scandir(folder) as entries:
        return sorted(entries, key=_name_of)


def _name_of(entry: FolderEntry) -> str:
    return entry.name


def is_class_folder(entry: FolderEntry) -> bool:
    """A folder, or a link to one, with a name that is not hidden."""
    return not entry.name.startswith(".") and entry.is_dir()


# What an entry turned out to be once hidden names and symlinks were dealt with.
SKIPPED, FILE, FOLDER = 0, 1, 2


class FolderWalk:
    """One discovery's walk below ``root``: the rules applied entry by entry, exclusions collected
    in :attr:`excluded`, in walking order.

    Raises :class:`torchloom.errors.MissingFileError` when ``root`` is not a folder and
    :class:`torchloom.errors.ConfigError` for an extension without its leading dot.
    """

    def __init__(self, root: str | os.PathLike[str], extensions: Sequence[str], *, allow_outside_root: bool):
        self.root = os.fspath(root)
        if not os.path.isdir(self.root):
            raise MissingFileError(f"{self.root!r} is not a folder")
        if not extensions or not all(extension.startswith(".") for extension in extensions):
            raise ConfigError(f"extensions start with '.', e.g. ('.jpg', '.png'); got {list(extensions)}")
        self.extensions = tuple(extension.lower() for extension in extensions)
        self.real_root = os.path.realpath(self.root)
        self.allow_outside_root = allow_outside_root
        self.excluded: list[Exclusion] = []

    def top(self) -> list[FolderEntry]:
        """The root's entries (the root itself must be listable: its ``OSError`` is raised)."""
        return list_folder(self.root)

    @staticmethod
    def class_names(listings: list[list[FolderEntry]]) -> list[str]:
        """The sorted names of the class folders in the listings of one or more class roots."""
        return sorted({entry.name for entries in listings for entry in entries if is_class_folder(entry)})

    def class_root(
        self, real: str, entries: list[FolderEntry], classes: list[str]
    ) -> tuple[list[str], list[int]]:
        """The files of the class folders among ``entries`` (the listing of a class root whose real
        path is ``real``), labelled by their place in ``classes``; stray files are noted."""
        files: list[str] = []
        labels: list[int] = []
        chain = (self.real_root, real)
        for entry in entries:
            if entry.name.startswith("."):
                self.exclude(entry.path, REASON_HIDDEN)
            elif not is_class_folder(entry):
                self.exclude(entry.path, REASON_NOT_IN_CLASS)
            else:
                kind, entry_real = self.resolve(entry, real, chain)
                listing = self.listing(entry.path) if kind == FOLDER else None
                if listing is not None:
                    found = self.below(entry.path, entry_real, chain, listing)
                    files += found
                    labels += [classes.index(entry.name)] * len(found)
        return files, labels

    def below(self, folder: str, real: str, chain: tuple[str, ...], entries: list[FolderEntry]) -> list[str]:
        """The sample files at any depth below ``folder`` (real path ``real``, listing ``entries``,
        reached through the real folders ``chain``), in path order."""
        found: list[str] = []
        stack: list[tuple[Iterator[FolderEntry], str, tuple[str, ...]]] = [
            (iter(entries), real, (*chain, real))
        ]
        while stack:
            pending, parent, ancestors = stack[-1]
            for entry in pending:
                kind, entry_real = self.resolve(entry, parent, ancestors)
                if kind == FILE:
                    if entry.name.lower().endswith(self.extensions):
                        found.append(entry.path)
                    else:
                        self.exclude(entry.path, REASON_EXTENSION)
                elif kind == FOLDER:
                    listing = self.listing(entry.path)
                    if listing is not None:  # walk it now: its files come where it sorts
                        stack.append((iter(listing), entry_real, (*ancestors, entry_real)))
                        break
            else:
                stack.pop()
        return found

    def resolve(
        self, entry: FolderEntry, parent: str, ancestors: tuple[str, ...], *, quiet: bool = False
    ) -> tuple[int, str]:
        """What ``entry`` (in the real folder ``parent``) is: ``SKIPPED`` (why noted unless
        ``quiet``), a ``FILE`` or a ``FOLDER`` to walk, with its real path when a folder or link."""
        if entry.name.startswith("."):
            return self._skip(entry, REASON_HIDDEN, "", quiet), ""
        if not entry.is_symlink():  # no system call: the listing says what the entry is
            return (FOLDER, os.path.join(parent, entry.name)) if entry.is_dir() else (FILE, "")
        real = os.path.realpath(entry.path)
        if not os.path.exists(real):  # a link to nothing: listed, for validation to report missing
            return FILE, real
        if not self.allow_outside_root and not lies_inside(real, self.real_root):
            return self._skip(entry, REASON_OUTSIDE_ROOT, f"resolves to {real!r}", quiet), real
        if not os.path.isdir(real):
            return FILE, real
        if any(lies_inside(ancestor, real) for ancestor in ancestors):
            return self._skip(entry, REASON_LOOP, f"resolves to {real!r}", quiet), real
        return FOLDER, real

    def listing(self, folder: str) -> list[FolderEntry] | None:
        """The entries of ``folder``, or None (noted) when it cannot be listed."""
        try:
            return list_folder(folder)
        except OSError as error:
            self.exclude(folder, REASON_UNLISTABLE, f"{type(error).__name__}: {error}")
            return None

    def exclude(self, path: str, reason: str, detail: str = "") -> None:
        self.excluded.append(Exclusion(path, reason, detail))

    def _skip(self, entry: FolderEntry, reason: str, detail: str, quiet: bool) -> int:
        if not quiet:
            self.exclude(entry.path, reason, detail)
        return SKIPPED
