"""MixtureSampler: the sources of a :class:`torchloom.MixedDataset` mixed at set ratios, exactly per batch."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from torchloom.errors import ConfigError
from torchloom.resume.state import fingerprint
from torchloom.samplers.base import KeySampler, epoch_rng

Stop = Literal["first_exhausted", "all_exhausted"] | int


def batch_composition(batch_size: int, weights: Sequence[float] | np.ndarray) -> np.ndarray:
    """Samples of each source in a batch, by largest-remainder rounding.

    Quotas are computed exactly (weights as fractions), and a tie between remainders goes to the
    source with the smaller quota, which keeps the largest relative error of any source smallest.

    Example:
        >>> batch_composition(32, (0.7, 0.2, 0.1)).tolist()
        [22, 7, 3]
    """
    exact = [Fraction(float(w)).limit_denominator(10**9) for w in weights]
    total = sum(exact)
    quotas = [w / total * batch_size for w in exact]
    counts = [math.floor(q) for q in quotas]
    ranked = sorted(range(len(quotas)), key=lambda s: (-(quotas[s] - counts[s]), quotas[s], s))
    for source in ranked[: batch_size - sum(counts)]:
        counts[source] += 1
    return np.asarray(counts, dtype=np.int64)


class MixtureSampler(KeySampler):
    """Mix the sources of a :class:`MixedDataset` by ``weights``.

    Without ``batch_size``, each draw picks a source with probability ``weights / sum``. With
    ``batch_size``, every batch holds exactly :func:`batch_composition` samples of each source
    (32 × (0.7, 0.2, 0.1) gives 22/7/3), shuffled within the batch; the order comes in whole
    batches, and ranks take whole batches. Within a source, samples follow a fresh permutation
    each epoch, without repetition until the source is exhausted.

    ``stop``: ``"first_exhausted"`` ends the epoch when a source runs out (no sample repeats);
    ``"all_exhausted"`` restarts exhausted sources (new permutation) until every source has been
    seen whole; an ``int`` fixes the number of samples per epoch (rounded down to whole batches).

    Example:
        >>> sampler = MixtureSampler([6, 3], [2, 1], batch_size=3, seed=0)
        >>> len(sampler), [int(key) >= 6 for key in sampler].count(True)
        (9, 3)
    """

    def __init__(
        self,
        sizes: Sequence[int],
        weights: Sequence[float],
        *,
        stop: Stop = "first_exhausted",
        batch_size: int | None = None,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = False,
    ) -> None:
        if len(sizes) != len(weights) or not sizes:
            raise ConfigError(
                f"need one weight per source, got {len(sizes)} sizes and {len(weights)} weights"
            )
        if any(size <= 0 for size in sizes):
            raise ConfigError(f"every source needs samples, got sizes {list(sizes)}")
        if any(w < 0 or not math.isfinite(w) for w in weights) or sum(weights) <= 0:
            raise ConfigError(f"weights must be finite, >= 0 and not all 0, got {list(weights)}")
        if not math.isfinite(sum(weights)):
            raise ConfigError(f"weights {list(weights)} overflow when summed; rescale them (ratios matter)")
        if not (stop in ("first_exhausted", "all_exhausted") or (isinstance(stop, int) and stop > 0)):
            raise ConfigError(
                f"Invalid stop={stop!r}; use 'first_exhausted', 'all_exhausted' or a positive int"
            )
        super().__init__(
            seed=seed, rank=rank, world_size=world_size, drop_last=drop_last, unit=batch_size or 1
        )
        self.sizes = [int(size) for size in sizes]
        self.weights = np.asarray(weights, dtype=np.float64) / float(sum(weights))
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        self.stop = stop
        self.batch_size = batch_size
        self.composition = batch_composition(batch_size, self.weights) if batch_size else None
        if self.composition is not None and stop == "first_exhausted":
            short = [s for s, need in enumerate(self.composition) if self.sizes[s] < need]
            if short:
                raise ConfigError(
                    f"source(s) {short} hold fewer samples than their share of one batch "
                    f"({self.composition.tolist()}), so no full batch exists; use stop='all_exhausted' "
                    "or a smaller batch_size"
                )

    def _config(self) -> dict[str, Any]:
        return {
            "sizes": list(self.sizes),
            "weights": fingerprint(self.weights),
            "stop": self.stop,
            "batch_size": self.batch_size,
        }

    def _global_order(self, epoch: int) -> np.ndarray:
        rng = epoch_rng(self.seed, epoch)
        sources = self._source_sequence(rng)
        return self._fill(sources, rng)

    def _source_sequence(self, rng: np.random.Generator) -> np.ndarray:
        """Which source each position of the epoch draws from, before stopping."""
        active = np.flatnonzero(self.weights > 0)
        if self.composition is not None:
            per_batch = self.composition
            if isinstance(self.stop, int):
                batches = self.stop // int(self.unit)
            elif self.stop == "first_exhausted":
                batches = min(self.sizes[s] // per_batch[s] for s in active if per_batch[s] > 0)
            else:
                batches = max(math.ceil(self.sizes[s] / per_batch[s]) for s in active if per_batch[s] > 0)
            base = np.repeat(np.arange(len(self.sizes)), per_batch)
            blocks = np.tile(base, (batches, 1))
            blocks = rng.permuted(blocks, axis=1)
            return blocks.reshape(-1)
        if isinstance(self.stop, int):
            return rng.choice(len(self.sizes), size=self.stop, p=self.weights)
        # Draw until the stop rule is met: the draw count needed is found from cumulative counts.
        expected = max(self.sizes[s] / self.weights[s] for s in active)
        chunk = int(expected * 1.5) + 64
        draws = rng.choice(len(self.sizes), size=chunk, p=self.weights)
        while True:
            counts = np.stack([np.cumsum(draws == s) for s in range(len(self.sizes))])
            if self.stop == "first_exhausted":
                hit = np.flatnonzero((counts > np.asarray(self.sizes)[:, None]).any(axis=0))
                if len(hit):
                    return draws[: hit[0]]
            else:
                done = np.flatnonzero((counts[active] >= np.asarray(self.sizes)[active, None]).all(axis=0))
                if len(done):
                    return draws[: done[0] + 1]
            draws = np.concatenate([draws, rng.choice(len(self.sizes), size=chunk, p=self.weights)])

    def _fill(self, sources: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Global indices for a source sequence: each source walks its own permutations."""
        order = np.empty(len(sources), dtype=np.int64)
        for source, size in enumerate(self.sizes):
            positions = np.flatnonzero(sources == source)
            if not len(positions):
                continue
            cycles = math.ceil(len(positions) / size)
            local = np.concatenate([rng.permutation(size) for _ in range(cycles)])[: len(positions)]
            order[positions] = self.offsets[source] + local
        return order
