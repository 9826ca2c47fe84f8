"""What the distributed examples share: a dataset that reports the keys it serves, and a record of
what each rank trained on (written as JSON so a test can check that every rank got its share once).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

# 90 samples of 3 classes, imbalanced 60/20/10: what BalancedSampler is for.
LABELS = np.repeat([0, 1, 2], [60, 20, 10])
EPOCHS = 2
BATCH_SIZE = 4


class Keys(Dataset[dict[str, Any]]):
    """A stand-in for a real dataset: each sample is its index, the epoch its key carries, and a feature."""

    def __len__(self) -> int:
        return len(LABELS)

    def __getitem__(self, key: int) -> dict[str, Any]:
        return {
            "index": int(key),
            "epoch": getattr(key, "epoch", -1),
            "x": torch.full((4,), float(LABELS[int(key)])),
            "label": int(LABELS[int(key)]),
        }


class Record:
    """The indices one rank saw, per epoch."""

    def __init__(self) -> None:
        self.seen: dict[int, list[int]] = {}

    def add(self, batch: dict[str, Any]) -> None:
        for index, epoch in zip(batch["index"].tolist(), batch["epoch"].tolist(), strict=True):
            self.seen.setdefault(int(epoch), []).append(int(index))

    def write(self, folder: str, rank: int, world_size: int, **extra: Any) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        out = {"rank": rank, "world_size": world_size, "seen": self.seen, **extra}
        (Path(folder) / f"rank{rank}.json").write_text(json.dumps(out))


def output_folder(argv: list[str]) -> str:
    return argv[1] if len(argv) > 1 else os.path.join(os.getcwd(), "distributed-out")
