"""``collate``: batch dict samples, dropping and recording skipped ones.

Equal-shape tensors and arrays are stacked (into shared memory inside a DataLoader worker, so
the batch crosses to the main process without another copy); numbers become tensors; strings
stay lists; dicts, tuples and lists recurse. :class:`torchloom.faults.Skipped` markers are
removed and listed under ``batch["skipped"]`` for :class:`torchloom.FaultReport`.

Example:
    >>> import torch
    >>> batch = collate([{"x": torch.zeros(2), "y": 1}, {"x": torch.ones(2), "y": 0}])
    >>> batch["x"].shape, batch["y"].tolist()
    (torch.Size([2, 2]), [1, 0])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from torchloom.collate.buffers import consecutive_block, empty_batch
from torchloom.errors import TorchloomError
from torchloom.faults import SKIPPED_KEY, Skipped


class CollateError(TorchloomError, ValueError):
    """Samples cannot be batched; names the field, what was seen and the fix."""


def collate(batch: Sequence[Any]) -> Any:
    """Batch a list of samples (see the module docstring)."""
    samples = [sample for sample in batch if not isinstance(sample, Skipped)]
    skipped = [sample for sample in batch if isinstance(sample, Skipped)]
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
    return result


def collate_values(values: Sequence[Any], field: str) -> Any:
    """Collate the values one field takes across a batch; ``field`` names it in errors."""
    first = values[0]
    if isinstance(first, torch.Tensor):
        return stack_tensors(values, field)
    if isinstance(first, np.ndarray):
        return stack_tensors([torch.as_tensor(value) for value in values], field)
    if isinstance(first, (bool, np.bool_)):
        return torch.tensor(values, dtype=torch.bool)
    if isinstance(first, (int, np.integer)):
        return torch.tensor([int(value) for value in values], dtype=torch.int64)
    if isinstance(first, (float, np.floating)):
        return torch.tensor([float(value) for value in values], dtype=torch.float64)
    if isinstance(first, (str, bytes)) or first is None:
        return list(values)
    if isinstance(first, Mapping):
        keys = list(first)
        for value in values:
            if not isinstance(value, Mapping) or list(value) != keys:
                raise CollateError(
                    f"{field}: samples have different keys ({keys} vs "
                    f"{list(value) if isinstance(value, Mapping) else type(value).__name__})"
                )
        return {key: collate_values([value[key] for value in values], f"{field}.{key}") for key in keys}
    if isinstance(first, (tuple, list)):
        if any(len(value) != len(first) for value in values):
            raise CollateError(
                f"{field}: sequences of different lengths {sorted({len(v) for v in values})}; "
                "use Collate({...: PadSequences()}) or return tensors"
            )
        columns = [collate_values([value[i] for value in values], f"{field}[{i}]") for i in range(len(first))]
        return tuple(columns) if isinstance(first, tuple) else columns
    return list(values)


def stack_tensors(tensors: Sequence[torch.Tensor], field: str) -> torch.Tensor:
    """Stack equal-shape tensors; in a worker the result lives in shared memory.

    Tensors that already are consecutive slots of one batch buffer (see
    :class:`torchloom.collate.buffers.BatchSlots`) are returned as that buffer, uncopied.
    """
    first = tensors[0]
    for tensor in tensors:
        if tensor.shape != first.shape or tensor.dtype != first.dtype:
            shapes = sorted({(tuple(t.shape), str(t.dtype)) for t in tensors})
            raise CollateError(
                f"{field}: cannot stack tensors of different shapes/dtypes {shapes}; pad them with "
                f"Collate({{'{field.split('.')[-1]}': PadImages()}}) for images or PadSequences() "
                "for sequences, or resize in the transform"
            )
    block = consecutive_block(tensors)
    if block is not None:
        return block
    if first.device.type != "cpu":
        return torch.stack(list(tensors), 0)
    return torch.stack(list(tensors), 0, out=empty_batch((len(tensors), *first.shape), first.dtype))
