"""Reused decode targets: decoders write into already-touched memory instead of fresh arrays.

Example:
    >>> scratch = ScratchArrays()
    >>> scratch.take(1024).nbytes >= 1024
    True
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

import numpy as np

Buffer = TypeVar("Buffer")


class ReusePool(Generic[Buffer]):
    """Buffers handed out again once nothing but the pool refers to them; at most ``limit`` kept.

    The shared mechanism of :class:`ScratchArrays` (decode targets) and
    :class:`torchloom.buffers.BufferPool` (batch buffers): a request takes the first pooled buffer
    that fits and is free, else a new one, which replaces a free pooled one when the pool is full
    (and is not pooled when every pooled buffer is held).

    Example:
        >>> pool = ReusePool[bytearray](limit=1)
        >>> first = pool.reuse_or_add(lambda buffer: len(buffer) >= 4, lambda: bytearray(8))
        >>> pool.reuse_or_add(lambda buffer: len(buffer) >= 4, lambda: bytearray(8)) is first
        False
        >>> del first
        >>> len(pool.reuse_or_add(lambda buffer: len(buffer) >= 4, lambda: bytearray(16)))
        8
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._clear()

    def _clear(self) -> None:
        self._buffers: list[Buffer] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._buffers)

    def reuse_or_add(self, fits: Callable[[Buffer], bool], allocate: Callable[[], Buffer]) -> Buffer:
        """The first free pooled buffer ``fits`` accepts, else ``allocate()`` (pooled if there is room)."""
        with self._lock:
            for position in range(len(self._buffers)):
                if fits(self._buffers[position]) and self._free(position):
                    return self._buffers[position]
            buffer = allocate()
            if len(self._buffers) >= self.limit:  # replace a free one, else do not pool this one
                free = [position for position in range(len(self._buffers)) if self._free(position)]
                if not free:
                    return buffer
                del self._buffers[free[0]]
            self._buffers.append(buffer)
            return buffer

    def _free(self, position: int) -> bool:
        """Nothing but the pool refers to buffer ``position`` (no array, view or tensor)."""
        # References to a free buffer: the pool's list and getrefcount's own argument.
        return sys.getrefcount(self._buffers[position]) <= 2


class ScratchArrays(ReusePool[np.ndarray]):
    """Byte buffers a decoder writes into, reused once nothing else holds them.

    A freshly allocated decode target is faulted in page by page as the decoder writes it (measured
    here: a 256 px JPEG decodes in ~425 µs into a reused buffer against ~480 µs into a new one). A
    buffer is handed out again only when no array (view or not) refers to it any more, so an image
    a transform passes through, or a caller keeps, is never overwritten. Pickling (a DataLoader
    worker, a deep copy) gives an empty pool, and so does a fork.

    Example:
        >>> scratch = ScratchArrays()
        >>> first = scratch.take(12)
        >>> image = first[:12].reshape(2, 2, 3)  # a view of it is still alive: not handed out again
        >>> scratch.take(12) is first
        False
        >>> del image, first
        >>> scratch.take(10).nbytes  # the free 12-byte buffer is big enough
        12
    """

    def __init__(self, limit: int = 8) -> None:
        super().__init__(limit)
        self._pid = os.getpid()

    def __reduce__(self) -> tuple[type[ScratchArrays], tuple[int]]:
        return (ScratchArrays, (self.limit,))

    def take(self, nbytes: int) -> np.ndarray:
        """A 1-D ``uint8`` array of at least ``nbytes`` that nothing else refers to."""
        if os.getpid() != self._pid:  # a forked child: its parent's lock may have been held mid-take
            self._clear()
            self._pid = os.getpid()
        return self.reuse_or_add(lambda buffer: buffer.nbytes >= nbytes, lambda: np.empty(nbytes, np.uint8))
