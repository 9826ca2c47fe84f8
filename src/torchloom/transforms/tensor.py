"""Conversion to tensors and batch normalisation.

Samples stay ``uint8`` (4× less to move between processes than float32); normalise the
batch afterwards, on the device that trains.

Example:
    >>> import numpy as np, torch
    >>> from torchloom import Normalize
    >>> from torchloom.transforms import ToTensor
    >>> image = ToTensor()(np.zeros((4, 5, 3), np.uint8), np.random.default_rng(0))
    >>> image.shape, image.dtype
    (torch.Size([3, 4, 5]), torch.uint8)
    >>> Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))(image[None]).mean().item()
    -1.0
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np
import torch

from torchloom.errors import ConfigError, TransformError

UINT8_MAX = 255.0


def to_chw_tensor(image: Any) -> torch.Tensor:
    """An HWC (or HW) array as a contiguous CHW tensor of the same dtype; tensors pass through.

    Example:
        >>> import numpy as np
        >>> to_chw_tensor(np.zeros((2, 3), np.uint8)).shape
        torch.Size([1, 2, 3])
    """
    if isinstance(image, torch.Tensor):
        return image
    if not isinstance(image, np.ndarray):
        raise TransformError(
            f"the transform returned a {type(image).__name__}, but an image must be an HWC numpy array "
            "or a CHW tensor; make the transform return one (this is a bug in the pipeline, not in the "
            "data, so no fault policy skips it)"
        )
    if image.ndim == 2:
        image = image[:, :, None]
    if image.ndim != 3:
        raise TransformError(f"the transform returned an array of shape {image.shape}; expected HWC or HW")
    if any(stride < 0 for stride in image.strides):
        image = np.ascontiguousarray(image)
    if not image.flags.writeable:  # e.g. a view of a read-only cache: the tensor must own its memory
        return torch.from_numpy(image.transpose(2, 0, 1).copy())
    # torch's permute + contiguous copies HWC -> CHW about 2x faster than numpy's transpose copy.
    return torch.from_numpy(image).permute(2, 0, 1).contiguous()


def write_chw(image: np.ndarray, out: torch.Tensor, out_array: np.ndarray | None = None) -> torch.Tensor:
    """Copy an HWC array into the CHW tensor ``out`` (one strided copy); returns ``out``.

    ``out_array``, when given, is ``out`` as a numpy view (e.g. :meth:`BatchSlots.slot_array`),
    which saves converting each channel plane of ``out`` here.

    Example:
        >>> import numpy as np, torch
        >>> out = torch.empty(3, 2, 2, dtype=torch.uint8)
        >>> write_chw(np.arange(12, dtype=np.uint8).reshape(2, 2, 3), out)[0].tolist()
        [[0, 3], [6, 9]]
    """
    channels = image.shape[2]
    if image.dtype == np.uint8 and 1 < channels <= 4 and out.is_contiguous() and out.device.type == "cpu":
        # cv2.split writes each channel plane straight into ``out``: ~3x torch's strided copy.
        planes = (
            list(out_array)
            if out_array is not None
            else [out[channel].numpy() for channel in range(channels)]
        )
        written = cv2.split(image, planes)
        if all(result is plane for result, plane in zip(written, planes, strict=True)):
            return out
    if any(stride < 0 for stride in image.strides):
        image = np.ascontiguousarray(image)
    return out.copy_(torch.from_numpy(image).permute(2, 0, 1))


class ToTensor:
    """Turn an HWC ``uint8`` array into a CHW ``uint8`` tensor (no scaling).

    Example:
        >>> import numpy as np
        >>> from torchloom import Compose, Resize
        >>> from torchloom.transforms import ToTensor
        >>> pipeline = Compose([Resize((32, 48)), ToTensor()])
        >>> image = pipeline(np.zeros((64, 96, 3), np.uint8), np.random.default_rng(0))
        >>> image.shape, image.dtype
        (torch.Size([3, 32, 48]), torch.uint8)
    """

    def __call__(self, image: Any, rng: np.random.Generator) -> torch.Tensor:
        return to_chw_tensor(image)

    def __repr__(self) -> str:
        return "ToTensor()"


class Normalize:
    """Scale a ``uint8`` batch to ``[0, 1]``, then subtract ``mean`` and divide by ``std``.

    Works on ``(C, H, W)`` or ``(B, C, H, W)`` tensors, on whatever device they are; ``mean`` and
    ``std`` are per channel on the ``[0, 1]`` scale. They are copied to a device once, at its first
    batch: a copy from ordinary memory to a GPU waits for the work queued there, so copying them
    per batch would undo the overlap that ``non_blocking=True`` transfers give.

    Example:
        >>> import torch
        >>> batch = torch.full((2, 3, 1, 1), 255, dtype=torch.uint8)
        >>> Normalize((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))(batch).flatten().tolist()
        [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        if len(mean) != len(std):
            raise ConfigError(f"mean and std need one value per channel, got {mean=} {std=}")
        if any(value <= 0 for value in std):
            raise ConfigError(f"std must be positive, got {std=}")
        self.mean = torch.tensor(mean, dtype=torch.float32)
        self.std = torch.tensor(std, dtype=torch.float32)
        self._on_device: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def __call__(self, batch: torch.Tensor) -> torch.Tensor:
        channels = batch.shape[-3]
        if channels != len(self.mean):
            raise ConfigError(f"Normalize has {len(self.mean)} channel(s) of mean/std, batch has {channels}")
        mean, std = self._statistics_on(batch.device)
        scaled = batch.float() / UINT8_MAX if batch.dtype == torch.uint8 else batch.float()
        return (scaled - mean) / std

    def _statistics_on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """``mean`` and ``std`` as ``(C, 1, 1)`` tensors on ``device``, copied there once."""
        statistics = self._on_device.get(device)
        if statistics is None:
            shape = (len(self.mean), 1, 1)
            statistics = (self.mean.to(device).view(shape), self.std.to(device).view(shape))
            self._on_device[device] = statistics
        return statistics

    def __repr__(self) -> str:
        return f"Normalize(mean={self.mean.tolist()}, std={self.std.tolist()})"
