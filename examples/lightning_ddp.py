"""PyTorch Lightning, 2 CPU processes with DDP and Lightning's defaults, a torchloom sampler built
in the DataModule's ``__init__`` (before the process group exists).

Lightning leaves torchloom samplers alone (they are DistributedSampler instances, so its
``use_distributed_sampler=True`` default does not wrap them in a second split), and the sampler
resolves rank and world size when the epoch starts: each rank trains on its share exactly once.

Run: ``python examples/lightning_ddp.py OUT`` (Lightning relaunches the script for rank 1);
every rank writes ``OUT/rank<r>.json`` with the indices it trained on.
"""

from __future__ import annotations

import sys
from typing import Any

import lightning.pytorch as pl
from distributed_common import BATCH_SIZE, EPOCHS, LABELS, Keys, output_folder
from lightning_common import RecordingModel, ddp_trainer
from torch.utils.data import DataLoader

from torchloom import BalancedSampler


class Data(pl.LightningDataModule):
    def __init__(self) -> None:
        super().__init__()
        self.sampler = BalancedSampler(LABELS, seed=0)  # built before DDP starts: resolved later

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(Keys(), sampler=self.sampler, batch_size=BATCH_SIZE, num_workers=1)


def main() -> None:
    folder = output_folder(sys.argv)
    trainer = ddp_trainer(max_epochs=EPOCHS)
    trainer.fit(RecordingModel(folder), datamodule=Data())


if __name__ == "__main__":
    main()
