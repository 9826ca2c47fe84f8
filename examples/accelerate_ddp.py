"""Hugging Face Accelerate under ``torchrun`` with 2 CPU processes, ``accelerator.prepare(loader)``
as the HF Trainer does it.

Accelerate splits the batches of a prepared loader across processes itself (and has no setting to
turn that off); a torchloom sampler sees that wrapper and yields the global order, so each rank
gets its share exactly once instead of half of it.

Run: ``torchrun --standalone --nproc-per-node 2 examples/accelerate_ddp.py OUT``; every rank writes
``OUT/rank<r>.json`` with the indices it trained on.
"""

from __future__ import annotations

import sys

import torch
from accelerate import Accelerator
from distributed_common import BATCH_SIZE, EPOCHS, LABELS, Keys, Record, output_folder
from torch.utils.data import DataLoader

from torchloom import BalancedSampler


def main() -> None:
    folder = output_folder(sys.argv)
    accelerator = Accelerator(cpu=True)
    sampler = BalancedSampler(LABELS, seed=0)
    loader = DataLoader(Keys(), sampler=sampler, batch_size=BATCH_SIZE)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    record = Record()
    for epoch in range(EPOCHS):
        loader.set_epoch(epoch)
        for batch in loader:
            record.add(batch)
            loss = torch.nn.functional.cross_entropy(model(batch["x"]), batch["label"])
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    record.write(folder, accelerator.process_index, accelerator.num_processes)
    # Every rank done before the process group goes: a rank leaving with gloo's group alive aborts
    # (SIGABRT) at interpreter exit when the other rank is still using it.
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()
