"""Shared machinery of the map-style datasets: keys, fault policy, image loading, debug checks."""

from __future__ import annotations

import copy
import functools
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from torchloom._buffers.pool import ScratchArrays
from torchloom._buffers.slots import BatchSlots
from torchloom._buffers.worker import WorkerBatchPool
from torchloom.datasets.contract import CacheableDataset, FetchesBatches, FetchesInto, Slot
from torchloom.datasets.index import SampleIndex
from torchloom.datasets.options import SampleSettings
from torchloom.errors import SampleError, SampleIndexError, UsageError
from torchloom.faults import FaultPolicy, Skipped
from torchloom.io.files import Inside
from torchloom.io.image import (
    DEFAULT_MAX_PIXELS,
    IMAGE_TOO_LARGE,
    decode_image,
    max_file_bytes,
    probe_image,
    read_image_bytes,
)
from torchloom.io.objects import ObjectRoot
from torchloom.seeding import SampleKey, rng_for_key, sample_rngs
from torchloom.timing import StageClock
from torchloom.transforms.base import Transform, plan_transform
from torchloom.transforms.tensor import to_chw_tensor, write_chw

logger = logging.getLogger("torchloom")

#: With ``debug=True``, the first this many samples a process loads are logged in detail.
DEBUG_LOGGED_SAMPLES = 3


class IndexedDataset(Dataset["dict[str, Any] | Skipped"], FetchesInto, FetchesBatches, CacheableDataset):
    """Base of datasets backed by a :class:`SampleIndex`; subclasses implement ``_load``.

    Takes its :class:`~torchloom.datasets.SampleOptions` checked (``settings``, from
    :func:`~torchloom.datasets.options.sample_settings`, which a subclass calls before it builds its
    index). Accepts ``int`` and :class:`torchloom.SampleKey` keys; applies the fault policy; with
    ``debug=True`` logs the first samples and checks that every sample has the same keys,
    dtypes and dimensions. It keeps the contract of :mod:`torchloom.datasets.contract`: batches into
    the Loader's buffers, and what a :class:`~torchloom.cache.DecodedCache` reads.
    """

    #: The folder the sample paths are relative to, when there is one (subclasses set it).
    root: str | None = None
    #: The name of the sample's image field (a manifest names its own; ``None``: no image).
    image_field: str | None = "image"
    # Whether each sample's file is read whole through read_file, so that a batch's
    # objects in a store are worth fetching at once (images are; videos and volumes are not).
    _reads_whole_files: bool = False

    def __init__(
        self,
        index: SampleIndex,
        settings: SampleSettings,
        *,
        max_pixels: int = DEFAULT_MAX_PIXELS,
        exif_orientation: bool = True,
    ) -> None:
        self.index = index
        self.transform: Transform | None = settings.transform
        self.policy: FaultPolicy = settings.policy
        self.seed = settings.seed
        self.debug = settings.debug
        self.max_pixels = max_pixels
        self.exif_orientation = exif_orientation
        #: A real folder every file read must resolve into (checked at read time), or None.
        self.read_root: Inside = None
        #: Where read/decode/transform times go while a LoaderProfiler is attached (else None).
        self.stage_clock: StageClock | None = None
        self._preloaded: np.ndarray | None = None
        # Reused JPEG decode targets (shared by this dataset's threads; a worker gets its own).
        self._scratch = ScratchArrays()
        # Shared batch buffers a DataLoader worker reuses once the main process lets go of them.
        self._batch_buffers = WorkerBatchPool()
        self._debug_signature: dict[str, tuple[str, int]] | None = None
        self._debug_seen = 0

    def __len__(self) -> int:
        return len(self.index)

    @functools.cached_property
    def fault_name(self) -> str:
        """How skipped samples name this dataset (its repr, computed once)."""
        return repr(self)

    def __getitem__(self, key: int) -> dict[str, Any] | Skipped:
        return self._get(self.checked_key(key), None)

    def __getitems__(self, keys: Sequence[int]) -> list[dict[str, Any] | Skipped]:
        """Load a batch; DataLoader calls this with a batch's keys when it exists.

        Images of equal shape are written straight into one batch buffer (shared memory in a
        worker), which :func:`torchloom.collate` then returns without stacking them again.
        """
        return self.getitems_into(keys, self.batch_slots(len(keys)))

    def getitems_into(self, keys: Sequence[int], slots: BatchSlots) -> list[dict[str, Any] | Skipped]:
        """``__getitems__`` into the given batch slots (the thread Loader's reused buffers)."""
        checked = [self.checked_key(key) for key in keys]
        slots.generators = self.batch_generators(checked)
        to_fetch = self._reads_whole_files and self._preloaded is None and len(self.index.paths)
        if to_fetch and isinstance(self.read_root, ObjectRoot):
            paths = [self.index.paths[int(key)] for key in checked]
            slots.prefetched = self._fetch_batch(self.read_root, paths)
        return [self._get(key, (slots, position)) for position, key in enumerate(checked)]

    def _fetch_batch(self, root: ObjectRoot, paths: list[str]) -> dict[str, bytes | Exception]:
        """Every path's bytes (or error) fetched at once, ``max_in_flight`` requests in flight."""
        began = time.perf_counter()
        fetched = root.read_many(paths, max_bytes=max_file_bytes(self.max_pixels), too_large=IMAGE_TOO_LARGE)
        if self.stage_clock is not None:
            self.stage_clock.add("read", time.perf_counter() - began)
        return dict(zip(paths, fetched, strict=True))

    def batch_slots(self, count: int) -> BatchSlots:
        """Slots for a batch of ``count`` samples in this dataset's batch buffers (shared memory in a
        DataLoader worker, reused once the main process lets go of them)."""
        return BatchSlots(count, self._batch_buffers.take)

    def _get(self, key: int, slot: Slot | None) -> dict[str, Any] | Skipped:
        """Sample ``key`` (as :meth:`checked_key` returned it) under the fault policy."""
        index = int(key)
        path = self.index.paths[index] if len(self.index.paths) else None
        return self.under_policy(index, path, lambda: self._load(index, key, slot))

    def under_policy(
        self, index: int, path: str | None, load: Callable[[], dict[str, Any]]
    ) -> dict[str, Any] | Skipped:
        """Sample ``index`` (read from ``path``) built by ``load`` under this dataset's fault policy:
        the sample, or its :class:`~torchloom.Skipped` marker; with ``debug=True``, checked against the
        first sample."""
        result = self.policy.run(index, path, load, self.fault_name)
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

    def checked_key(self, key: int) -> int:
        """``key`` with its index made non-negative (a SampleKey stays one); out of range raises
        :class:`~torchloom.errors.SampleIndexError`."""
        index = self._checked_index(key)
        return SampleKey(index, key.epoch) if isinstance(key, SampleKey) else index

    def read_file(self, path: str, slot: Slot | None = None) -> bytes:
        """An image file's bytes, read as this dataset reads them: inside ``read_root`` (when set),
        regular files only, and no larger than an image within ``max_pixels`` can be; taken from
        the batch's bytes fetched ahead when ``slot``'s batch has them (once: a retry reads again)."""
        if slot is not None:
            fetched = slot[0].prefetched.pop(path, None)
            if isinstance(fetched, Exception):
                raise fetched
            if fetched is not None:
                return fetched
        return read_image_bytes(path, max_pixels=self.max_pixels, inside=self.read_root)

    def load_image(self, path: str, rng: np.random.Generator, slot: Slot | None = None) -> torch.Tensor:
        """Read, decode (DCT-scaled when the transform plans for it) and transform one image.

        With a ``slot`` (a batch's slots and this sample's position), an HWC array result is
        written as CHW into the batch buffer and the returned tensor is that slot.
        """
        clock = self.stage_clock
        began = time.perf_counter() if clock is not None else 0.0
        transform = self.transform
        if self._preloaded is not None:  # a view made by load_sample: the file is not read
            decoded = self._preloaded
            image = decoded if transform is None else transform(decoded, rng)
        else:
            data = self.read_file(path, slot)
            if clock is not None:
                clock.add("read", time.perf_counter() - began)
                began = time.perf_counter()
            plan, orientation = None, None
            if transform is not None:
                header = probe_image(
                    data, path, max_pixels=self.max_pixels, exif_orientation=self.exif_orientation
                )
                plan = plan_transform(transform, header.height, header.width, rng)
                orientation = header.orientation
            decoded = decode_image(
                data,
                path,
                min_size=plan.min_size if plan is not None else None,
                max_pixels=self.max_pixels,
                exif_orientation=self.exif_orientation,
                scratch=self._scratch,
                orientation=orientation,
            )
            if clock is not None:
                clock.add("decode", time.perf_counter() - began)
                began = time.perf_counter()
            image = plan.finish(decoded) if plan is not None else decoded
        tensor = self._to_tensor(image, slot)
        if clock is not None:
            clock.add("transform", time.perf_counter() - began)
        return tensor

    @staticmethod
    def _to_tensor(image: Any, slot: Slot | None) -> torch.Tensor:
        """A transform's result as a CHW tensor, written into the batch slot when one fits."""
        if slot is not None and isinstance(image, np.ndarray) and image.ndim == 3:
            slots, position = slot
            target = slots.slot(
                position, (image.shape[2], image.shape[0], image.shape[1]), _torch_dtype(image)
            )
            if target is not None:
                return write_chw(image, target, slots.slot_array(position))
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
        view = copy.copy(self)  # a shallow view holding the image: no state shared between threads
        view._preloaded = image
        return view._load(index, key, slot)

    def rng(self, key: int, slot: Slot | None = None) -> np.random.Generator:
        """The generator of sample ``key`` (see :func:`torchloom.seeding.rng_for_key`); with the
        sample's ``slot``, the one :meth:`batch_generators` drew for it (the same generator)."""
        if slot is not None and slot[0].generators is not None:
            generators, position = slot[0].generators, slot[1]
            generator = generators[position]
            if generator is not None:
                # Handed out once: a second call (a retry, a second image) gets a fresh generator,
                # as rng_for_key gives, not this one already advanced.
                generators[position] = None
                return generator
        return rng_for_key(self.seed, key)

    def batch_generators(self, keys: Sequence[int]) -> list[np.random.Generator | None] | None:
        """The generators of a batch's (checked) keys seeded together, several times faster than
        one by one; ``None`` unless every key is a :class:`SampleKey` (plain ints draw from torch's
        generator, in the order samples are loaded)."""
        if not keys or not all(isinstance(key, SampleKey) for key in keys):
            return None
        return list(sample_rngs(self.seed, keys))  # type: ignore[arg-type]

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


# The torch dtypes of the numpy dtypes images come in (a lookup is ~10x torch.from_numpy's probe).
_TORCH_DTYPES = {
    np.dtype(name): getattr(torch, name)
    for name in (
        "uint8",
        "int8",
        "uint16",
        "int16",
        "int32",
        "int64",
        "float16",
        "float32",
        "float64",
        "bool",
    )
}


def _torch_dtype(image: np.ndarray) -> torch.dtype:
    dtype = _TORCH_DTYPES.get(image.dtype)
    return dtype if dtype is not None else torch.from_numpy(np.empty(0, image.dtype)).dtype


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
