"""IndexSampler: every index of a dataset once per epoch, shuffled or in order; distributed, resumable."""

from __future__ import annotations

from typing import Any

import numpy as np

from torchloom.errors import ConfigError
from torchloom.samplers.base import KeySampler, epoch_rng


class IndexSampler(KeySampler):
    """``RandomSampler`` / ``SequentialSampler`` with torchloom's guarantees.

    One global order per epoch from ``(seed, epoch)`` (a permutation, or ``0..size-1`` with
    ``shuffle=False``), split across ranks, resumable exactly (see
    :mod:`torchloom.samplers.base`), yielding :class:`torchloom.SampleKey` keys so augmentation
    depends only on ``(seed, epoch, index)``.

    Example:
        >>> [int(key) for key in IndexSampler(4, shuffle=False)]
        [0, 1, 2, 3]
        >>> sorted(int(key) for key in IndexSampler(4, seed=1))
        [0, 1, 2, 3]
    """

    def __init__(
        self,
        size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = False,
    ) -> None:
        super().__init__(seed=seed, rank=rank, world_size=world_size, drop_last=drop_last)
        if int(size) != size or size < 1:
            raise ConfigError(f"IndexSampler needs a positive size, got {size!r}")
        self.size, self.shuffle = int(size), shuffle

    def _config(self) -> dict[str, Any]:
        return {"size": self.size, "shuffle": self.shuffle}

    def _global_order(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.size, dtype=np.int64)
        return epoch_rng(self.seed, epoch).permutation(self.size)
