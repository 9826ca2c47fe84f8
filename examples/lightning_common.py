"""What the Lightning examples share: a 2-process DDP Trainer on the CPU, and a model that records,
per rank, the samples it trained on."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from distributed_common import Record


class RecordingModel(pl.LightningModule):
    """A linear model whose ranks each write ``<folder>/rank<r>.json`` with the indices they trained on."""

    def __init__(self, folder: str) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 3)
        self.record, self.folder = Record(), folder

    def training_step(self, batch: dict[str, Any], batch_index: int) -> torch.Tensor:
        self.record.add(batch)
        return torch.nn.functional.cross_entropy(self.layer(batch["x"]), batch["label"])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def on_train_end(self) -> None:
        sampler = self.trainer.datamodule.sampler  # type: ignore[attr-defined]
        self.record.write(self.folder, self.global_rank, self.trainer.world_size, padded=sampler.padded)


def ddp_trainer(**options: Any) -> pl.Trainer:
    """A Trainer with 2 CPU processes (DDP, gloo) and nothing but training: no logger, checkpoint
    callback, progress bar or summary; ``options`` (limits, callbacks) are added."""
    return pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **options,
    )
