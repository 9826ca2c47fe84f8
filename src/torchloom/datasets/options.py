"""The options datasets share, declared and checked once.

Every map-style dataset takes the :class:`SampleOptions` (what happens to each sample); those that
index files at construction also take the :class:`IndexingOptions` (how the files are checked).
Constructors take them as keywords, ``FolderDataset(root, transform=t, on_error="skip")``, typed
``**options: Unpack[IndexingOptions]`` so that a type checker knows every name and type, and keep
as their own arguments only what is theirs (a clip's frames, a manifest's fields). The checks run
here, before any file is read: a bad value is a :class:`~torchloom.errors.ConfigError` with the same
text for every dataset, a keyword no option has is a :class:`~torchloom.errors.UsageError` (a
``TypeError``) naming it.

Example:
    >>> sample, indexing = indexing_settings({"on_error": "skip", "num_threads": 4}, what="FolderDataset")
    >>> sample.policy.on_error, sample.seed, indexing.validate, indexing.num_threads
    ('skip', 0, 'header', 4)
    >>> sample_settings({"on_eror": "skip"}, what="Cubes")
    Traceback (most recent call last):
    ...
    torchloom.errors.UsageError: Cubes() got an unexpected keyword argument 'on_eror'; did you mean on_error=?
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np

from torchloom.datasets.index import VALIDATE_CHOICES, Validate
from torchloom.errors import ConfigError, UsageError, check_choice
from torchloom.faults import FaultPolicy
from torchloom.transforms.base import Transform, check_transform


class SampleOptions(TypedDict, total=False):
    """What every map-style dataset does with each sample: keywords of every dataset constructor.

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
    """

    transform: Transform | None
    on_error: str | FaultPolicy
    seed: int
    debug: bool


class IndexingOptions(SampleOptions, total=False):
    """How a dataset that indexes files checks them at construction, beside the
    :class:`SampleOptions`: keywords of every dataset built from files.

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
    """

    validate: Validate
    strict: bool
    allow_outside_root: bool
    num_threads: int | None
    progress: bool


@dataclass(frozen=True)
class SampleSettings:
    """The :class:`SampleOptions` of one dataset, checked, with their defaults filled in."""

    transform: Transform | None
    policy: FaultPolicy
    seed: int
    debug: bool


@dataclass(frozen=True)
class IndexingSettings:
    """The :class:`IndexingOptions` of one dataset, checked, with their defaults filled in."""

    validate: Validate = "header"
    strict: bool = False
    allow_outside_root: bool = False
    num_threads: int | None = None
    progress: bool = True

    def read_root(self, root: str | os.PathLike[str]) -> str | None:
        """The real folder every read of the dataset must stay in: ``root`` with its symlinks
        resolved, or ``None`` with ``allow_outside_root``."""
        return None if self.allow_outside_root else os.path.realpath(root)


_SAMPLE_NAMES = tuple(SampleOptions.__annotations__)
_INDEXING_NAMES = tuple(IndexingOptions.__annotations__)


def sample_settings(options: Mapping[str, Any], *, what: str) -> SampleSettings:
    """The checked :class:`SampleOptions` of the dataset ``what`` (its class name, for messages)."""
    _refuse_unknown(options, _SAMPLE_NAMES, what)
    return _sample(options)


def indexing_settings(
    options: Mapping[str, Any], *, what: str, validate: Sequence[str] = VALIDATE_CHOICES
) -> tuple[SampleSettings, IndexingSettings]:
    """The checked :class:`SampleOptions` and :class:`IndexingOptions` of the dataset ``what``;
    ``validate``: the validation modes it offers."""
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
    )
    return sample, indexing


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
    )


def _refuse_unknown(options: Mapping[str, Any], names: Sequence[str], what: str) -> None:
    for given in options:
        if given not in names:
            close = difflib.get_close_matches(given, names, n=1)
            hint = f"; did you mean {close[0]}=?" if close else f"; its options are {sorted(names)}"
            raise UsageError(f"{what}() got an unexpected keyword argument {given!r}{hint}")


def _flag(options: Mapping[str, Any], name: str, default: bool) -> bool:
    value = options.get(name, default)
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{name} must be True or False, got {name}={value!r}")
    return bool(value)


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
