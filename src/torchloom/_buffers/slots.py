"""Batch buffers: allocated once per batch, in shared memory inside a DataLoader worker.

A dataset's batched fetch writes each sample's image straight into a slot of one buffer; when
collate later finds its tensors are consecutive slots of one buffer it returns the buffer
instead of copying them again (the stack copy and fresh per-sample allocations are a
measurable share of a worker's time).

Example:
    >>> import torch
    >>> slots = BatchSlots(4)
    >>> views = [slots.slot(i, (3, 2, 2), torch.uint8) for i in range(4)]
    >>> consecutive_block(views).data_ptr() == slots.buffer.data_ptr()
    True
    >>> data = torch.zeros(4, 3)  # a dataset's own tensor is never batched in place
    >>> consecutive_block([data[0], data[1]]) is None
    True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch.utils.data import get_worker_info

from torchloom._compat import new_shared_storage, view_base

# Attribute set on buffers made by BatchSlots: only their slots may be batched without a copy.
BATCH_BUFFER_MARK = "_torchloom_batch_buffer"
#: Attribute of a leased worker buffer, and of the batch made from it, holding its lease
#: (see :mod:`torchloom._buffers.worker`).
LEASE_ATTRIBUTE = "_torchloom_lease"


def empty_batch(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised contiguous tensor, in shared memory when called in a DataLoader worker.

    A batch built in a worker crosses to the main process through shared memory; creating it
    there in the first place saves a copy (torch's default_collate does the same).
    """
    if get_worker_info() is None:
        return torch.empty(tuple(shape), dtype=dtype)
    return shared_empty(shape, dtype)


def shared_empty(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised contiguous tensor allocated in shared memory (not allocated, then moved
    there as ``share_memory_()`` does, which costs a second allocation and a copy).

    Example:
        >>> import torch
        >>> tensor = shared_empty((2, 3), torch.uint8)
        >>> tensor.shape, tensor.is_shared(), tensor.is_contiguous()
        (torch.Size([2, 3]), True, True)
    """
    numel = int(torch.Size(tuple(shape)).numel())
    storage = new_shared_storage(numel * torch.empty(0, dtype=dtype).element_size())
    return torch.empty(0, dtype=dtype).set_(storage, 0, tuple(shape), contiguous_strides(shape))


def consecutive_block(tensors: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """The tensors as one batch without copying, if they are consecutive slots of one
    :class:`BatchSlots` buffer; ``None`` otherwise (any other tensors are copied by the caller,
    so a batch never shares memory with a dataset's own tensors)."""
    first = tensors[0]
    base = view_base(first)
    if base is None or not getattr(base, BATCH_BUFFER_MARK, False):
        return None
    if not first.is_contiguous() or first.numel() == 0:
        return None
    start, numel, dtype = first.storage_offset(), first.numel(), first.dtype
    sample_shape, strides = first.shape, first.stride()
    offset = start
    for tensor in tensors:
        # A view of the buffer at the next slot's offset with the first's shape, strides and dtype:
        # as the first is contiguous, so is it.
        if (
            view_base(tensor) is not base
            or tensor.storage_offset() != offset
            or tensor.shape != sample_shape
            or tensor.stride() != strides
            or tensor.dtype != dtype
        ):
            return None
        offset += numel
    shape = (len(tensors), *first.shape)
    return _over_storage(first, start, shape, contiguous_strides(shape), getattr(base, LEASE_ATTRIBUTE, None))


def handed_out(buffer: torch.Tensor) -> torch.Tensor:
    """``buffer`` as a new tensor object over the same memory, carrying its lease: a batch made of
    a pooled buffer is not the pool's own tensor, so the pool's checks see the batch as a second
    holder of the storage (as they see one made by :func:`consecutive_block`).

    Example:
        >>> import torch
        >>> from torchloom._compat import storage_users
        >>> buffer = torch.zeros(2, 3)
        >>> batch = handed_out(buffer)
        >>> batch is buffer, batch.data_ptr() == buffer.data_ptr(), storage_users(buffer)
        (False, True, 2)
    """
    return _over_storage(
        buffer, buffer.storage_offset(), buffer.shape, buffer.stride(), getattr(buffer, LEASE_ATTRIBUTE, None)
    )


def _over_storage(
    source: torch.Tensor,
    offset: int | torch.SymInt,
    shape: Sequence[int],
    strides: Sequence[int],
    lease: object,
) -> torch.Tensor:
    tensor = torch.empty(0, dtype=source.dtype).set_(
        source.untyped_storage(), offset, tuple(shape), tuple(strides)
    )
    if lease is not None:
        setattr(tensor, LEASE_ATTRIBUTE, lease)
    return tensor


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides, in elements, of a tensor of ``shape``."""
    strides = [1] * len(shape)
    for axis in range(len(shape) - 2, -1, -1):
        strides[axis] = strides[axis + 1] * int(shape[axis + 1])
    return tuple(strides)


Allocate = Callable[[Sequence[int], torch.dtype], torch.Tensor]


class BatchSlots:
    """Hands out slots of one batch buffer, sized by the first sample that asks.

    Example:
        >>> import torch
        >>> slots = BatchSlots(2)
        >>> slots.slot(1, (3, 4, 4), torch.uint8).shape
        torch.Size([3, 4, 4])
        >>> slots.slot(0, (3, 5, 5), torch.uint8) is None  # another shape: no slot
        True
    """

    def __init__(self, size: int, allocate: Allocate | None = None) -> None:
        self.size = size
        self.allocate = allocate or empty_batch
        self.buffer: torch.Tensor | None = None
        self._sample: tuple[tuple[int, ...], torch.dtype] | None = None  # a slot's shape and dtype
        self._views: tuple[torch.Tensor, ...] = ()  # every slot as a tensor, made in one call
        self._array: np.ndarray | None = None  # the buffer as numpy, made once (not per slot)
        #: Each position's random generator, when the dataset seeded the batch's together (each is
        #: taken, and replaced by None, by the first call for it).
        self.generators: list[np.random.Generator | None] | None = None
        # Each sample's file bytes fetched ahead for the whole batch at once (an object store's
        # latency paid once per batch, not per sample), or an error to raise for that sample.
        self.prefetched: dict[str, bytes | Exception] = {}

    def slot(self, position: int, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor | None:
        if self.buffer is None:
            self.buffer = self.allocate((self.size, *shape), dtype)
            setattr(self.buffer, BATCH_BUFFER_MARK, True)
            self._sample = (tuple(self.buffer.shape[1:]), self.buffer.dtype)
            self._views = self.buffer.unbind(0)
        if (tuple(shape), dtype) != self._sample:
            return None
        return self._views[position]

    def slot_array(self, position: int) -> np.ndarray | None:
        """Slot ``position`` (after :meth:`slot` handed it out) as a numpy view, for writers such as
        OpenCV; ``None`` when the buffer has no numpy view (not on the CPU). Indexing one numpy view
        of the buffer costs a fraction of indexing the tensor and converting each slot."""
        if self._array is None and self.buffer is not None and self.buffer.device.type == "cpu":
            self._array = self.buffer.numpy()
        return None if self._array is None else self._array[position]
