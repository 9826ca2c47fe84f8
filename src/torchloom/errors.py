"""Typed errors raised by torchloom: every one a user may catch, in one place.

Every error names what failed (a file, a sample, a column) and, where one exists, the fix.
:class:`TorchloomError` is the base of them all. :class:`DataError` marks bad input (a fault
policy may skip it); the others are settings, usage or bugs, and always propagate. Subpackages
re-export the errors of their own concern (``torchloom.cache.CacheError``), defined here.

Each error's entry says what raises it. Catch the kind you can handle: :class:`DataError` for bad
input (a file, a row), :class:`ConfigError` for a bad argument, :class:`TorchloomError` for all.

Example:
    >>> import os, tempfile
    >>> import torchloom as tl
    >>> from torchloom.errors import DecodeError
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "cat.jpg")
    ...     _ = open(path, "wb").write(b"")
    ...     try:
    ...         tl.read_image(path)
    ...     except DecodeError as error:  # a DataError: the file is bad, not the code
    ...         print(type(error).__name__, isinstance(error, tl.DataError), error.reason)
    DecodeError True file is empty (0 bytes)
    >>> try:
    ...     tl.BalancedSampler([0, 1, 1], mode="squared")
    ... except tl.ConfigError as error:  # a bad argument, refused at construction
    ...     print(isinstance(error, ValueError))
    True
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Sequence

__all__ = [
    "CacheError",
    "CacheSpaceError",
    "CollateError",
    "ConfigError",
    "CorruptCacheError",
    "DataError",
    "DecodeError",
    "DistributedSetupError",
    "EmptyDatasetError",
    "FieldNotFoundError",
    "HeaderError",
    "JoinError",
    "ManifestError",
    "MissingFileError",
    "MissingPlotError",
    "NotACacheError",
    "ObjectChangedError",
    "PathOutsideRootError",
    "SampleError",
    "SampleIndexError",
    "SkippedSampleError",
    "StaleCacheError",
    "StateMismatchError",
    "TimestampError",
    "TorchloomError",
    "TransformError",
    "UnreadableFileError",
    "UnsafeFileError",
    "UnsupportedURLError",
    "UsageError",
    "ValidationFailedError",
]


class TorchloomError(Exception):
    """Base class of every error torchloom raises on purpose.

    Raised by torchloom only as one of its subclasses: ``except TorchloomError`` catches every error
    torchloom raises on purpose.
    """


class DataError(TorchloomError):
    """The input is bad (a file, a row, a record), not the code: a fault policy may skip it.

    Everything else raised while loading a sample (a transform returning the wrong type, a
    ``TypeError`` in user code) is a bug and always propagates, whatever the policy.

    Raised by the readers and datasets (as one of the errors below, or itself for a clip or volume that
    does not fit); ``except DataError`` catches bad input and nothing else.
    """


class DecodeError(DataError):
    """A file could not be read as an image (or other media); names the file and the reason.

    Also constructible from a message alone, as DataLoader does when it re-raises a worker's
    error in the main process.

    Raised by the readers of :mod:`torchloom.io` (``read_image``, ``read_frames``, ``read_volume``, the
    cubes), and by a dataset's sample under ``on_error="raise"`` as the cause of a :class:`SampleError`.
    """

    def __init__(self, path: str | os.PathLike[str], reason: str | None = None) -> None:
        if reason is None:
            self.path, self.reason = "", os.fspath(path)
            super().__init__(self.reason)
            return
        self.path = os.fspath(path)
        self.reason = reason
        super().__init__(f"cannot decode {self.path!r}: {reason}")

    def __reduce__(self) -> tuple[type[DecodeError], tuple[str, str | None]]:
        return (DecodeError, (self.path, self.reason))


# The line a SampleError's own message makes, as it appears in a re-raised worker traceback.
# The path is its repr: single-quoted, or double-quoted when it holds a single quote.
_SAMPLE_ERROR_LINE = re.compile(
    r"SampleError: sample (\d+)(?: \(('(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\")\))? failed"
)


class SampleError(DataError):
    """Loading one sample failed; carries the sample index and path, with the cause chained.

    DataLoader re-raises a worker's error from its message alone: ``SampleError(message)`` keeps
    the message (worker traceback included) and recovers the index from it (``-1`` if absent).

    Raised by a dataset's ``dataset[key]`` under ``on_error="raise"`` (and ``"retry"`` once retries are
    used up), and by a :class:`~torchloom.cache.DecodedCache` read.
    """

    def __init__(self, index: int | str, path: str | None = None, reason: str | None = None) -> None:
        if isinstance(index, str):
            found = _SAMPLE_ERROR_LINE.findall(index)
            self.index = int(found[-1][0]) if found else -1
            quoted = found[-1][1] if found else ""
            self.path = path if path is not None else (ast.literal_eval(quoted) if quoted else None)
            self.reason = index
            super().__init__(index)
            return
        self.index = index
        self.path = path
        self.reason = reason or "unknown reason"
        where = f" ({path!r})" if path else ""
        super().__init__(f"sample {index}{where} failed: {reason}")

    def __reduce__(self) -> tuple[type[SampleError], tuple[int | str, str | None, str | None]]:
        return (SampleError, (self.index, self.path, self.reason))


class ManifestError(DataError, ValueError):
    """A manifest (or its declared fields) is unusable: a missing column, an unsafe path, a NaN.

    Raised by :class:`~torchloom.ManifestDataset` and its fields, :func:`~torchloom.io.read_table`, the
    stream readers and ``torchloom prepare``'s label rules.
    """


class PathOutsideRootError(ManifestError):
    """A manifest row points outside its root (``..``, an absolute path or a symlink).

    Raised by the :class:`~torchloom.Image` field of a manifest (``ManifestDataset``) for a row whose path
    leaves the root, unless ``allow_outside_root=True``.
    """

    def __init__(self, row: int, value: str, root: str, why: str) -> None:
        self.row = row
        self.value = value
        self.root = root
        self.why = why
        super().__init__(
            f"manifest row {row}: path {value!r} {why} and leads outside root {root!r}; "
            "fix the manifest, pass a wider root=, or pass allow_outside_root=True (on the command "
            "line: --allow-outside-root) if you trust it"
        )

    def __reduce__(self) -> tuple[type[PathOutsideRootError], tuple[int, str, str, str]]:
        return (PathOutsideRootError, (self.row, self.value, self.root, self.why))


class _FileRefusal(OSError):
    """What the errors naming a file and why it cannot be read share: ``path`` and ``why``, the
    message ``"<verb> 'path': why"``, and a rebuild from the message alone (as DataLoader re-raises
    a worker's error)."""

    VERB = ""

    def __init__(self, path: str | os.PathLike[str], why: str | None = None) -> None:
        if why is None:
            self.path, self.why = "", os.fspath(path)
        else:
            self.path, self.why = os.fspath(path), why
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.VERB} {self.path!r}: {self.why}" if self.path else self.why


class UnsafeFileError(DataError, _FileRefusal):
    """A path is not a regular file (a FIFO, a device, a socket) or escapes its root at read time.

    Refused before ``open``: reading a FIFO blocks forever, a device never ends.

    Raised by the file layer (:mod:`torchloom.io`) when a file is opened, and so by every reader, and by
    ``torchloom prepare`` when it copies.
    """

    VERB = "refusing to read"

    def __reduce__(self) -> tuple[type[UnsafeFileError], tuple[str, str | None]]:
        return (UnsafeFileError, (self.path, self.why))


class UnreadableFileError(DataError, _FileRefusal):
    """A file or folder exists but cannot be read: permission denied, a symlink loop, a path longer
    than the system allows. Names the path, the system's reason and the fix; ``errno`` is the
    system's error number.

    Raised by the file layer (:mod:`torchloom.io`) and the folder walker of every folder dataset,
    ``doctor`` and ``prepare``.
    """

    VERB = "cannot read"

    def __init__(self, path: str | os.PathLike[str], why: str | None = None, code: int | None = None) -> None:
        super().__init__(path, why)
        self.errno = code

    def __reduce__(self) -> tuple[type[UnreadableFileError], tuple[str, str | None, int | None]]:
        return (UnreadableFileError, (self.path, self.why, self.errno))


class ConfigError(TorchloomError, ValueError):
    """An argument or setting is invalid; says what was given and what would work.

    Raised by the constructors (datasets, samplers, transforms, caches, streams) when an argument is
    checked, before any file is read.
    """


def check_choice(name: str, value: object, choices: Sequence[object]) -> None:
    """Raise :class:`ConfigError` naming the setting and its choices unless ``value`` is one of them.

    Example:
        >>> check_choice("mode", "inverse", ("inverse", "sqrt"))
        >>> try:
        ...     check_choice("mode", "log", ("inverse", "sqrt"))
        ... except ConfigError as error:
        ...     print(error)
        Invalid mode='log'; must be one of ('inverse', 'sqrt')
    """
    if value not in choices:
        raise ConfigError(f"Invalid {name}={value!r}; must be one of {choices}")


class UnsupportedURLError(ConfigError):
    """A URL (``gs://``, ``az://``, any ``scheme://``) whose store fsspec cannot reach: its
    filesystem package is not installed (names the one to install), or the scheme is unknown.

    Raised by the file layer's :class:`~torchloom.io.ObjectStore` when it first reaches the store.
    """


class ObjectChangedError(DataError, _FileRefusal):
    """An object in a store changed (another size or ETag) since the dataset indexed it: its new
    bytes are never mixed in with samples read before. Rebuild the dataset (or its manifest) to
    take the new version.

    Raised by the file layer's :class:`~torchloom.io.ObjectRoot` at a read.
    """

    VERB = "object changed since it was indexed:"

    def __reduce__(self) -> tuple[type[ObjectChangedError], tuple[str, str | None]]:
        return (ObjectChangedError, (self.path, self.why))


def install_hint(package: str, extra: str) -> str:
    """How to install an optional dependency: the package itself, or the extra from a clone.

    Example:
        >>> install_hint("h5py", "hdf5")
        "pip install h5py (or, in a torchloom clone, pip install -e '.[hdf5]')"
    """
    return f"pip install {package} (or, in a torchloom clone, pip install -e '.[{extra}]')"


class UsageError(TorchloomError, TypeError):
    """torchloom was called in a way it does not support (a wrong key type, a length asked of a stream).

    Raised by datasets, samplers, collate rules, the loader and the fusion classes when called as they do
    not support (a keyword they do not take included).
    """


class SampleIndexError(TorchloomError, IndexError):
    """An index outside a dataset, window index or column; says the valid range.

    Raised by ``dataset[key]`` of every dataset (and a cube's window read) for an index out of range.
    """


class FieldNotFoundError(TorchloomError, KeyError):
    """A field, column or key that does not exist was asked for; lists those that do.

    Raised by :class:`~torchloom.TableDataset` and :class:`~torchloom.ManifestDataset` for a column the
    table lacks.
    """

    def __str__(self) -> str:  # KeyError would show the message as a quoted repr
        return str(self.args[0]) if self.args else ""


class MissingFileError(DataError, FileNotFoundError):
    """A file that must exist (a manifest, a dataset root) does not.

    Raised by the folder datasets, the file layer, the ENVI reader and ``torchloom doctor`` for a root,
    manifest or data file that is not there.
    """


class DistributedSetupError(TorchloomError, RuntimeError):
    """The process cannot tell its rank or world size; says what to pass or where to build.

    Raised by :class:`~torchloom.StreamDataset` inside a DataLoader worker when ``WORLD_SIZE`` says
    several processes but the main process never saw ``torch.distributed`` initialised.
    """


class TransformError(TorchloomError, TypeError):
    """A transform (the code, not the data) misbehaved: wrong call signature or output type.

    A bug, never skipped by a fault policy; names the transform and the fix.

    Raised by a dataset (at construction for a transform of the wrong signature, per sample for a wrong
    output) and by the transforms themselves; never skipped by a fault policy.
    """


class EmptyDatasetError(TorchloomError, ValueError):
    """A dataset found no usable samples. Raised by the folder and manifest datasets,
    :class:`~torchloom.datasets.HyperspectralDataset` and the decoded cache's build."""


class ValidationFailedError(TorchloomError, ValueError):
    """``strict=True`` validation found invalid samples; lists every one of them.

    Raised by the datasets that index files (``FolderDataset``, ``ManifestDataset``, ...) at construction
    with ``strict=True``.
    """

    def __init__(self, what: str, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = list(problems)
        self.what = what
        lines = "\n".join(f"  {path}: {reason}" for path, reason in self.problems)
        super().__init__(f"{what}: {len(self.problems)} invalid sample(s):\n{lines}")

    def __reduce__(self) -> tuple[type[ValidationFailedError], tuple[str, list[tuple[str, str]]]]:
        return (ValidationFailedError, (self.what, self.problems))


# Errors of one subsystem each, re-exported by its package.


class CacheError(TorchloomError):
    """A decoded cache cannot be used as it is (also raised for a cache of a newer format).

    Raised by :class:`~torchloom.DecodedCache` (building, opening, reading), as itself or one of the
    errors below.
    """


class StaleCacheError(CacheError):
    """The inputs (files' sizes and times, the file list) or the settings changed since the cache
    was built, and ``rebuild=False`` forbids rebuilding it; says what changed. Raised by
    :class:`~torchloom.DecodedCache` when it opens the cache; rebuild it (``rebuild=True``).
    """


class CorruptCacheError(CacheError):
    """A cache file is missing, truncated or altered (its checksum differs); names the file.
    Raised by :class:`~torchloom.DecodedCache` when it opens or reads a damaged cache."""


class NotACacheError(CacheError):
    """The cache path holds something that is not a torchloom cache; it is never overwritten.
    Raised by :class:`~torchloom.DecodedCache` for a cache path that holds other files."""


class CacheSpaceError(CacheError):
    """``location="memory"`` asked for more shared memory than is free, or than ``memory_budget``
    allows beside the copies in use; says both sizes. Raised by :class:`~torchloom.DecodedCache`."""


class StateMismatchError(TorchloomError, ValueError):
    """A checkpoint does not fit the object it is loaded into; names the field and both values.
    Raised by every ``load_state_dict`` of torchloom's samplers, streams and loader."""


class SkippedSampleError(TorchloomError, TypeError):
    """A :class:`Skipped` marker was used as a sample; names the sample and the fix.

    Raised by a :class:`~torchloom.Skipped` marker indexed, measured or iterated as if it were a sample
    (torch's default collate does so).
    """


class JoinError(TorchloomError, ValueError):
    """Sources cannot be joined: duplicate keys, key types that differ, a source without keys.
    Raised by :class:`~torchloom.fusion.JoinedDataset` at construction."""


class TimestampError(TorchloomError, ValueError):
    """A stream's timestamps cannot be aligned: out of order, NaN/NaT, infinite, of another kind
    than the other streams', or out of the exact range. The message names the stream, the position
    and the fix.

    Raised by :class:`~torchloom.fusion.TimeSync` (offline at construction, online as the streams are
    read).
    """


class MissingPlotError(TorchloomError, ImportError):
    """matplotlib (the ``plot`` extra) is not installed. Raised by
    :func:`~torchloom.tools.show.draw_grid` and the plots of ``show`` and ``bench``."""


class HeaderError(DecodeError):
    """An ENVI header is malformed or inconsistent; names the file and the line or key.

    Example:
        >>> error = HeaderError("scene.hdr", "line 2: samples = '-1' is not a whole number >= 1")
        >>> isinstance(error, DecodeError), "scene.hdr" in str(error)
        (True, True)

    Raised by :func:`~torchloom.io.open_envi` and :func:`~torchloom.io.read_header`.
    """

    def __reduce__(self) -> tuple[type[HeaderError], tuple[str, str | None]]:
        return (HeaderError, (self.path, self.reason))


class CollateError(TorchloomError, ValueError):
    """Samples cannot be batched; names the field, what was seen and the fix.

    Raised by :func:`~torchloom.collate` and :class:`~torchloom.Collate` (and its rules) while a batch is
    made.
    """
