"""Per-field collate rules and :class:`Collate`, which applies them to dict samples.

A rule turns the values one field takes across a batch into named outputs: padding rules add
a ``<field>_mask`` (True on real data) and the original sizes or lengths, so a model can ignore
the padding. Fields without a rule go through :func:`torchloom.collate`. Nothing here touches
CUDA or autograd; outputs are plain CPU tensors, fine with ``pin_memory=True``.

Example:
    >>> import torch
    >>> from torchloom.collation import AsList, Collate, PadImages, PadSequences
    >>> batch = Collate({"image": PadImages(), "tokens": PadSequences(), "name": AsList()})([
    ...     {"image": torch.ones(3, 2, 3, dtype=torch.uint8), "tokens": [5, 6, 7], "name": "a"},
    ...     {"image": torch.ones(3, 4, 2, dtype=torch.uint8), "tokens": [8], "name": "b"},
    ... ])
    >>> batch["image"].shape, batch["image_size"].tolist(), batch["tokens_length"].tolist()
    (torch.Size([2, 3, 4, 3]), [[2, 3], [4, 2]], [3, 1])
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import torch
from torch.nn import functional

from torchloom._buffers.slots import empty_batch
from torchloom._buffers.worker import WorkerBatchPool, ship
from torchloom.collation.auto import collate_values, split_skipped
from torchloom.errors import CollateError, ConfigError, UsageError, check_choice
from torchloom.faults import SKIPPED_KEY
from torchloom.seeding import rng_for_key


class CollateRule(Protocol):
    """Turns one field's values across a batch into named outputs.

    Any callable taking ``(field, values, samples)`` and returning a dict of outputs satisfies it.

    Example:
        >>> import torch
        >>> from torchloom.collation import Collate
        >>> def total(field, values, samples):
        ...     return {f"{field}_sum": torch.tensor(sum(values))}
        >>> Collate({"n": total})([{"n": 2}, {"n": 3}])
        {'n_sum': tensor(5)}
    """

    def __call__(self, field: str, values: list[Any], samples: list[Mapping[str, Any]]) -> dict[str, Any]: ...


class Collate:
    """Collate dict samples with a rule per field; other fields use :func:`torchloom.collate`.

    Skipped samples are dropped and listed under ``"skipped"``, as with ``collate``. An output
    name a rule makes (``image_mask``) that is also a sample field is an error. In a DataLoader
    worker, fields without a rule that it stacks go into shared buffers of its own pool, written
    again once the main process drops the batch (see :mod:`torchloom._buffers.worker`): for a
    dataset of your own, ``Collate()`` spares each batch the page faults of a fresh shared buffer.

    Example:
        >>> import torch
        >>> from torchloom.collation import Collate, Stack
        >>> Collate({"x": Stack()})([{"x": torch.zeros(2)}, {"x": torch.ones(2)}])["x"].shape
        torch.Size([2, 2])
    """

    def __init__(self, spec: Mapping[str, CollateRule] | None = None) -> None:
        self.spec = dict(spec or {})
        self._buffers = WorkerBatchPool()  # each worker gets a fresh, empty one
        for field, rule in self.spec.items():
            if not callable(rule):
                raise UsageError(f"Collate rule for {field!r} must be callable, got {type(rule).__name__}")

    def __call__(self, batch: Sequence[Any]) -> dict[str, Any]:
        samples, skipped = split_skipped(batch)
        if not samples:
            return {SKIPPED_KEY: skipped}
        for position, sample in enumerate(samples):
            if not isinstance(sample, Mapping):
                raise CollateError(
                    f"Collate needs dict samples; sample {position} is {type(sample).__name__}"
                )
        keys = list(samples[0])
        for sample in samples[1:]:
            if set(sample) != set(keys):
                raise CollateError(f"batch: samples have different keys ({sorted(keys)} vs {sorted(sample)})")
        missing = sorted(set(self.spec) - set(keys))
        if missing:
            raise CollateError(f"Collate has rules for {missing}, which samples lack; sample keys: {keys}")
        result: dict[str, Any] = {}
        for key in keys:
            values = [sample[key] for sample in samples]
            rule = self.spec.get(key)
            produced = (
                rule(key, values, samples)
                if rule
                else {key: collate_values(values, f"batch.{key}", self._buffers.take)}
            )
            for name in produced:
                if name in result or (name != key and name in keys):
                    raise CollateError(
                        f"rule for {key!r} makes output {name!r}, which is already a field; rename the field"
                    )
            result.update(produced)
        if skipped:
            if SKIPPED_KEY in result:
                raise CollateError(f"samples already hold a {SKIPPED_KEY!r} field; rename it")
            result[SKIPPED_KEY] = skipped
        shipped: dict[str, Any] = ship(result)
        return shipped

    def __repr__(self) -> str:
        return f"Collate({self.spec!r})"


@dataclass(frozen=True)
class Stack:
    """Stack equal-shape values (an error naming the field and shapes otherwise).

    Example:
        >>> import torch
        >>> from torchloom.collation import Stack
        >>> Stack()("x", [torch.zeros(2, 3), torch.ones(2, 3)], [])["x"].shape
        torch.Size([2, 2, 3])
    """

    def __call__(self, field: str, values: list[Any], samples: list[Mapping[str, Any]]) -> dict[str, Any]:
        return {field: collate_values(values, f"batch.{field}")}


@dataclass(frozen=True)
class AsList:
    """Keep the values as a plain list (paths, raw text, anything not to be tensorised).

    Example:
        >>> from torchloom.collation import AsList, Collate
        >>> Collate({"meta": AsList()})([{"meta": {"id": 1}}, {"meta": {"id": 2}}])
        {'meta': [{'id': 1}, {'id': 2}]}
    """

    def __call__(self, field: str, values: list[Any], samples: list[Mapping[str, Any]]) -> dict[str, Any]:
        return {field: list(values)}


@dataclass(frozen=True)
class PadImages:
    """Pad ``(C, H, W)`` images to the batch's largest height and width (bottom and right).

    Emits ``<field>`` ``(B, C, H, W)``, ``<field>_mask`` ``(B, H, W)`` (True on real pixels) and
    ``<field>_size`` ``(B, 2)`` (each image's original height and width). Images are never
    resized unless ``max_size`` is given: then one larger than ``max_size`` (``int`` or
    ``(height, width)``) is shrunk, keeping its aspect ratio, to fit inside it (its mask covers
    the shrunk image). ``multiple_of`` rounds the padded size up (e.g. 32 for a network with 5
    stride-2 stages), which may exceed ``max_size``.

    Example:
        >>> import torch
        >>> from torchloom import PadImages
        >>> images = [torch.ones(3, 20, 30, dtype=torch.uint8), torch.ones(3, 25, 10, dtype=torch.uint8)]
        >>> out = PadImages(multiple_of=32)("image", images, [])
        >>> out["image"].shape, out["image_mask"].shape, out["image_size"].tolist()
        (torch.Size([2, 3, 32, 32]), torch.Size([2, 32, 32]), [[20, 30], [25, 10]])
    """

    multiple_of: int = 1
    pad_value: float = 0
    max_size: int | tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if self.multiple_of < 1:
            raise ConfigError(f"multiple_of must be >= 1, got {self.multiple_of}")

    def __call__(self, field: str, values: list[Any], samples: list[Mapping[str, Any]]) -> dict[str, Any]:
        images = [_image_tensor(value, field, position) for position, value in enumerate(values)]
        _same(field, "channel count", [image.shape[0] for image in images])
        _same(field, "dtype", [image.dtype for image in images])
        original = torch.tensor([[image.shape[1], image.shape[2]] for image in images], dtype=torch.int64)
        if self.max_size is not None:
            images = [_fit_inside(image, self.max_size) for image in images]
        height = _round_up(max(image.shape[1] for image in images), self.multiple_of)
        width = _round_up(max(image.shape[2] for image in images), self.multiple_of)
        first = images[0]
        _check_pad_value(field, self.pad_value, first.dtype)
        out = empty_batch((len(images), first.shape[0], height, width), first.dtype).fill_(self.pad_value)
        mask = torch.zeros((len(images), height, width), dtype=torch.bool)
        for position, image in enumerate(images):
            out[position, :, : image.shape[1], : image.shape[2]] = image
            mask[position, : image.shape[1], : image.shape[2]] = True
        return {field: out, f"{field}_mask": mask, f"{field}_size": original}


@dataclass(frozen=True)
class PadSequences:
    """Pad sequences to the batch's longest: token-id lists, 1-D tensors or ``(T, F)`` features.

    Emits ``<field>`` ``(B, T, ...)``, ``<field>_mask`` ``(B, T)`` (True on real steps) and
    ``<field>_length`` ``(B,)``. ``max_length`` truncates, keeping the start
    (``truncate="right"``) or the end (``"left"``). Empty sequences have length 0; a batch of
    only empty sequences gives ``T = 0``.

    Example:
        >>> from torchloom import PadSequences
        >>> out = PadSequences(pad_value=-1)("tokens", [[5, 6, 7], [8]], [])
        >>> out["tokens"].tolist(), out["tokens_length"].tolist()
        ([[5, 6, 7], [8, -1, -1]], [3, 1])
    """

    pad_value: float = 0
    max_length: int | None = None
    truncate: Literal["right", "left"] = "right"

    def __post_init__(self) -> None:
        if self.truncate not in ("right", "left"):
            raise ConfigError(f"Invalid truncate={self.truncate!r}; use 'right' or 'left'")
        if self.max_length is not None and self.max_length < 0:
            raise ConfigError(f"max_length must be >= 0, got {self.max_length}")

    def __call__(self, field: str, values: list[Any], samples: list[Mapping[str, Any]]) -> dict[str, Any]:
        sequences = _sequence_tensors(values, field)
        _same(field, "dtype", [sequence.dtype for sequence in sequences])
        _same(field, "feature shape", [tuple(sequence.shape[1:]) for sequence in sequences])
        if self.max_length is not None:
            limit = self.max_length
            sequences = [
                s[:limit] if self.truncate == "right" else s[max(0, len(s) - limit) :] for s in sequences
            ]
        first = sequences[0]
        _check_pad_value(field, self.pad_value, first.dtype)
        longest = max(len(sequence) for sequence in sequences)
        out = empty_batch((len(sequences), longest, *first.shape[1:]), first.dtype).fill_(self.pad_value)
        mask = torch.zeros((len(sequences), longest), dtype=torch.bool)
        for position, sequence in enumerate(sequences):
            out[position, : len(sequence)] = sequence
            mask[position, : len(sequence)] = True
        lengths = torch.tensor([len(sequence) for sequence in sequences], dtype=torch.int64)
        return {field: out, f"{field}_mask": mask, f"{field}_length": lengths}


@dataclass(frozen=True)
class CropOrPadVolumes:
    """Bring volumes to ``size`` on their last ``len(size)`` axes: crop where larger, pad where smaller.

    Crops are random (``random=True``) with the position drawn from the sample's generator,
    ``rng_for_key(seed, sample["index"])``: with torchloom datasets and a
    :class:`torchloom.SampleKey` sampler it is reproducible and differs between epochs; a plain
    integer index falls back to torch's generator. ``random=False`` crops the centre. Padding
    is centred: ``padding="constant"`` (the default) fills with ``pad_value``, ``"reflect"``
    mirrors the volume (numpy's ``reflect``, as :class:`~torchloom.datasets.HyperspectralDataset`
    pads patches).
    Emits ``<field>`` ``(B, ..., *size)`` and ``<field>_mask`` ``(B, *size)`` (True on real voxels).

    Example:
        >>> import torch
        >>> from torchloom.collation import Collate, CropOrPadVolumes
        >>> samples = [{"volume": torch.ones(1, 10, 40, 40)}, {"volume": torch.ones(1, 20, 24, 24)}]
        >>> out = Collate({"volume": CropOrPadVolumes((16, 32, 32), random=False)})(samples)
        >>> out["volume"].shape, int(out["volume_mask"][0].sum())
        (torch.Size([2, 1, 16, 32, 32]), 10240)
    """

    size: tuple[int, ...]
    padding: Literal["constant", "reflect"] = "constant"
    random: bool = True
    pad_value: float = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.size or any(int(s) <= 0 for s in self.size):
            raise ConfigError(f"size must be positive lengths, got {self.size!r}")
        check_choice("padding", self.padding, ("constant", "reflect"))

    def __call__(self, field: str, values: list[Any], samples: list[Mapping[str, Any]]) -> dict[str, Any]:
        axes = len(self.size)
        volumes = [torch.as_tensor(value) for value in values]
        for position, volume in enumerate(volumes):
            if volume.ndim < axes:
                raise CollateError(
                    f"batch.{field}: sample {position} has shape {tuple(volume.shape)}, fewer than the "
                    f"{axes} axes of size={self.size}"
                )
        _same(field, "leading shape", [tuple(v.shape[: v.ndim - axes]) for v in volumes])
        _same(field, "dtype", [v.dtype for v in volumes])
        if self.padding == "constant":
            _check_pad_value(field, self.pad_value, volumes[0].dtype)
        shaped, masks = [], []
        for position, (volume, sample) in enumerate(zip(volumes, samples, strict=True)):
            rng = self._rng(field, sample, position)
            result, mask = self._crop_or_pad(volume, rng)
            shaped.append(result)
            masks.append(mask)
        out = empty_batch((len(shaped), *shaped[0].shape), shaped[0].dtype)
        torch.stack(shaped, out=out)
        return {field: out, f"{field}_mask": torch.stack(masks)}

    def _rng(self, field: str, sample: Mapping[str, Any], position: int) -> np.random.Generator | None:
        if not self.random:
            return None
        if "index" not in sample:
            raise CollateError(
                f"batch.{field}: random crops draw from the sample's generator, which needs an 'index' "
                f"field (sample {position} has {sorted(sample)}); add it or use random=False"
            )
        return rng_for_key(self.seed, sample["index"])

    def _crop_or_pad(
        self, volume: torch.Tensor, rng: np.random.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        axes = len(self.size)
        lead = volume.ndim - axes
        crop: list[slice] = [slice(None)] * lead
        pads: list[tuple[int, int]] = [(0, 0)] * lead
        mask_slices: list[slice] = []
        for axis, target in enumerate(self.size):
            length = volume.shape[lead + axis]
            if length >= target:
                spare = length - target
                start = int(rng.integers(0, spare + 1)) if rng is not None else spare // 2
                crop.append(slice(start, start + target))
                pads.append((0, 0))
                mask_slices.append(slice(0, target))
            else:
                before = (target - length) // 2
                crop.append(slice(None))
                pads.append((before, target - length - before))
                mask_slices.append(slice(before, before + length))
        cropped = volume[tuple(crop)]
        if any(p != (0, 0) for p in pads):
            array = cropped.numpy()
            if self.padding == "reflect":
                padded = np.pad(array, pads, mode="reflect")
            else:
                padded = np.pad(array, pads, mode="constant", constant_values=self.pad_value)
            cropped = torch.from_numpy(np.ascontiguousarray(padded))
        mask = torch.zeros(tuple(self.size), dtype=torch.bool)
        mask[tuple(mask_slices)] = True
        return cropped, mask


def _image_tensor(value: Any, field: str, position: int) -> torch.Tensor:
    if isinstance(value, np.ndarray):
        value = np.ascontiguousarray(value)
    image = torch.as_tensor(value)
    if image.ndim == 3 and image.shape[0] not in (1, 2, 3, 4) and image.shape[2] in (1, 3, 4):
        raise CollateError(
            f"batch.{field}: sample {position} has shape {tuple(image.shape)}, which looks like (H, W, C); "
            "PadImages expects (C, H, W): convert with ToTensor() or .permute(2, 0, 1)"
        )
    if image.ndim != 3:
        raise CollateError(
            f"batch.{field}: sample {position} has shape {tuple(image.shape)}; PadImages expects "
            "(C, H, W) images (add a channel axis to 2-D images)"
        )
    return image


def _sequence_tensors(values: list[Any], field: str) -> list[torch.Tensor]:
    tensors: list[torch.Tensor | None] = []
    for position, value in enumerate(values):
        if isinstance(value, (list, tuple)) and len(value) == 0:
            tensors.append(None)  # dtype and feature shape come from the other samples
            continue
        tensor = torch.as_tensor(value)
        if tensor.ndim == 0:
            raise CollateError(
                f"batch.{field}: sample {position} is a scalar; PadSequences expects sequences"
            )
        tensors.append(tensor)
    known = next((t for t in tensors if t is not None), None)
    template = known if known is not None else torch.zeros(0, dtype=torch.int64)
    return [
        t if t is not None else torch.empty((0, *template.shape[1:]), dtype=template.dtype) for t in tensors
    ]


def _fit_inside(image: torch.Tensor, max_size: int | tuple[int, int]) -> torch.Tensor:
    limit_height, limit_width = (max_size, max_size) if isinstance(max_size, int) else max_size
    height, width = image.shape[1], image.shape[2]
    scale = min(limit_height / height, limit_width / width)
    if scale >= 1:
        return image
    size = (max(1, math.floor(height * scale)), max(1, math.floor(width * scale)))
    source = image if image.dtype in (torch.uint8, torch.float32, torch.float64) else image.float()
    resized = functional.interpolate(
        source[None], size=size, mode="bilinear", antialias=True, align_corners=False
    )
    return resized[0].to(image.dtype)


def _same(field: str, what: str, seen: list[Any]) -> None:
    distinct = sorted({str(value) for value in seen})
    if len(distinct) > 1:
        raise CollateError(
            f"batch.{field}: samples differ in {what} ({', '.join(distinct)}); make them agree"
        )


def _check_pad_value(field: str, pad_value: float, dtype: torch.dtype) -> None:
    if dtype.is_floating_point or dtype == torch.bool:
        return
    info = torch.iinfo(dtype)
    if pad_value != int(pad_value) or not info.min <= pad_value <= info.max:
        raise CollateError(f"batch.{field}: pad_value={pad_value} does not fit dtype {dtype}")


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple
