"""``collate``: batch dict samples, dropping and recording skipped ones.

Equal-shape tensors and arrays are stacked (into shared memory inside a DataLoader worker, so
the batch crosses to the main process without another copy; a worker's reused batch buffer is
shipped so that the worker may write it again once the main process lets go of it, see
:mod:`torchloom._buffers.worker`); numbers become tensors; strings stay lists; dicts, tuples and
lists recurse. :class:`torchloom.faults.Skipped` markers are removed and listed under
``batch["skipped"]`` for :class:`torchloom.FaultReport`. Tensors it has to stack (a dataset of
your own) go into a new buffer per batch; ``torchloom.Collate()`` stacks them into buffers it
reuses.

Example:
    >>> import torch
    >>> from torchloom import collate
    >>> batch = collate([{"x": torch.zeros(2), "y": 1}, {"x": torch.ones(2), "y": 0}])
    >>> batch["x"].shape, batch["y"].tolist()
    (torch.Size([2, 2]), [1, 0])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import get_worker_info

from torchloom._buffers.slots import Allocate, consecutive_block, empty_batch, handed_out
from torchloom._buffers.worker import ship
from torchloom.errors import CollateError
from torchloom.faults import SKIPPED_KEY, Skipped


def split_skipped(batch: Sequence[Any]) -> tuple[list[Any], list[Skipped]]:
    """The samples of a batch, and the :class:`Skipped` markers among them."""
    samples = [sample for sample in batch if not isinstance(sample, Skipped)]
    skipped = [sample for sample in batch if isinstance(sample, Skipped)]
    return samples, skipped


def collate(batch: Sequence[Any]) -> Any:
    """Batch a list of samples: stack equal-shape tensors and arrays, turn numbers into tensors,
    keep strings as lists, recurse into dicts, tuples and lists, and list skipped samples under
    ``batch["skipped"]``.

    Example:
        >>> import torch
        >>> from torchloom import Skipped, collate
        >>> skipped = Skipped(1, "b.jpg", "DecodeError", "truncated")
        >>> batch = collate([{"x": torch.zeros(3), "path": "a.jpg"}, skipped])
        >>> batch["x"].shape, batch["path"], len(batch["skipped"])
        (torch.Size([1, 3]), ['a.jpg'], 1)
    """
    samples, skipped = split_skipped(batch)
    if not samples:
        return {SKIPPED_KEY: skipped}
    result = collate_values(samples, "batch")
    if skipped:
        if not isinstance(result, dict):
            raise CollateError(
                f"{len(skipped)} sample(s) were skipped but samples are {type(samples[0]).__name__}, "
                "not dicts, so the batch cannot record them; return dict samples"
            )
        if SKIPPED_KEY in result:
            raise CollateError(f"samples already hold a {SKIPPED_KEY!r} field; rename it")
        result[SKIPPED_KEY] = skipped
    return ship(result)


def collate_values(values: Sequence[Any], field: str, allocate: Allocate | None = None) -> Any:
    """Collate the values one field takes across a batch; ``field`` names it in errors.

    Ints mixed with floats become floats; any other mix of kinds (a bool among ints, a tensor
    beside ``None``) is a :class:`CollateError` naming the field. Strings (and ``None`` among
    them) stay a list. ``allocate``: where stacked tensors of this field (not of fields nested in
    it) are written (e.g. :class:`torchloom._buffers.worker.WorkerBatchPool.take`).
    """
    types = {type(value) for value in values}
    kinds = {_kind(values[0])} if len(types) == 1 else {_kind(value) for value in values}
    if kinds == {"int", "float"}:
        kinds = {"float"}
    if kinds <= {"tensor", "array"}:
        kinds = {"tensor"}
    if kinds <= {"text", "none"} or kinds == {"other"}:
        return list(values)
    if len(kinds) > 1:
        raise CollateError(
            f"{field}: samples hold values of different kinds {sorted(kinds)}; "
            "make every sample return the same type for this field"
        )
    (kind,) = kinds
    if kind in ("tensor", "bool", "int", "float"):
        try:
            return _batched(kind, values, types, field, allocate)
        except (TypeError, ValueError, OverflowError, RuntimeError) as exc:
            raise CollateError(
                f"{field}: cannot batch these {kind} values ({type(exc).__name__}: {exc}); return tensors "
                "or numbers torch can hold (int64, float), or give the field a Collate rule such as AsList()"
            ) from exc
    if kind == "mapping":
        first_keys = values[0].keys()
        keys = list(first_keys)
        for value in values:
            if value.keys() != first_keys:
                raise CollateError(
                    f"{field}: samples have different keys ({sorted(keys)} vs {sorted(value)})"
                )
        return {key: collate_values([value[key] for value in values], f"{field}.{key}") for key in keys}
    lengths = {len(value) for value in values}
    if len(lengths) > 1:
        raise CollateError(
            f"{field}: sequences of different lengths {sorted(lengths)}; "
            "use Collate({...: PadSequences()}) or return tensors"
        )
    columns = [collate_values([value[i] for value in values], f"{field}[{i}]") for i in range(len(values[0]))]
    return tuple(columns) if kind == "tuple" else columns


def _batched(
    kind: str, values: Sequence[Any], types: set[type], field: str, allocate: Allocate | None
) -> torch.Tensor:
    if kind == "tensor":
        tensors = values if types == {torch.Tensor} else [torch.as_tensor(value) for value in values]
        return stack_tensors(tensors, field, allocate)
    if kind == "bool":
        return torch.tensor([bool(value) for value in values], dtype=torch.bool)
    if kind == "int":
        return torch.tensor([int(value) for value in values], dtype=torch.int64)
    return torch.tensor([float(value) for value in values], dtype=torch.float64)


def _kind(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return "tensor"
    if isinstance(value, np.ndarray):
        return "array"
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, np.integer)):
        return "int"
    if isinstance(value, (float, np.floating)):
        return "float"
    if isinstance(value, (str, bytes)):
        return "text"
    if value is None:
        return "none"
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, tuple):
        return "tuple"
    if isinstance(value, list):
        return "list"
    return "other"


def stack_tensors(
    tensors: Sequence[torch.Tensor], field: str, allocate: Allocate | None = None
) -> torch.Tensor:
    """Stack equal-shape tensors; in a worker the result lives in shared memory.

    Tensors that already are consecutive slots of one batch buffer (see
    :class:`torchloom._buffers.slots.BatchSlots`) are returned as that buffer, uncopied. Others are
    copied, in a worker into ``allocate(shape, dtype)`` when given (a pool's reused buffer), else
    into a new one.
    """
    block = consecutive_block(tensors)  # checks shapes and dtypes itself
    if block is not None:
        return block
    first = tensors[0]
    shape, dtype = first.shape, first.dtype
    for tensor in tensors:
        if tensor.shape != shape or tensor.dtype != dtype:
            shapes = sorted({(tuple(t.shape), str(t.dtype)) for t in tensors})
            raise CollateError(
                f"{field}: cannot stack tensors of different shapes/dtypes {shapes}; pad them with "
                f"Collate({{'{field.split('.')[-1]}': PadImages()}}) for images or PadSequences() "
                "for sequences, or resize in the transform"
            )
    if first.device.type != "cpu" or get_worker_info() is None:
        # In-process, stack's own allocation is the fastest: the allocator hands back memory it has
        # already touched (stacking into a pooled buffer measured 0.78-0.85x of it).
        return torch.stack(list(tensors), 0)
    if allocate is None:
        return torch.stack(list(tensors), 0, out=empty_batch((len(tensors), *first.shape), first.dtype))
    out = allocate((len(tensors), *first.shape), first.dtype)
    torch.stack(list(tensors), 0, out=out)
    return handed_out(out)
