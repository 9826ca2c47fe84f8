"""What torchloom relies on beyond the public APIs of CPython, torch, numpy and Accelerate.

Each function here is the one place where torchloom uses an implementation detail that a release
may change without notice: CPython's reference counts and frames, a private torch function or
attribute, an ABC numpy does not export, the way Accelerate iterates a sampler it wraps.
``tests/test_compat.py`` checks every assumption and fails naming it, the version it was tested
with and what breaks. Where a detail is missing from a release, the function falls back to what
is slower but never wrong (no buffer reuse, a copy, the per-sample seed path) where it can.
Two public hooks whose effect depends on torch's code stay with the class they serve, and are
checked there too: :class:`torchloom.faults.Skipped` registered as a ``Sequence`` (so
``default_collate`` raises the marker's own error) and its ``pin_memory`` (so DataLoader's
pinning leaves it as it is).

Tested with CPython 3.11.7, torch 2.13.0, numpy 2.4.6 and Accelerate 1.15.0 (:data:`TESTED_WITH`).

Example:
    >>> import torch
    >>> buffers = [torch.zeros(4)]
    >>> references_beyond(buffers, 0), storage_users(buffers[0])
    (0, 1)
    >>> view = buffers[0][1:]
    >>> storage_users(buffers[0])
    2
"""

from __future__ import annotations

import functools
import os
import sys
import weakref
from collections.abc import Sequence
from sys import getrefcount  # one name here: a test stands in an interpreter that counts otherwise
from types import MappingProxyType
from typing import Any

import numpy as np
import torch

#: The versions every assumption here was checked against.
TESTED_WITH = MappingProxyType(
    {"python": "3.11.7", "torch": "2.13.0", "numpy": "2.4.6", "accelerate": "1.15.0"}
)


# --- CPython reference counts ------------------------------------------------------------------


def references_beyond(holder: Sequence[object], position: int) -> int:
    """How many references to ``holder[position]`` exist besides ``holder``'s own.

    Relies on ``sys.getrefcount``, whose value includes references the interpreter itself holds
    during the call (how many differs by CPython version: 3.14 borrows some). So the count is
    taken through one code path, and what that path itself adds is measured on an object only a
    list refers to; a version that counts differently moves both alike.

    Example:
        >>> items = [bytearray(4)]
        >>> references_beyond(items, 0)
        0
        >>> kept = items[0]
        >>> references_beyond(items, 0)
        1
    """
    return _reference_count(holder, position) - _reference_baseline()


def _reference_count(holder: Sequence[object], position: int) -> int:
    return getrefcount(holder[position])


@functools.cache
def _reference_baseline() -> int:
    return _reference_count([object()], 0)


# --- torch storages ----------------------------------------------------------------------------


def storage_users(tensor: torch.Tensor) -> int | None:
    """How many tensors (views included) share ``tensor``'s storage; ``None`` if torch cannot say.

    Relies on ``torch._C._storage_Use_Count`` (private: the use count of the C++ storage behind a
    storage object's ``_cdata``), which also counts a use for the storage's Python object while
    Python refers to it. What a lone tensor's storage counts (uses and references to its Python
    object) is measured once, through the same code path; references to the storage object beyond
    that are a caller keeping ``tensor.untyped_storage()``, which holds the storage as a tensor
    would. Without the function, ``None``: callers then reuse no buffer.

    Example:
        >>> import torch
        >>> tensor = torch.zeros(3)
        >>> storage_users(tensor)
        1
        >>> kept = tensor.untyped_storage()
        >>> storage_users(tensor)
        2
    """
    count = getattr(torch._C, "_storage_Use_Count", None)
    if count is None:
        return None
    uses, references = _storage_counts(count, tensor)
    lone_uses, lone_references = _lone_storage_counts(count)
    return uses - (lone_uses - 1) + max(0, references - lone_references)


def _storage_counts(count: Any, tensor: torch.Tensor) -> tuple[int, int]:
    """The use count of ``tensor``'s storage and the references to its Python object (as seen here)."""
    storage = tensor.untyped_storage()
    return int(count(storage._cdata)), getrefcount(storage)


@functools.cache
def _lone_storage_counts(count: Any) -> tuple[int, int]:
    """:func:`_storage_counts` of a tensor nothing else refers to, its storage used by it alone."""
    return _storage_counts(count, torch.empty(1))


def new_shared_storage(nbytes: int) -> torch.UntypedStorage:
    """An uninitialised storage of ``nbytes`` allocated in shared memory, in one step.

    Relies on ``torch.UntypedStorage._new_shared`` (private; torch's own ``default_collate`` uses
    its typed twin in DataLoader workers). Without it, the public ``share_memory_()``, which
    allocates ordinary memory first and then copies it into shared memory (~0.5 ms more per batch
    of 64 images, measured).

    Example:
        >>> storage = new_shared_storage(12)
        >>> storage.nbytes(), storage.is_shared()
        (12, True)
    """
    allocate = getattr(torch.UntypedStorage, "_new_shared", None)
    if allocate is None:
        return torch.UntypedStorage(nbytes).share_memory_()
    storage: torch.UntypedStorage = allocate(nbytes)
    return storage


def view_base(tensor: torch.Tensor) -> torch.Tensor | None:
    """The tensor that ``tensor`` is a view of (for a view of a view, the first's), else ``None``.

    Relies on ``Tensor._base`` (private: the base autograd's view tracking keeps for every view).

    Example:
        >>> import torch
        >>> buffer = torch.zeros(2, 3)
        >>> view_base(buffer[1][1:]) is buffer, view_base(buffer)
        (True, None)
    """
    return tensor._base


@functools.cache
def storage_objects_live_with_their_storage() -> bool:
    """Whether a finalizer on a storage's Python object fires when the last tensor or view of the
    storage dies, and not before.

    Relies on torch keeping a storage's Python object alive as long as the storage itself, so that
    ``tensor.untyped_storage()`` is the same object for every view. Checked once at run time: where
    it does not hold, callers write no release (no buffer is reused).

    Example:
        >>> storage_objects_live_with_their_storage()
        True
    """
    fired: list[bool] = []
    tensor = torch.empty(2)
    view = tensor[1:]
    weakref.finalize(tensor.untyped_storage(), fired.append, True)
    del tensor
    early = bool(fired)
    del view
    return not early and bool(fired)


# --- numpy seed sequences ----------------------------------------------------------------------


def register_seed_sequence(cls: type) -> bool:
    """Make numpy's bit generators accept instances of ``cls`` as seed sequences; ``False`` if
    this numpy offers no way to (then build generators from numpy's own SeedSequence).

    Relies on ``numpy.random.bit_generator.ISpawnableSeedSequence``: a BitGenerator takes any
    instance of it as its seed sequence, calling only ``generate_state`` (and ``spawn`` when
    asked); numpy documents the ABC in its source but leaves it out of ``__all__``. Seeding a
    PCG64 from its four state words through the public ``state`` setter costs as much as a
    SeedSequence (measured ~7.9 µs against ~1.0 µs here): the bit generator must be built first.

    Example:
        >>> import numpy as np
        >>> class Seeds:
        ...     def generate_state(self, n_words, dtype=np.uint32):
        ...         return np.random.SeedSequence(1).generate_state(n_words, dtype)
        ...     def spawn(self, n_children):
        ...         return np.random.SeedSequence(1).spawn(n_children)
        >>> register_seed_sequence(Seeds)
        True
        >>> int(np.random.PCG64(Seeds()).random_raw()) == int(np.random.PCG64(1).random_raw())
        True
    """
    interface = getattr(getattr(np.random, "bit_generator", None), "ISpawnableSeedSequence", None)
    if interface is None:
        return False
    interface.register(cls)
    return True


# --- Accelerate --------------------------------------------------------------------------------


def accelerate_shard_processes(*, frames: int) -> int | None:
    """``num_processes`` of an Accelerate ``BatchSamplerShard`` whose iteration runs within
    ``frames`` frames above the caller, when it is above 1; else ``None``.

    Relies on CPython frames (``sys._getframe``, ``f_back``, ``f_locals``) and on Accelerate
    iterating the batch sampler it wraps from a method of its ``BatchSamplerShard`` (so ``self``
    is a local of that frame, a few frames above the sampler's own). Accelerate offers no public
    way for a sampler to learn it is wrapped. Nothing is looked at unless Accelerate is imported;
    only Accelerate's frames have their locals read (reading ``f_locals`` makes a snapshot).

    Example:
        >>> accelerate_shard_processes(frames=8) is None  # not iterated by Accelerate
        True
    """
    shard = getattr(sys.modules.get("accelerate.data_loader"), "BatchSamplerShard", None)
    if shard is None:
        return None
    frame = sys._getframe(1)
    for _ in range(frames):
        if frame.f_back is None:
            return None
        frame = frame.f_back
        if not str(frame.f_globals.get("__name__", "")).startswith("accelerate."):
            continue
        owner = frame.f_locals.get("self")
        if isinstance(owner, shard):
            processes = int(getattr(owner, "num_processes", 1))
            return processes if processes > 1 else None
    return None


# --- CPython frames --------------------------------------------------------------------------

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes ``warnings.warn``, called by the function calling this one,
    name the first line outside torchloom: the user's call, however deep inside torchloom it
    warns (a Loader passing ``set_epoch`` on to its sampler, a load inside ``load_state_dict``).

    Relies on CPython frames (``sys._getframe``, ``f_back``, ``f_code.co_filename``); where they
    are missing, names the caller of the warning function.

    Example:
        >>> user_stacklevel()  # called from here, outside torchloom: this line
        1
    """
    getframe = getattr(sys, "_getframe", None)
    if getframe is None:
        return 2
    frame, level = getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level
