"""Batch buffers a DataLoader worker reuses once the main process has let go of them.

A batch built in a worker crosses to the main process in shared memory. A fresh shared buffer is
faulted in page by page as the worker writes it (measured here ~120–160 µs per 224 px
uint8 image, against ~16–20 µs into an already-touched buffer): that is the hand-off ceiling of
worker processes. A :class:`WorkerBatchPool` lets a worker write each batch into a shared buffer it
used before, and only once nothing holds it any more:

1. the worker leases a pooled buffer to a batch under a new generation number;
2. :func:`torchloom.collate` returns a :class:`ShippedBatch` when its tensor is such a buffer, and
   pickling it (the DataLoader's result queue) marks the lease as shipped;
3. unpickled in the main process it is a plain ``dict``; a finalizer on the received storage writes
   the lease's generation onto the pool's release board (a small shared array) when the last
   tensor or view of that storage dies, so a batch the user keeps is never overwritten;
4. the worker reuses a buffer only when its generation is on the board and nothing in the worker
   holds it. A buffer that may have left the worker in any other way is dropped from the pool,
   never reused: one whose batch was not shipped (a collate function that is not torchloom's,
   returning views of it, or a copy), and one that something else in the worker still held when
   it shipped (a collate function remembering the previous batch, to send it again) or that
   shipped twice.

The main process's release is the end of the batch's storage there: a batch it passes on to yet
another process through shared memory (a ``torch.multiprocessing`` queue) must stay alive in the
main process until that process is done with it, or be passed on as a copy (``.clone()``), as
PyTorch asks of CUDA tensors shared between processes.

Example:
    >>> import torch
    >>> pool = WorkerBatchPool()
    >>> pool.take((2, 3), torch.uint8).shape  # outside a DataLoader worker: a plain tensor
    torch.Size([2, 3])
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import get_worker_info

from torchloom._buffers.pool import held_only_by
from torchloom._buffers.slots import LEASE_ATTRIBUTE, empty_batch, shared_empty
from torchloom._compat import references_beyond, storage_objects_live_with_their_storage, storage_users


@dataclass
class Lease:
    """One use of a pooled worker buffer: where its release is recorded, and under which number.

    Example:
        >>> import torch
        >>> lease = getattr(WorkerBatchPool(shared=True).take((2,), torch.uint8), LEASE_ATTRIBUTE)
        >>> lease.position, lease.generation, lease.shipped, lease.kept
        (0, 1, False, False)
    """

    board: torch.Tensor  # the pool's release board: shared int64, one entry per pool position
    position: int
    generation: int
    owner: int  # the worker's pid
    shipped: bool = False
    #: Something in the worker still held the batch's tensor when it shipped, or it shipped twice:
    #: it may leave again without a release, so the buffer is never reused.
    kept: bool = False


class WorkerBatchPool:
    """Shared batch buffers of one DataLoader worker, reused after the main process releases them.

    Outside a worker (``shared=None``, the default) ``take`` returns a plain tensor; ``shared=True``
    leases shared buffers in any process (tests). At most ``limit`` buffers are pooled; when all are
    held, a fresh unpooled buffer is returned (the behaviour without a pool). Pickling, and a fork,
    give an empty pool.

    Example:
        >>> import torch
        >>> pool = WorkerBatchPool(shared=True)
        >>> buffer = pool.take((2, 3), torch.uint8)
        >>> getattr(buffer, LEASE_ATTRIBUTE).generation, buffer.is_shared()
        (1, True)
        >>> del buffer  # dropped without being shipped: never handed out again
        >>> getattr(pool.take((2, 3), torch.uint8), LEASE_ATTRIBUTE).position
        0
        >>> pool.allocated
        2
    """

    def __init__(self, limit: int = 8, *, shared: bool | None = None) -> None:
        self.limit = limit
        self.shared = shared
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._buffers: list[torch.Tensor | None] = [None] * self.limit
        self._board: torch.Tensor | None = None
        self._released: np.ndarray | None = None
        self._generation = 0
        #: Shared buffers allocated so far; reuse keeps it from growing with every batch.
        self.allocated = 0
        #: Buffers handed out again after the main process released them.
        self.reused = 0

    def __reduce__(self) -> tuple[Any, ...]:
        return (_new_pool, (self.limit, self.shared))

    def take(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """An uninitialised contiguous tensor of ``shape`` that nothing else holds."""
        if not (self.shared if self.shared is not None else get_worker_info() is not None):
            return empty_batch(shape, dtype)
        if os.getpid() != self._pid:  # a forked child: the parent's lock may have been held
            self._reset()
        size = tuple(int(extent) for extent in shape)
        with self._lock:
            position, spare = self._reusable(size, dtype)
            if position is None:
                position = self._empty_position()
                if position is None:
                    position = spare  # a released buffer of another shape makes room
                if position is None:  # every pooled buffer is held
                    self.allocated += 1
                    return shared_empty(size, dtype)
                self._buffers[position] = shared_empty(size, dtype)
                self.allocated += 1
            else:
                self.reused += 1
            buffer = self._buffers[position]
            assert buffer is not None
            self._generation += 1
            setattr(
                buffer, LEASE_ATTRIBUTE, Lease(self._board_tensor(), position, self._generation, self._pid)
            )
            return buffer

    def _reusable(self, size: tuple[int, ...], dtype: torch.dtype) -> tuple[int | None, int | None]:
        """The position of a released pooled buffer of this size, and of one of another size (to
        replace when the pool is full). Buffers that may have left the worker in another way than
        one shipment, and so may be held where no release will come from, are dropped."""
        released = self._released
        spare = None
        for position in range(self.limit):
            if not held_only_by(self._buffers, position):  # a tensor or view of it in this worker
                continue
            buffer = self._buffers[position]
            assert buffer is not None
            lease: Lease = getattr(buffer, LEASE_ATTRIBUTE)
            if not lease.shipped or lease.kept:
                self._buffers[position] = None  # never reuse it
            elif released is not None and released[position] == lease.generation:
                if tuple(buffer.shape) == size and buffer.dtype == dtype:
                    return position, None
                spare = position if spare is None else spare
        return None, spare

    def _empty_position(self) -> int | None:
        return next((position for position, buffer in enumerate(self._buffers) if buffer is None), None)

    def _board_tensor(self) -> torch.Tensor:
        if self._board is None:
            self._board = torch.zeros(self.limit, dtype=torch.int64).share_memory_()
            self._released = self._board.numpy()
        return self._board


def _new_pool(limit: int, shared: bool | None) -> WorkerBatchPool:
    return WorkerBatchPool(limit, shared=shared)


class ShippedBatch(dict[str, Any]):
    """A collated batch holding leased worker buffers; it unpickles as a plain ``dict``, with the
    release of each buffer tied to the lifetime of its storage in the receiving process.

    Example:
        >>> import pickle, torch
        >>> batch = ship({"image": WorkerBatchPool(shared=True).take((2,), torch.uint8)})
        >>> type(batch).__name__, type(pickle.loads(pickle.dumps(batch))).__name__
        ('ShippedBatch', 'dict')
        >>> batch.leases[0][0].shipped
        True
    """

    leases: list[tuple[Lease, torch.Tensor]]

    def __reduce__(self) -> tuple[Any, ...]:
        for entry in self.leases:  # the tensor is not bound to a name here: that would hold it
            lease = entry[0]
            # When it ships, the batch's tensor must be held by this batch alone: a reference kept
            # elsewhere in the worker (a collate function remembering the previous batch) could
            # send the buffer again later, as a plain tensor whose release nobody reports.
            lease.kept = lease.shipped or not self._holds_alone(entry)
            lease.shipped = True
        return (_received, (dict(self), self.leases))

    def _holds_alone(self, entry: tuple[Lease, torch.Tensor]) -> bool:
        """Only this batch holds the tensor of lease ``entry`` (one field and the entry itself) and
        its buffer's storage (besides the pool's own tensor)."""
        fields = sum(value is entry[1] for value in self.values())
        return fields == 1 and references_beyond(entry, 1) == 1 and storage_users(entry[1]) == 2


def ship(batch: Any) -> Any:
    """``batch`` as a :class:`ShippedBatch` when one of its fields is a leased worker buffer.

    Example:
        >>> import torch
        >>> ship({"x": torch.zeros(2)})
        {'x': tensor([0., 0.])}
    """
    if type(batch) is not dict:
        return batch
    leases = [
        (lease, value)
        for value in batch.values()
        if isinstance(value, torch.Tensor) and (lease := getattr(value, LEASE_ATTRIBUTE, None)) is not None
    ]
    if not leases:
        return batch
    shipped = ShippedBatch(batch)
    shipped.leases = leases
    return shipped


def _received(data: dict[str, Any], leases: list[tuple[Lease, torch.Tensor]]) -> dict[str, Any]:
    """Unpickling a :class:`ShippedBatch`: register each buffer's release, return the plain dict."""
    pid = os.getpid()
    if not storage_objects_live_with_their_storage():
        return data  # no release is ever written: the worker allocates fresh buffers
    for lease, tensor in leases:
        # Only a batch that crossed to another process through shared memory is released: a copy
        # (deepcopy, a plain pickle) in the worker itself, or of the values, releases nothing.
        if lease.owner != pid and tensor.is_shared() and lease.board.is_shared():
            finalizer = weakref.finalize(
                tensor.untyped_storage(), _release, lease.board.numpy(), lease.position, lease.generation, pid
            )
            finalizer.atexit = False
    return data


def _release(board: np.ndarray, position: int, generation: int, pid: int) -> None:
    if os.getpid() == pid:  # not a forked child dropping its copy of the parent's objects
        board[position] = generation
