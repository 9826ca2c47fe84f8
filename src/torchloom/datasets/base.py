"""Shared machinery of the map-style datasets: keys, fault policy, image loading, debug checks."""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from torchloom.errors import SampleError
from torchloom.faults import FaultPolicy, Skipped
from torchloom.index import SampleIndex
from torchloom.io.image import DEFAULT_MAX_PIXELS, decode_image, probe_image, read_bytes
from torchloom.seeding import SampleKey, rng_for_key
from torchloom.transforms.base import Transform, plan_transform
from torchloom.transforms.tensor import to_chw_tensor

logger = logging.getLogger("torchloom")

#: With ``debug=True``, the first this many samples a process loads are logged in detail.
DEBUG_LOGGED_SAMPLES = 3


class IndexedDataset(Dataset["dict[str, Any] | Skipped"]):
    """Base of datasets backed by a :class:`SampleIndex`; subclasses implement ``_load``.

    Accepts ``int`` and :class:`torchloom.SampleKey` keys; applies the fault policy; with
    ``debug=True`` logs the first samples and checks that every sample has the same keys,
    dtypes and dimensions.
    """

    def __init__(
        self,
        index: SampleIndex,
        *,
        transform: Transform | None,
        on_error: str | FaultPolicy,
        seed: int,
        debug: bool,
        max_pixels: int = DEFAULT_MAX_PIXELS,
    ) -> None:
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed=}")
        self.index = index
        self.transform = transform
        self.policy = FaultPolicy.parse(on_error)
        self.seed = seed
        self.debug = debug
        self.max_pixels = max_pixels
        self._debug_signature: dict[str, tuple[str, int]] | None = None
        self._debug_seen = 0

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, key: int) -> dict[str, Any] | Skipped:
        index = self._checked_index(key)
        if not isinstance(key, SampleKey):
            key = index
        path = self.index.paths[index] if len(self.index.paths) else None
        result = self.policy.run(index, path, lambda: self._load(index, key))
        if self.debug and not isinstance(result, Skipped):
            self._debug_check(index, path, result)
        return result

    def _load(self, index: int, key: int) -> dict[str, Any]:
        raise NotImplementedError

    def _checked_index(self, key: int) -> int:
        if not isinstance(key, (int, np.integer)):
            raise TypeError(f"{type(self).__name__} keys are int or SampleKey, got {type(key).__name__}")
        index = int(key)
        size = len(self)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError(f"index {int(key)} out of range for {type(self).__name__} of {size} samples")
        return index

    def load_image(self, path: str, rng: np.random.Generator) -> torch.Tensor:
        """Read, decode (DCT-scaled when the transform plans for it) and transform one image."""
        data = read_bytes(path)
        if self.transform is None:
            image = decode_image(data, path, max_pixels=self.max_pixels)
            return to_chw_tensor(image)
        header = probe_image(data, path, max_pixels=self.max_pixels)
        plan = plan_transform(self.transform, header.height, header.width, rng)
        image = decode_image(data, path, min_size=plan.min_size, max_pixels=self.max_pixels)
        return to_chw_tensor(plan.finish(image))

    def rng(self, key: int) -> np.random.Generator:
        """The generator of sample ``key`` (see :func:`torchloom.seeding.rng_for_key`)."""
        return rng_for_key(self.seed, key)

    def _debug_check(self, index: int, path: str | None, sample: dict[str, Any]) -> None:
        signature = {name: _describe(value)[:2] for name, value in sample.items()}
        if self._debug_seen < DEBUG_LOGGED_SAMPLES:
            details = ", ".join(f"{name}: {_describe(value)[2]}" for name, value in sample.items())
            logger.info("sample %d (%s, pid %d): %s", index, path, os.getpid(), details)
        self._debug_seen += 1
        if self._debug_signature is None:
            self._debug_signature = signature
        elif signature != self._debug_signature:
            raise SampleError(
                index,
                path,
                f"debug check: sample has keys/dtypes/dims {signature}, "
                f"but the first sample had {self._debug_signature}",
            )


def _describe(value: Any) -> tuple[str, int, str]:
    """(dtype or type name, number of dimensions, a readable summary) of a sample value."""
    if isinstance(value, torch.Tensor):
        text = f"tensor{tuple(value.shape)} {value.dtype}"
        if value.numel():
            text += f" range [{value.min().item()}, {value.max().item()}]"
        return str(value.dtype), value.ndim, text
    if isinstance(value, np.ndarray):
        return str(value.dtype), value.ndim, f"array{value.shape} {value.dtype}"
    return type(value).__name__, 0, f"{type(value).__name__} {value!r:.60}"
