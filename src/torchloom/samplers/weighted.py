"""WeightedSampler: a distributed, resumable WeightedRandomSampler, with or without replacement."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from torchloom.errors import ConfigError
from torchloom.resume.state import fingerprint
from torchloom.samplers.base import KeySampler, epoch_rng


class WeightedSampler(KeySampler):
    """Draw ``num_samples`` indices with probability proportional to ``weights``.

    With replacement, index ``i`` is expected ``num_samples * w_i / sum(w)`` times per epoch.
    Without replacement (``replacement=False``), the draw is successive weighted sampling
    (Efraimidis–Spirakis keys), so ``num_samples`` may not exceed the number of non-zero weights.
    One global draw from ``(seed, epoch)``; each rank takes its stride.

    Example:
        >>> sampler = WeightedSampler([0.0, 1.0, 3.0], num_samples=4, seed=0)
        >>> sorted(int(key) for key in sampler)
        [2, 2, 2, 2]
    """

    def __init__(
        self,
        weights: Sequence[float] | np.ndarray,
        *,
        num_samples: int,
        replacement: bool = True,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = False,
    ) -> None:
        super().__init__(seed=seed, rank=rank, world_size=world_size, drop_last=drop_last)
        self.weights = np.asarray(weights, dtype=np.float64)
        if self.weights.ndim != 1 or len(self.weights) == 0:
            raise ConfigError("WeightedSampler needs a non-empty 1-D sequence of weights")
        if not np.all(np.isfinite(self.weights)) or self.weights.min() < 0:
            raise ConfigError("weights must be finite and >= 0")
        with np.errstate(over="ignore"):
            total = self.weights.sum()
        if not np.isfinite(total):
            raise ConfigError(
                f"weights sum to {total} (they overflow float64; the largest is {self.weights.max():.3g}); "
                "rescale them, e.g. weights / weights.max()"
            )
        if total <= 0:
            raise ConfigError("weights sum to 0: nothing can be drawn")
        if num_samples <= 0:
            raise ConfigError(f"num_samples must be positive, got {num_samples}")
        nonzero = int(np.count_nonzero(self.weights))
        if not replacement and num_samples > nonzero:
            raise ConfigError(
                f"num_samples={num_samples} without replacement, but only {nonzero} weights are non-zero"
            )
        self.num_samples = int(num_samples)
        self.replacement = replacement
        self._probabilities = self.weights / total

    def _config(self) -> dict[str, Any]:
        return {
            "weights": fingerprint(self.weights),
            "num_samples": self.num_samples,
            "replacement": self.replacement,
        }

    def _global_order(self, epoch: int) -> np.ndarray:
        rng = epoch_rng(self.seed, epoch)
        if self.replacement:
            # i.i.d. draws = multinomial counts in a random order: O(n) and cache-friendly, unlike
            # a binary search per draw.
            counts = rng.multinomial(self.num_samples, self._probabilities)
            return rng.permutation(np.repeat(np.arange(len(self.weights), dtype=np.int64), counts))
        with np.errstate(divide="ignore"):
            keys = np.log(rng.random(len(self.weights))) / self.weights  # -inf for zero weights
        chosen = np.argpartition(-keys, self.num_samples - 1)[: self.num_samples]
        return chosen[np.argsort(-keys[chosen], kind="stable")]
