"""Sampler speed: one 10,000,000-index epoch of BalancedSampler and of WeightedSampler against
``torch.utils.data.WeightedRandomSampler`` drawing the same number with the same weights.

An epoch is timed from ``iter(sampler)`` to the last index, in this process, best of 3 rounds.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import WeightedRandomSampler

from torchloom import BalancedSampler, WeightedSampler

INDICES = 10_000_000
ROUNDS = 3


def epoch_seconds(sampler: Iterable[Any]) -> float:
    start = time.perf_counter()
    for _ in sampler:
        pass
    return time.perf_counter() - start


@dataclass
class SamplerResult:
    name: str
    ours_per_second: float
    torch_per_second: float

    @property
    def ratio(self) -> float:
        return self.ours_per_second / self.torch_per_second


def run_samplers(size: int = INDICES) -> list[SamplerResult]:
    rng = np.random.default_rng(0)
    labels = np.minimum(rng.geometric(0.3, size) - 1, 9)  # 10 classes, strongly imbalanced
    counts = np.bincount(labels, minlength=10)
    balanced_weights = torch.from_numpy(1.0 / counts[labels])
    raw_weights = rng.uniform(0.1, 5.0, size)
    results = []
    for name, ours, reference in (
        (
            "BalancedSampler",
            lambda e: BalancedSampler(labels, seed=e),
            lambda e: WeightedRandomSampler(
                balanced_weights, size, generator=torch.Generator().manual_seed(e)
            ),
        ),
        (
            "WeightedSampler",
            lambda e: WeightedSampler(raw_weights, num_samples=size, seed=e),
            lambda e: WeightedRandomSampler(
                torch.from_numpy(raw_weights), size, generator=torch.Generator().manual_seed(e)
            ),
        ),
    ):
        ours_times, torch_times = [], []
        for round_number in range(ROUNDS):
            ours_times.append(epoch_seconds(ours(round_number)))
            torch_times.append(epoch_seconds(reference(round_number)))
        results.append(SamplerResult(name, size / min(ours_times), size / min(torch_times)))
    return results
