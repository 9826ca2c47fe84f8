"""Certify a pipeline before a long run: interrupt it at every seam and resume it, on 1 and 2 ranks."""

from typing import Any

from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from torchloom import BalancedSampler, check_resume

LABELS = [0] * 700 + [1] * 250 + [2] * 50


class Records(Dataset[dict[str, Any]]):
    """Stands for your dataset: like every torchloom dataset, each sample carries its "index"."""

    def __len__(self) -> int:
        return len(LABELS)

    def __getitem__(self, key: int) -> dict[str, Any]:
        return {"index": int(key), "label": LABELS[key]}


def make_loader(rank: int, world_size: int, num_workers: int) -> StatefulDataLoader:
    """One rank's loader, as the training script builds it (rank and world_size passed on)."""
    sampler = BalancedSampler(LABELS, seed=0, rank=rank, world_size=world_size)
    return StatefulDataLoader(Records(), sampler=sampler, batch_size=32, num_workers=num_workers)


def main() -> None:
    report = check_resume(make_loader, world_sizes=(1, 2))
    print(report.ok, len(report.cases))
    # True 21: every epoch of every interrupted and resumed run was the reference, exactly once
    print(report.summary().splitlines()[0])


if __name__ == "__main__":
    main()
