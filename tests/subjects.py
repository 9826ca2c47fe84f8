"""The resumable things the seam suites share: samplers by name, a dataset echoing its keys, shards."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from resume import Subject
from torchloom import BalancedSampler, MixtureSampler, WeightedSampler
from torchloom.samplers import KeySampler, WindowSampler

LABELS = np.array([0] * 30 + [1] * 8 + [2] * 3)


class KeyEcho(Dataset[dict[str, Any]]):
    """Returns the key it was given, so tests see exactly what the sampler sent."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: int) -> dict[str, Any]:
        return {"index": int(key), "epoch": getattr(key, "epoch", -1)}


SAMPLERS: dict[str, Callable[[], KeySampler]] = {
    "balanced": lambda: BalancedSampler(LABELS, seed=3),
    "balanced_sqrt": lambda: BalancedSampler(LABELS, mode="sqrt", num_samples=50, seed=3),
    "weighted": lambda: WeightedSampler(np.linspace(0.1, 2, 41), num_samples=37, seed=3),
    "weighted_no_replacement": lambda: WeightedSampler(
        np.linspace(0.1, 2, 41), num_samples=30, replacement=False, seed=3
    ),
    "mixture": lambda: MixtureSampler([20, 10, 11], [0.5, 0.3, 0.2], seed=3),
    "mixture_batches": lambda: MixtureSampler(
        [20, 10, 11], [0.5, 0.3, 0.2], batch_size=5, stop="all_exhausted", seed=3
    ),
    "window": lambda: WindowSampler([10, 15, 16], window=4, stride=2, seed=3),
}


def write_shards(folder: Path, sizes: list[int]) -> list[str]:
    paths, record = [], 0
    for number, size in enumerate(sizes):
        path = folder / f"part-{number}.jsonl"
        path.write_text("".join(json.dumps({"id": record + i}) + "\n" for i in range(size)))
        record += size
        paths.append(str(path))
    return paths


def sampler_subject(name: str) -> Subject:
    def parts(sampler: KeySampler) -> tuple[Any, Any]:
        return KeyEcho(10_000), sampler

    def ids(batch: dict[str, Any]) -> list[tuple[int, int]]:
        return list(zip(batch["index"].tolist(), batch["epoch"].tolist(), strict=True))

    return Subject(name, SAMPLERS[name], parts, ids, finished_epoch_advances=True, main_state_saved=True)
