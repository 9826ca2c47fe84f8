"""WindowSampler: window numbers of a :class:`torchloom.datasets.WindowDataset`, shuffled per epoch
or in order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from torchloom.datasets.window import WindowIndex
from torchloom.resume.state import fingerprint
from torchloom.samplers.base import KeySampler, epoch_rng


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
