"""Batch buffers: allocated once per batch, in shared memory inside a DataLoader worker.

A dataset's batched fetch writes each sample's image straight into a slot of one buffer; when
collate later finds its tensors are consecutive slots of one buffer it returns the buffer
instead of copying them again (SPEC §6: the stack copy and fresh per-sample allocations are a
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

from collections.abc import Sequence

import torch
from torch.utils.data import get_worker_info

# Attribute set on buffers made by BatchSlots: only their slots may be batched without a copy.
BATCH_BUFFER_MARK = "_torchloom_batch_buffer"


def empty_batch(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised contiguous tensor, in shared memory when called in a DataLoader worker.

    A batch built in a worker crosses to the main process through shared memory; creating it
    there in the first place saves a copy (torch's default_collate does the same).
    """
    if get_worker_info() is None:
        return torch.empty(tuple(shape), dtype=dtype)
    numel = int(torch.Size(tuple(shape)).numel())
    storage = torch.UntypedStorage._new_shared(numel * torch.empty(0, dtype=dtype).element_size())
    return torch.empty(0, dtype=dtype).set_(storage, 0, tuple(shape), contiguous_strides(shape))


def consecutive_block(tensors: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """The tensors as one batch without copying, if they are consecutive slots of one
    :class:`BatchSlots` buffer; ``None`` otherwise (any other tensors are copied by the caller,
    so a batch never shares memory with a dataset's own tensors)."""
    first = tensors[0]
    base = first._base
    if base is None or not getattr(base, BATCH_BUFFER_MARK, False):
        return None
    if not first.is_contiguous() or first.numel() == 0:
        return None
    start, numel = first.storage_offset(), first.numel()
    for position, tensor in enumerate(tensors):
        if (
            tensor._base is not base
            or tensor.storage_offset() != start + position * numel
            or tensor.shape != first.shape
            or tensor.dtype != first.dtype
            or not tensor.is_contiguous()
        ):
            return None
    shape = (len(tensors), *first.shape)
    return torch.empty(0, dtype=first.dtype).set_(
        first.untyped_storage(), start, shape, contiguous_strides(shape)
    )


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides, in elements, of a tensor of ``shape``."""
    strides = [1] * len(shape)
    for axis in range(len(shape) - 2, -1, -1):
        strides[axis] = strides[axis + 1] * int(shape[axis + 1])
    return tuple(strides)


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

    def __init__(self, size: int) -> None:
        self.size = size
        self.buffer: torch.Tensor | None = None

    def slot(self, position: int, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor | None:
        if self.buffer is None:
            self.buffer = empty_batch((self.size, *shape), dtype)
            setattr(self.buffer, BATCH_BUFFER_MARK, True)
        if tuple(self.buffer.shape[1:]) != tuple(shape) or self.buffer.dtype != dtype:
            return None
        return self.buffer[position]
