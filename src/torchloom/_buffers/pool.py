"""Buffers handed out again once nothing else holds them: decode targets and batch buffers.

One mechanism, :class:`ReusePool`, serves :class:`ScratchArrays` (what decoders write into) and
:class:`BufferPool` (the thread Loader's batch buffers): both land new data in already-touched pages.

Example:
    >>> scratch = ScratchArrays()
    >>> scratch.take(1024).nbytes >= 1024
    True
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

import numpy as np
import torch

from torchloom._compat import references_beyond, storage_users

Buffer = TypeVar("Buffer")


class ReusePool(Generic[Buffer]):
    """Buffers handed out again once nothing but the pool refers to them; at most ``limit`` kept.

    The shared mechanism of :class:`ScratchArrays` (decode targets) and
    :class:`BufferPool` (batch buffers): a request takes the first pooled buffer
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
        return references_beyond(self._buffers, position) == 0


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


def held_only_by(buffers: Sequence[torch.Tensor | None], position: int) -> bool:
    """Nothing but ``buffers`` holds the tensor at ``position``: no other reference to the tensor
    object, no other tensor or view of its storage (``False`` for an empty position).

    Example:
        >>> import torch
        >>> buffers = [torch.zeros(4)]
        >>> view = buffers[0][1:]
        >>> held_only_by(buffers, 0)
        False
        >>> del view
        >>> held_only_by(buffers, 0)
        True
    """
    return (
        buffers[position] is not None
        and references_beyond(buffers, position) == 0
        and storage_users(buffers[position]) == 1  # type: ignore[arg-type]
    )


class BufferPool(ReusePool[torch.Tensor]):
    """Batch buffers reused once nothing else holds them, so batches land in already-touched pages.

    A fresh batch buffer is faulted in page by page as it is first written (~3 µs per
    4 KiB page, a large share of a batch's cost); a reused one is not. A buffer is handed out again
    only when no tensor besides the pool's own shares its storage: a batch the user keeps (or any
    view of it) is never overwritten. A buffer that has been moved to shared memory (a
    ``torch.multiprocessing`` queue sharing the batch with another process) is dropped from the
    pool, never written again: that process may still read it after this one let go.

    Example:
        >>> import torch
        >>> pool = BufferPool()
        >>> first = pool.take((2, 3), torch.uint8)
        >>> kept = first[0]  # a view the user keeps: the buffer is held
        >>> pool.take((2, 3), torch.uint8).data_ptr() == first.data_ptr()
        False
        >>> del first, kept
        >>> len(pool)
        2
    """

    def __init__(self, limit: int = 16) -> None:
        super().__init__(limit)
        #: Buffers allocated so far (reuse keeps this from growing with every batch).
        self.allocated = 0

    def take(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """An uninitialised contiguous tensor of ``shape`` that nothing else holds."""
        size = tuple(int(extent) for extent in shape)
        with self._lock:  # buffers shared with another process since they were handed out: drop
            self._buffers[:] = [buffer for buffer in self._buffers if not buffer.is_shared()]
        return self.reuse_or_add(
            lambda buffer: tuple(buffer.shape) == size and buffer.dtype == dtype,
            lambda: self._allocate(size, dtype),
        )

    def _allocate(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        self.allocated += 1
        return torch.empty(shape, dtype=dtype)

    def _free(self, position: int) -> bool:
        """Nothing but the pool holds buffer ``position``: not the tensor object, not its storage."""
        return held_only_by(self._buffers, position)
