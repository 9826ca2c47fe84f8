"""WindowSampler and WindowDataset: fixed-length windows that never cross a sequence boundary."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from torchloom.collate.auto import collate_values
from torchloom.samplers.base import KeySampler, epoch_rng
from torchloom.seeding import SampleKey
from torchloom.state import fingerprint


class WindowIndex:
    """Window number -> (sequence, first step), for windows of ``window`` steps every ``stride``.

    Example:
        >>> index = WindowIndex([5, 2, 4], window=3, stride=1)
        >>> len(index), index.locate(3)
        (5, (2, 0))
    """

    def __init__(self, sequence_lengths: Sequence[int] | np.ndarray, window: int, stride: int = 1) -> None:
        lengths = np.asarray(sequence_lengths, dtype=np.int64)
        if lengths.ndim != 1 or len(lengths) == 0 or lengths.min() < 0:
            raise ValueError("sequence_lengths must be a non-empty list of lengths >= 0")
        if window < 1 or stride < 1:
            raise ValueError(f"window and stride must be >= 1, got {window=}, {stride=}")
        if window > lengths.max():
            raise ValueError(
                f"window={window} is longer than the longest sequence ({int(lengths.max())}); "
                "use a smaller window"
            )
        short = int(np.count_nonzero(lengths < window))
        if short:
            warnings.warn(f"{short} sequence(s) shorter than window={window} give no windows", stacklevel=3)
        self.lengths, self.window, self.stride = lengths, window, stride
        self.per_sequence = np.where(lengths >= window, (lengths - window) // stride + 1, 0)
        self.window_offsets = np.concatenate([[0], np.cumsum(self.per_sequence)]).astype(np.int64)
        self.step_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)

    def __len__(self) -> int:
        return int(self.window_offsets[-1])

    def locate(self, window_index: int) -> tuple[int, int]:
        if not 0 <= window_index < len(self):
            raise IndexError(f"window {window_index} out of range for {len(self)} windows")
        sequence = int(np.searchsorted(self.window_offsets, window_index, side="right")) - 1
        return sequence, int(window_index - self.window_offsets[sequence]) * self.stride


class WindowSampler(KeySampler):
    """Yield window numbers for :class:`WindowDataset`, shuffled per epoch (or in order).

    Example:
        >>> [int(k) for k in WindowSampler([4, 3], window=3, shuffle=False)]
        [0, 1, 2]
    """

    def __init__(
        self,
        sequence_lengths: Sequence[int] | np.ndarray,
        window: int,
        *,
        stride: int = 1,
        shuffle: bool = True,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = False,
    ) -> None:
        super().__init__(seed=seed, rank=rank, world_size=world_size, drop_last=drop_last)
        self.windows = WindowIndex(sequence_lengths, window, stride)
        self.shuffle = shuffle

    def _config(self) -> dict[str, Any]:
        windows = self.windows
        return {
            "sequence_lengths": fingerprint(windows.lengths),
            "window": windows.window,
            "stride": windows.stride,
            "shuffle": self.shuffle,
        }

    def _global_order(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(len(self.windows), dtype=np.int64)
        return epoch_rng(self.seed, epoch).permutation(len(self.windows))


class WindowDataset(Dataset[dict[str, Any]]):
    """Windows of consecutive steps, assembled here (not in collate).

    ``steps`` holds every step of every sequence back to back: an array or tensor (a window is
    a ``(window, ...)`` tensor under ``"window"``), or a map-style dataset of dict steps (a
    window stacks each field over its steps). Samples also carry ``"sequence"``, ``"start"``
    and ``"index"`` (the window number, with the epoch of a :class:`SampleKey`).

    Example:
        >>> import numpy as np
        >>> windows = WindowDataset(np.arange(7.0), [4, 3], window=3)
        >>> windows[2]["window"].tolist(), windows[2]["sequence"]
        ([4.0, 5.0, 6.0], 1)
    """

    def __init__(
        self,
        steps: Dataset[Any] | np.ndarray | torch.Tensor,
        sequence_lengths: Sequence[int] | np.ndarray,
        window: int,
        *,
        stride: int = 1,
    ) -> None:
        self.windows = WindowIndex(sequence_lengths, window, stride)
        total = int(self.windows.step_offsets[-1])
        self.steps = torch.as_tensor(steps) if isinstance(steps, np.ndarray) else steps
        if len(self.steps) != total:  # type: ignore[arg-type]
            raise ValueError(f"steps has {len(self.steps)} entries but sequence_lengths sum to {total}")  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, key: int) -> dict[str, Any]:
        sequence, start = self.windows.locate(int(key))
        first = int(self.windows.step_offsets[sequence]) + start
        stop = first + self.windows.window
        if isinstance(self.steps, torch.Tensor):
            window: Any = self.steps[first:stop]
            sample: dict[str, Any] = {"window": window}
        else:
            epoch = key.epoch if isinstance(key, SampleKey) else None
            parts = [self.steps[SampleKey(i, epoch) if epoch is not None else i] for i in range(first, stop)]
            if not all(isinstance(part, dict) for part in parts):
                raise TypeError("WindowDataset needs dict steps from a dataset (or pass an array)")
            sample = {name: collate_values([p[name] for p in parts], f"window.{name}") for name in parts[0]}
        sample.update({"sequence": sequence, "start": start, "index": key})
        return sample
