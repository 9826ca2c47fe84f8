"""PyTorch Lightning, 2 CPU processes with DDP, training from torchloom's thread ``Loader``, resumed
from checkpoints.

Lightning takes any iterable with ``state_dict`` / ``load_state_dict`` as a resumable data loader:
it saves the Loader's position in its checkpoints and loads it when ``fit(ckpt_path=...)`` resumes.
It calls ``loader.sampler.set_epoch`` at every epoch. The torchloom sampler, built in the
DataModule's ``__init__`` before the process group exists, gives each rank its share.

Run: ``python examples/lightning_loader.py PHASE OUT`` (Lightning relaunches the script for rank 1);
every rank writes ``OUT/PHASE/rank<r>.json`` with the indices it trained on. Phases: ``full`` (2
epochs), ``first`` (1 epoch, then a checkpoint at its end) and ``resume`` (from that checkpoint to
the end of epoch 2), ``part`` (5 steps, with a checkpoint after them, inside epoch 1) and ``rest``
(from that one to the end of epoch 1).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import lightning.pytorch as pl
from distributed_common import BATCH_SIZE, EPOCHS, LABELS, Keys
from lightning_common import RecordingModel, ddp_trainer

from torchloom import BalancedSampler, Loader

STEPS_BEFORE_STOP = 5
PHASES = {  # phase: (Trainer limits, checkpoint to resume from, checkpoint to save)
    "full": ({"max_epochs": EPOCHS}, None, None),
    "first": ({"max_epochs": 1}, None, "epoch_end.ckpt"),
    "resume": ({"max_epochs": EPOCHS}, "epoch_end.ckpt", None),
    "part": ({"max_steps": STEPS_BEFORE_STOP}, None, "mid_epoch.ckpt"),
    "rest": ({"max_epochs": 1}, "mid_epoch.ckpt", None),
}


class SaveAfterSteps(pl.Callback):
    """Saves a checkpoint inside the epoch, as ``ModelCheckpoint(every_n_train_steps=...)`` does
    (a checkpoint saved after ``fit`` stopped at ``max_steps`` counts the epoch as finished)."""

    def __init__(self, path: str, steps: int) -> None:
        self.path, self.steps = path, steps

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.steps:
            trainer.save_checkpoint(self.path)


class Data(pl.LightningDataModule):
    def __init__(self) -> None:
        super().__init__()
        self.sampler = BalancedSampler(LABELS, seed=0)  # built before DDP starts: resolved later

    def train_dataloader(self) -> Loader:
        return Loader(Keys(), sampler=self.sampler, batch_size=BATCH_SIZE, num_threads=2)


def main() -> None:
    phase, out = sys.argv[1], sys.argv[2]
    limits, resume_from, save_as = PHASES[phase]
    steps = limits.get("max_steps")
    callbacks = [SaveAfterSteps(os.path.join(out, save_as), steps)] if save_as and steps else []
    trainer = ddp_trainer(callbacks=callbacks, **limits)
    ckpt_path = os.path.join(out, resume_from) if resume_from else None
    trainer.fit(RecordingModel(os.path.join(out, phase)), datamodule=Data(), ckpt_path=ckpt_path)
    if save_as and "max_epochs" in limits:
        trainer.save_checkpoint(os.path.join(out, save_as))  # at the end of the last epoch


if __name__ == "__main__":
    main()
