"""The options datasets share, declared and checked once.

Which datasets take which:

- the datasets that decode each sample from files take the :class:`SampleOptions` (what happens to
  each sample: ``transform``, ``on_error``, ``seed``, ``debug``): ``FolderDataset``,
  ``ManifestDataset``, ``VideoClipDataset``, ``VolumeDataset``, ``HyperspectralDataset``;
- those of them that index files found in a folder or named by a manifest also take the
  :class:`IndexingOptions` (how the files are checked at construction: ``validate``, ``strict``,
  ``allow_outside_root``, ``num_threads``, ``progress``): all but ``HyperspectralDataset``, which
  opens each cube it is given (a cube that cannot be opened raises, naming it);
- the datasets made from other datasets or from values in memory take neither:
  ``TableDataset``, ``MixedDataset``, ``WindowDataset``,
  ``JoinedDataset``, ``TimeSync``, ``DecodedCache``. Their samples come from their sources, whose
  options apply (``DecodedCache`` applies its dataset's transform, policy and seed); nothing of
  theirs is decoded or can fail per sample.

Constructors take the options as keywords, ``FolderDataset(root, transform=t, on_error="skip")``,
typed ``**options: Unpack[IndexingOptions]`` so that a type checker knows every name and type, and
keep as their own arguments only what is theirs (a clip's frames, a manifest's fields). The checks
run here, before any file is read: a bad value is a :class:`~torchloom.errors.ConfigError` with the
same text for every dataset; a keyword the dataset does not take is a
:class:`~torchloom.errors.UsageError` (a ``TypeError``) naming it, with the closest keyword it does
take, or saying why it takes none of that kind.

Example:
    >>> import pyarrow as pa
    >>> from torchloom import FolderDataset, TableDataset
    >>> try:
    ...     FolderDataset("photos", on_eror="skip")  # checked before the folder is looked at
    ... except TypeError as error:
    ...     print(type(error).__name__, error)
    UsageError FolderDataset() got an unexpected keyword argument 'on_eror'; did you mean on_error=?
    >>> try:
    ...     TableDataset(pa.table({"x": [1]}), seed=3)
    ... except TypeError as error:
    ...     print(*str(error).split(": "), sep="\\n")
    TableDataset() got an unexpected keyword argument 'seed'
    TableDataset takes no seed=
    its rows are read whole at construction
    nothing is decoded or can fail per row (wrap it in a Dataset of your own to transform rows)
"""

from __future__ import annotations

import difflib
import functools
import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np
from typing_extensions import ParamSpec

from torchloom.datasets.index import VALIDATE_CHOICES, Validate
from torchloom.errors import ConfigError, UsageError, check_choice
from torchloom.faults import FaultPolicy
from torchloom.io.files import Inside, is_url
from torchloom.io.objects import ObjectRoot, ObjectStore
from torchloom.transforms.base import Transform, check_transform


class SampleOptions(TypedDict, total=False):
    """What a dataset that decodes samples from files does with each: keywords of its constructor
    (``FolderDataset``, ``ManifestDataset``, ``VideoClipDataset``, ``VolumeDataset``,
    ``HyperspectralDataset``).

    Attributes:
        transform: ``transform(data, rng)`` on what the dataset decodes (an HWC ``uint8`` image, a
            ``(T, H, W, 3)`` clip, a volume, a cube's HWC patch), with the sample's generator;
            see :mod:`torchloom.transforms`. Default ``None``: no transform.
        on_error: what a sample that fails to load does: ``"raise"`` (default, a
            :class:`~torchloom.errors.SampleError` naming it), ``"skip"`` (a
            :class:`~torchloom.Skipped` marker that collate drops), ``"retry"``, or a
            :class:`~torchloom.FaultPolicy`.
        seed: the seed of :func:`torchloom.sample_rng` for :class:`~torchloom.SampleKey` keys, an
            int >= 0 (default 0).
        debug: log the first samples and check that every sample has the same keys, dtypes and
            dimensions (default ``False``).
        storage_options: how to reach a root or files given as URLs (``s3://bucket/train``): the
            options of the fsspec filesystem (``key``, ``secret``, ``anon``,
            ``client_kwargs={"endpoint_url": ...}``), as pandas and Hugging Face datasets take
            them, or an :class:`~torchloom.io.ObjectStore` (to set ``max_in_flight`` or the
            retries too). Default ``None``: credentials from the environment.

    Example:
        >>> import tempfile
        >>> from torchloom import FolderDataset
        >>> from torchloom.datasets import SampleOptions
        >>> from torchloom.testing import write_class_folders
        >>> options: SampleOptions = {"on_error": "skip", "seed": 7}
        >>> with tempfile.TemporaryDirectory() as root:
        ...     _ = write_class_folders(root, [2], size=(8, 8), progress=False)
        ...     dataset = FolderDataset(root, progress=False, **options)
        ...     print(dataset.policy.on_error, dataset.seed)
        skip 7
    """

    transform: Transform | None
    on_error: str | FaultPolicy
    seed: int
    debug: bool
    storage_options: Mapping[str, Any] | ObjectStore | None


class IndexingOptions(SampleOptions, total=False):
    """How a dataset that indexes files checks them at construction, beside the
    :class:`SampleOptions`: keywords of every dataset that indexes files found in a folder or
    named by a manifest (``FolderDataset``, ``ManifestDataset``, ``VideoClipDataset``,
    ``VolumeDataset``).

    Attributes:
        validate: how each file is checked: ``"none"``, ``"exists"``, ``"header"`` (default: the
            header is read, cheap) or ``"full"`` (decoded). Datasets that read each file's header to
            index it (videos, volumes) take ``"header"`` or ``"full"``. Invalid files are left out
            and listed in the dataset's ``report``.
        strict: raise one :class:`~torchloom.errors.ValidationFailedError` listing every invalid
            file instead of leaving them out (default ``False``).
        allow_outside_root: accept paths and symlinks that lead outside the dataset's root
            (default ``False``: refused at construction and again at every read).
        num_threads: threads that check the files (default ``None``: one per core this process
            may use, at most 32; the same rule for all file work: validation, the decoded cache,
            ``doctor``, ``prepare``. The :class:`~torchloom.Loader` caps its batch threads at 8).
        progress: show a progress bar while they run (default ``True``).
        share_index: under DDP (a default process group of two or more ranks), rank 0 lists and
            validates and broadcasts the index, which the other ranks take without a request:
            ``None`` (default) for a root or manifest given as a URL, ``True`` for local files too
            (the ranks must see the same paths), ``False`` never. Every rank must then construct
            the dataset, in the same order (a collective call, as with ``DistributedSampler``); an
            error on rank 0 is raised on every rank. ``FolderDataset`` and ``ManifestDataset``
            share; the others index on every rank.

    Example:
        >>> import tempfile
        >>> from torchloom import FolderDataset
        >>> from torchloom.datasets import IndexingOptions
        >>> from torchloom.testing import write_class_folders
        >>> indexing: IndexingOptions = {"validate": "full", "progress": False}
        >>> with tempfile.TemporaryDirectory() as root:
        ...     _ = write_class_folders(root, [3], size=(8, 8), truncated=1, progress=False)
        ...     dataset = FolderDataset(root, **indexing)  # the truncated file fails a full decode
        ...     print(len(dataset), len(dataset.report.invalid))
        3 1
    """

    validate: Validate
    strict: bool
    allow_outside_root: bool
    num_threads: int | None
    progress: bool
    share_index: bool | None


@dataclass(frozen=True)
class SampleSettings:
    """The :class:`SampleOptions` of one dataset, checked, with their defaults filled in."""

    transform: Transform | None
    policy: FaultPolicy
    seed: int
    debug: bool
    #: The store URLs are read from (made from ``storage_options``).
    store: ObjectStore = field(default_factory=ObjectStore)


@dataclass(frozen=True)
class IndexingSettings:
    """The :class:`IndexingOptions` of one dataset, checked, with their defaults filled in."""

    validate: Validate = "header"
    strict: bool = False
    allow_outside_root: bool = False
    num_threads: int | None = None
    progress: bool = True
    share_index: bool | None = None

    def threads_for(self, read_root: Inside) -> int | None:
        """Threads that check files under ``read_root``: ``num_threads``, or for an object store
        (where each check waits on the network, not a core) its ``max_in_flight``."""
        if self.num_threads is None and isinstance(read_root, ObjectRoot):
            return read_root.store.max_in_flight
        return self.num_threads

    def read_root(self, root: str | os.PathLike[str], store: ObjectStore | None = None) -> Inside:
        """What every read of the dataset must stay in: ``root`` with its symlinks resolved, or
        ``None`` with ``allow_outside_root``; for a root URL, an :class:`~torchloom.io.ObjectRoot`
        of ``store`` (which also serves the reads)."""
        text = os.fspath(root)
        if is_url(text):
            return ObjectRoot(text, store or ObjectStore(), confined=not self.allow_outside_root)
        return None if self.allow_outside_root else os.path.realpath(text)


_SAMPLE_NAMES = tuple(SampleOptions.__annotations__)
_INDEXING_NAMES = tuple(IndexingOptions.__annotations__)
# Why HyperspectralDataset takes the sample options only.
_OPENS_ITS_CUBES = (
    "it takes the sample options ({sample}) but not the indexing ones: it opens each cube it is "
    "given (one that cannot be opened raises, naming it) and lists or validates no folder"
)

P = ParamSpec("P")


def sample_settings(options: Mapping[str, Any], *, what: type) -> SampleSettings:
    """The checked :class:`SampleOptions` of a dataset of class ``what`` (its constructor's other
    keywords are the hints of an unexpected one)."""
    _refuse_unknown(options, _SAMPLE_NAMES, what, reason=_OPENS_ITS_CUBES)
    return _sample(options)


def indexing_settings(
    options: Mapping[str, Any], *, what: type, validate: Sequence[str] = VALIDATE_CHOICES
) -> tuple[SampleSettings, IndexingSettings]:
    """The checked :class:`SampleOptions` and :class:`IndexingOptions` of a dataset of class
    ``what``; ``validate``: the validation modes it offers."""
    _refuse_unknown(options, _INDEXING_NAMES, what)
    sample = _sample(options)
    mode = options.get("validate", IndexingSettings.validate)
    check_choice("validate", mode, tuple(validate))
    num_threads = options.get("num_threads")
    if num_threads is not None and (not _is_int(num_threads) or num_threads < 1):
        raise ConfigError(f"num_threads must be an int >= 1 or None, got num_threads={num_threads!r}")
    indexing = IndexingSettings(
        validate=mode,
        strict=_flag(options, "strict", IndexingSettings.strict),
        allow_outside_root=_flag(options, "allow_outside_root", IndexingSettings.allow_outside_root),
        num_threads=None if num_threads is None else int(num_threads),
        progress=_flag(options, "progress", IndexingSettings.progress),
        share_index=_share_index(options.get("share_index")),
    )
    return sample, indexing


def takes_no_sample_options(why: str) -> Callable[[Callable[P, None]], Callable[P, None]]:
    """Decorate the ``__init__`` of a dataset made from other datasets or from values in memory:
    a keyword it does not take is a :class:`~torchloom.errors.UsageError` (not Python's bare
    ``TypeError``), with the closest keyword it takes, or, for a dataset option, ``why`` it does
    not take it (where it goes instead).

    Example:
        >>> class Pairs:
        ...     @takes_no_sample_options("its pairs are in memory")
        ...     def __init__(self, pairs: list, *, swap: bool = False) -> None:
        ...         self.pairs = pairs
        >>> Pairs([], swop=True)
        Traceback (most recent call last):
        ...
        torchloom.errors.UsageError: Pairs() got an unexpected keyword argument 'swop'; did you mean swap=?
    """

    def decorate(init: Callable[P, None]) -> Callable[P, None]:
        own = _keyword_names(init)

        @functools.wraps(init)
        def checked(*args: P.args, **kwargs: P.kwargs) -> None:
            for given in kwargs:
                if given not in own:
                    what = type(args[0]).__name__
                    raise _unexpected(what, given, own, f"{what} takes no {given}=: {why}")
            init(*args, **kwargs)

        return checked

    return decorate


def _refuse_unknown(options: Mapping[str, Any], names: Sequence[str], what: type, reason: str = "") -> None:
    accepted = [*_keyword_names(what), *names]
    for given in options:
        if given not in names:
            sample = ", ".join(f"{name}=" for name in _SAMPLE_NAMES)
            raise _unexpected(what.__name__, given, accepted, reason.format(sample=sample))


def _unexpected(what: str, given: str, accepted: Sequence[str], reason: str) -> UsageError:
    """The error for keyword ``given``: ``reason`` when it is a dataset option the dataset does not
    take, else the closest keyword it takes (or them all)."""
    if reason and given in _INDEXING_NAMES:
        return UsageError(f"{what}() got an unexpected keyword argument {given!r}: {reason}")
    close = difflib.get_close_matches(given, accepted, n=1)
    hint = f"did you mean {close[0]}=?" if close else f"it takes {sorted(accepted)}"
    return UsageError(f"{what}() got an unexpected keyword argument {given!r}; {hint}")


def _keyword_names(function: Callable[..., Any]) -> list[str]:
    """The parameters of ``function`` (or of a class's constructor) that may be given by keyword
    (``self`` and ``**`` left out)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    parameters = inspect.signature(function).parameters.values()
    return [each.name for each in parameters if each.kind in kinds and each.name != "self"]


def _sample(options: Mapping[str, Any]) -> SampleSettings:
    transform = options.get("transform")
    check_transform(transform)
    seed = options.get("seed", 0)
    if not _is_int(seed) or seed < 0:
        raise ConfigError(f"seed must be an int >= 0, got seed={seed!r}")
    return SampleSettings(
        transform=transform,
        policy=FaultPolicy.parse(options.get("on_error", "raise")),
        seed=int(seed),
        debug=_flag(options, "debug", False),
        store=object_store(options.get("storage_options")),
    )


def object_store(storage_options: Mapping[str, Any] | ObjectStore | None) -> ObjectStore:
    """The :class:`~torchloom.io.ObjectStore` of a ``storage_options=`` keyword: the store given,
    or one made from the fsspec options (a ``ConfigError`` for anything else).

    Example:
        >>> object_store({"anon": True}).storage_options
        {'anon': True}
    """
    if isinstance(storage_options, ObjectStore):
        return storage_options
    return ObjectStore(storage_options)


def _flag(options: Mapping[str, Any], name: str, default: bool) -> bool:
    value = options.get(name, default)
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{name} must be True or False, got {name}={value!r}")
    return bool(value)


def _share_index(value: object) -> bool | None:
    if value is not None and not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"share_index must be True, False or None, got share_index={value!r}")
    return None if value is None else bool(value)


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
