"""Pinning a batch: each tensor in it copied into page-locked memory, so that the copy to the GPU
can run asynchronously (``tensor.to("cuda", non_blocking=True)``).

Only public torch API: ``Tensor.pin_memory()`` on every tensor, the batch walked as torch's
DataLoader walks it with ``pin_memory=True``.

Example:
    >>> pin_batch({"label": [1, 2], "name": ("a", "b")})  # no tensors: nothing to pin
    {'label': [1, 2], 'name': ('a', 'b')}
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, MutableMapping, MutableSequence, Sequence
from typing import Any

import torch


def pin_batch(batch: Any) -> Any:
    """``batch`` with every tensor in it pinned.

    An object with a ``pin_memory`` method pins itself (a tensor, a
    :class:`~torchloom.faults.Skipped` marker that stays as it is); strings and bytes stay;
    mappings, named tuples, tuples and other sequences are rebuilt as their own type where it
    allows (a copy updated in place when mutable), else as a ``dict`` or ``list``; anything else
    is returned as it is.

    Example:
        >>> from collections import namedtuple
        >>> Pair = namedtuple("Pair", "left right")
        >>> pin_batch([Pair(1, "x"), b"raw"])
        [Pair(left=1, right='x'), b'raw']
    """
    if isinstance(batch, torch.Tensor) or hasattr(batch, "pin_memory"):
        return batch.pin_memory()
    if isinstance(batch, (str, bytes)):
        return batch
    if isinstance(batch, Mapping):
        return _pin_mapping(batch)
    if isinstance(batch, tuple):
        if hasattr(batch, "_fields"):  # a named tuple takes its fields as arguments
            return type(batch)(*(pin_batch(value) for value in batch))
        return type(batch)(pin_batch(value) for value in batch)
    if isinstance(batch, Sequence):
        return _pin_sequence(batch)
    return batch


def _pin_mapping(batch: Mapping[Any, Any]) -> Any:
    pinned = {key: pin_batch(value) for key, value in batch.items()}
    try:
        if isinstance(batch, MutableMapping):  # a copy keeps what the type holds besides its items
            clone = copy.copy(batch)
            clone.update(pinned)
            return clone
        return type(batch)(pinned)  # type: ignore[call-arg]
    except TypeError:  # a type that cannot be copied, updated or built from a dict
        return pinned


def _pin_sequence(batch: Sequence[Any]) -> Any:
    pinned = [pin_batch(value) for value in batch]
    try:
        if isinstance(batch, MutableSequence):
            clone = copy.copy(batch)
            for position, value in enumerate(pinned):
                clone[position] = value
            return clone
        return type(batch)(pinned)  # type: ignore[call-arg]
    except TypeError:  # a type that cannot be copied, assigned to or built from a list (range)
        return pinned
