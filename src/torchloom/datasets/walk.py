"""The walk behind :mod:`torchloom.datasets.discovery`: each entry of a folder tree judged by the
rules, in order, with one wording per reason something is left out.

The module docstring of :mod:`torchloom.datasets.discovery` states the rules; this module applies
them. Listing goes through :func:`list_folder` alone, so another lister can stand in for
``os.scandir``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple, Protocol

from torchloom.errors import ConfigError, MissingFileError
from torchloom.io.file_errors import file_error
from torchloom.io.files import lies_inside

REASON_HIDDEN = "hidden (name starts with '.')"
REASON_METADATA = "metadata folder of an OS or an archiver, not data"
REASON_EXTENSION = "extension not in extensions"
REASON_NOT_IN_CLASS = "not in a class folder"
REASON_BESIDE_SPLITS = "folder beside the split folders"
REASON_OUTSIDE_ROOT = "symlink leading outside the root"
REASON_LOOP = "symlink loop (a folder already on its own path)"
REASON_UNLISTABLE = "cannot list folder"
REASON_MISSING_FOLDER = "symlink to a missing folder"
#: Reasons that leave out something that should have been a sample (the rest are not samples).
REFUSALS = frozenset({REASON_OUTSIDE_ROOT, REASON_UNLISTABLE, REASON_MISSING_FOLDER})
#: What to do about each refusal, for the messages that must name the fix.
REFUSAL_FIXES = {
    REASON_OUTSIDE_ROOT: "move it inside the root, or pass allow_outside_root=True (on the command "
    "line: --allow-outside-root) if you trust where it leads",
    REASON_UNLISTABLE: "fix its permissions (or run as a user who may list it)",
    REASON_MISSING_FOLDER: "mount the disk or share it is on again, or remove the link",
}
#: Folders that operating systems, archivers and NAS boxes write beside the data: an unzipped
#: macOS archive's ``__MACOSX`` (``._*`` copies of every file), Synology's ``@eaDir`` thumbnails,
#: Windows' recycle bin and volume information.
METADATA_FOLDERS = frozenset({"__MACOSX", "@eaDir", "$RECYCLE.BIN", "System Volume Information"})


class Exclusion(NamedTuple):
    """A file or folder left out: its path, one of the ``REASON_*`` wordings and any detail.

    Example:
        >>> import os, tempfile
        >>> from torchloom.datasets import find_samples
        >>> with tempfile.TemporaryDirectory() as root:
        ...     os.makedirs(os.path.join(root, "cat"))
        ...     _ = open(os.path.join(root, "cat", "notes.txt"), "w").write("x")
        ...     (exclusion,) = find_samples(root).excluded
        ...     print(os.path.basename(exclusion.path), "|", exclusion.text, "|", exclusion.refused)
        notes.txt | extension not in extensions | False
    """

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
    """One entry of a folder listing (``os.DirEntry`` is one, an object store's
    :class:`~torchloom.datasets.ObjectEntry` another).

    Example:
        >>> import os
        >>> from torchloom.datasets import FolderEntry
        >>> entry: FolderEntry = next(iter(os.scandir(os.path.dirname(os.__file__))))
        >>> isinstance(entry.name, str)
        True
    """

    @property
    def name(self) -> str: ...

    @property
    def path(self) -> str: ...

    def is_dir(self) -> bool: ...

    def is_symlink(self) -> bool: ...


#: A folder's entries, sorted by name (an ``OSError`` when it cannot be listed).
Lister = Callable[[str], "list[FolderEntry]"]


def list_folder(folder: str) -> list[FolderEntry]:
    """The entries of ``folder``, sorted by name: the walk's one listing call (an ``OSError``
    when the folder cannot be listed)."""
    with os.scandir(folder) as entries:
        return sorted(entries, key=_name_of)


def _name_of(entry: FolderEntry) -> str:
    return entry.name


def left_out_by_name(name: str) -> str | None:
    """The reason an entry's name alone leaves it out (hidden, a metadata folder), or None.

    Example:
        >>> left_out_by_name(".DS_Store"), left_out_by_name("__MACOSX"), left_out_by_name("cat")
        ("hidden (name starts with '.')", 'metadata folder of an OS or an archiver, not data', None)
    """
    if name.startswith("."):
        return REASON_HIDDEN
    return REASON_METADATA if name in METADATA_FOLDERS else None


def is_class_folder(entry: FolderEntry) -> bool:
    """A folder, or a link to one, that its name does not leave out; or a link to nothing named
    as folders are (without an extension): a class folder on a disk that is not there, which keeps
    its class so that the label numbers do not shift."""
    if left_out_by_name(entry.name) is not None:
        return False
    if entry.is_dir():
        return True
    return entry.is_symlink() and not os.path.splitext(entry.name)[1] and not os.path.exists(entry.path)


def require_folder(path: str, what: str = "") -> None:
    """Raise unless ``path`` is a folder: :class:`~torchloom.errors.MissingFileError` (``"{what}'path'
    is not a folder"``) when it is not one, the file layer's typed error when it cannot be examined
    (permission denied on the way, a symlink loop, a path too long)."""
    try:
        is_folder = stat.S_ISDIR(os.stat(path).st_mode)
    except OSError as exc:
        error = file_error(path, exc)
        if not isinstance(error, MissingFileError):
            raise error from None
        is_folder = False
    if not is_folder:
        raise MissingFileError(f"{what}{path!r} is not a folder")


# What an entry turned out to be once names and symlinks were dealt with: left out, a file, a
# folder to walk, or a link to nothing (a file for validation to report missing, unless it stands
# where a class folder is expected).
SKIPPED, FILE, FOLDER, DANGLING = 0, 1, 2, 3


class FolderWalk:
    """One discovery's walk below ``root``: the rules applied entry by entry, exclusions collected
    in :attr:`excluded`, in walking order.

    Raises :class:`torchloom.errors.MissingFileError` when ``root`` is not a folder and
    :class:`torchloom.errors.ConfigError` for an extension without its leading dot.

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

    def __init__(
        self,
        root: str | os.PathLike[str],
        extensions: Sequence[str],
        *,
        allow_outside_root: bool,
        lister: Lister | None = None,
    ):
        self.root = os.fspath(root)
        #: How a folder is listed: ``os.scandir`` sorted, or a listing of an object store's prefix
        #: (whose entries are never symlinks, so the root is its own real path).
        self.lister = lister or list_folder
        if lister is None:
            require_folder(self.root)
        if not extensions or not all(extension.startswith(".") for extension in extensions):
            raise ConfigError(f"extensions start with '.', e.g. ('.jpg', '.png'); got {list(extensions)}")
        self.extensions = tuple(extension.lower() for extension in extensions)
        self.real_root = os.path.realpath(self.root) if lister is None else self.root
        self.allow_outside_root = allow_outside_root
        self.excluded: list[Exclusion] = []

    def top(self) -> list[FolderEntry]:
        """The root's entries; a root that cannot be listed is the file layer's typed error
        (:class:`~torchloom.errors.UnreadableFileError` for permissions), naming the fix."""
        try:
            return self.lister(self.root)
        except OSError as exc:
            raise file_error(self.root, exc) from None

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
            reason = left_out_by_name(entry.name)
            if reason is not None:
                self.exclude(entry.path, reason)
            elif not is_class_folder(entry):
                self.exclude(entry.path, REASON_NOT_IN_CLASS)
            else:
                listing = self.folder_listing(entry, real, chain)
                if listing is not None:
                    entry_real, entries_below = listing
                    found = self.below(entry.path, entry_real, chain, entries_below)
                    files += found
                    labels += [classes.index(entry.name)] * len(found)
        return files, labels

    def folder_listing(
        self, entry: FolderEntry, parent: str, ancestors: tuple[str, ...]
    ) -> tuple[str, list[FolderEntry]] | None:
        """The real path and the entries of ``entry``, a class or split folder (in the real folder
        ``parent``), or None when it cannot be read (noted with the reason; a link to nothing is
        refused as a missing folder)."""
        kind, real = self.resolve(entry, parent, ancestors)
        if kind == DANGLING:
            self.exclude(entry.path, REASON_MISSING_FOLDER, _missing_target(entry.path))
            return None
        listing = self.listing(entry.path) if kind == FOLDER else None
        return None if listing is None else (real, listing)

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
                if kind in (FILE, DANGLING):  # a link to nothing is listed: validation says missing
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

    def resolve(self, entry: FolderEntry, parent: str, ancestors: tuple[str, ...]) -> tuple[int, str]:
        """What ``entry`` (in the real folder ``parent``) is: ``SKIPPED`` (why noted), a ``FILE``
        or a ``FOLDER`` to walk, or a ``DANGLING`` link to nothing inside the root, with its real
        path when a folder or link."""
        name = entry.name
        if name[0] == "." or name in METADATA_FOLDERS:  # left_out_by_name, inlined: once per entry
            return self._skip(entry, REASON_HIDDEN if name[0] == "." else REASON_METADATA), ""
        if not entry.is_symlink():  # no system call: the listing says what the entry is
            return (FOLDER, os.path.join(parent, entry.name)) if entry.is_dir() else (FILE, "")
        real = os.path.realpath(entry.path)
        # Where a link leads is judged before whether its target exists: a link out of the root to
        # a file not there yet is refused now, not listed to be read once the file appears.
        if not self.allow_outside_root and not lies_inside(real, self.real_root):
            return self._skip(entry, REASON_OUTSIDE_ROOT, f"resolves to {real!r}"), real
        if not os.path.exists(real):
            return DANGLING, real
        if not os.path.isdir(real):
            return FILE, real
        if any(lies_inside(ancestor, real) for ancestor in ancestors):
            return self._skip(entry, REASON_LOOP, f"resolves to {real!r}"), real
        return FOLDER, real

    def listing(self, folder: str) -> list[FolderEntry] | None:
        """The entries of ``folder``, or None (noted) when it cannot be listed."""
        try:
            return self.lister(folder)
        except OSError as error:
            self.exclude(folder, REASON_UNLISTABLE, f"{type(error).__name__}: {error}")
            return None

    def exclude(self, path: str, reason: str, detail: str = "") -> None:
        self.excluded.append(Exclusion(path, reason, detail))

    def _skip(self, entry: FolderEntry, reason: str, detail: str = "") -> int:
        self.exclude(entry.path, reason, detail)
        return SKIPPED


def _missing_target(link: str) -> str:
    """What a link to nothing points to, for its exclusion's detail."""
    try:
        target = os.readlink(link)
    except OSError:  # replaced by something else since it was listed
        return "it no longer resolves"
    return f"{target!r} does not exist (a disk or share that is not mounted?)"
