"""Shared machinery of the map-style datasets: keys, fault policy, image loading, debug checks."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from torchloom.buffers import BatchSlots
from torchloom.errors import ConfigError, SampleError, SampleIndexError, UsageError
from torchloom.faults import FaultPolicy, Skipped
from torchloom.index import SampleIndex
from torchloom.io.image import DEFAULT_MAX_PIXELS, decode_image, probe_image, read_bytes
from torchloom.seeding import SampleKey, rng_for_key
from torchloom.transforms.base import Transform, check_transform, plan_transform
from torchloom.transforms.tensor import to_chw_tensor, write_chw

#: Where a sample's image may be written: a batch's slots and the sample's position in it.
Slot = tuple[BatchSlots, int]

logger = logging.getLogger("torchloom")

#: With ``debug=True``, the first this many samples a process loads are logged in detail.
DEBUG_LOGGED_SAMPLES = 3


class _Preloaded(threading.local):
    """The decoded image ``load_sample`` hands to the ``load_image`` call of this thread."""

    image: np.ndarray | None = None


_PRELOADED = _Preloaded()


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
        exif_orientation: bool = True,
    ) -> None:
        if seed < 0:
            raise ConfigError(f"seed must be >= 0, got {seed=}")
        check_transform(transform)
        self.index = index
        self.transform = transform
        self.policy = FaultPolicy.parse(on_error)
        self.seed = seed
        self.debug = debug
        self.max_pixels = max_pixels
        self.exif_orientation = exif_orientation
        #: A real folder every file read must resolve into (checked at read time), or None.
        self.read_root: str | None = None
        self._debug_signature: dict[str, tuple[str, int]] | None = None
        self._debug_seen = 0

    def __len__(self) -> int:
        return len(self.index)

    @property
    def _fault_name(self) -> str:
        """How skipped samples name this dataset (its repr, computed once)."""
        name = self.__dict__.get("_fault_name_cache")
        if name is None:
            name = self.__dict__["_fault_name_cache"] = repr(self)
        return name

    def __getitem__(self, key: int) -> dict[str, Any] | Skipped:
        return self._get(key, None)

    def __getitems__(self, keys: Sequence[int]) -> list[dict[str, Any] | Skipped]:
        """Load a batch; DataLoader calls this with a batch's keys when it exists.

        Images of equal shape are written straight into one batch buffer (shared memory in a
        worker), which :func:`torchloom.collate` then returns without stacking them again.
        """
        slots = BatchSlots(len(keys))
        return [self._get(key, (slots, position)) for position, key in enumerate(keys)]

    def _get(self, key: int, slot: Slot | None) -> dict[str, Any] | Skipped:
        index = self._checked_index(key)
        key = SampleKey(index, key.epoch) if isinstance(key, SampleKey) else index
        path = self.index.paths[index] if len(self.index.paths) else None
        result = self.policy.run(index, path, lambda: self._load(index, key, slot), self._fault_name)
        if self.debug and not isinstance(result, Skipped):
            self._debug_check(index, path, result)
        return result

    def _load(self, index: int, key: int, slot: Slot | None) -> dict[str, Any]:
        """Build sample ``index``; ``key`` is ``index`` as a :class:`SampleKey` when one was
        given (samples carry it as ``"index"``, so collate rules can seed from it); ``slot`` is
        where its image may go (see ``load_image``)."""
        raise NotImplementedError

    def _checked_index(self, key: int) -> int:
        if not isinstance(key, (int, np.integer)):
            raise UsageError(f"{type(self).__name__} keys are int or SampleKey, got {type(key).__name__}")
        index = int(key)
        size = len(self)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise SampleIndexError(
                f"index {int(key)} out of range for {type(self).__name__} of {size} samples"
            )
        return index

    def load_image(self, path: str, rng: np.random.Generator, slot: Slot | None = None) -> torch.Tensor:
        """Read, decode (DCT-scaled when the transform plans for it) and transform one image.

        With a ``slot`` (a batch's slots and this sample's position), an HWC array result is
        written as CHW into the batch buffer and the returned tensor is that slot.
        """
        preloaded, _PRELOADED.image = _PRELOADED.image, None
        if preloaded is not None:  # from load_sample: the file is not read
            image = preloaded if self.transform is None else self.transform(preloaded, rng)
        elif self.transform is None:
            data = read_bytes(path, inside=self.read_root)
            image = decode_image(data, path, max_pixels=self.max_pixels, orient=self.exif_orientation)
        else:
            data = read_bytes(path, inside=self.read_root)
            header = probe_image(data, path, max_pixels=self.max_pixels, orient=self.exif_orientation)
            plan = plan_transform(self.transform, header.height, header.width, rng)
            decoded = decode_image(
                data, path, min_size=plan.min_size, max_pixels=self.max_pixels, orient=self.exif_orientation
            )
            image = plan.finish(decoded)
        if slot is not None and isinstance(image, np.ndarray) and image.ndim == 3:
            slots, position = slot
            target = slots.slot(
                position, (image.shape[2], image.shape[0], image.shape[1]), _torch_dtype(image)
            )
            if target is not None:
                return write_chw(image, target)
        if slot is not None and isinstance(image, torch.Tensor) and image.ndim == 3:
            slots, position = slot
            target = slots.slot(position, tuple(image.shape), image.dtype)
            if target is not None:
                return target.copy_(image)
        return to_chw_tensor(image)

    def load_sample(self, index: int, key: int, slot: Slot | None, image: np.ndarray) -> dict[str, Any]:
        """Build sample ``index`` as ``_load`` does, with ``image`` in place of decoding its file.

        ``image`` is the sample's upright RGB ``uint8`` HWC array as this dataset decodes it
        (e.g. read from a :class:`torchloom.cache.DecodedCache`); the transform runs on it with
        the sample's rng, so its random draws are those of an uncached read of an image of that
        size. Other fields come from the index as usual. The caller applies the fault policy.
        """
        _PRELOADED.image = image
        try:
            return self._load(index, key, slot)
        finally:
            _PRELOADED.image = None

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


def _torch_dtype(image: np.ndarray) -> torch.dtype:
    return torch.from_numpy(image[:0, :0]).dtype


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
