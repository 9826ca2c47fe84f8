"""Plain ``torchrun`` with 2 CPU processes (gloo): a torchloom sampler and a StreamDataset with
DataLoader workers, a checkpoint in the middle of epoch 0 and a resume from it.

The sampler is built before ``init_process_group`` and resolves rank and world size when the
epoch starts. Each rank trains on its share of every epoch exactly once, across the resume.

Run: ``torchrun --standalone --nproc-per-node 2 examples/torchrun_ddp.py OUT``; every rank writes
``OUT/rank<r>.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch.distributed as dist
from distributed_common import BATCH_SIZE, EPOCHS, LABELS, Keys, Record, output_folder
from torchdata.stateful_dataloader import StatefulDataLoader

from torchloom import BalancedSampler, StreamDataset

STOP_AT_BATCH = 5  # the "crash" in epoch 0


def loader_for(sampler: BalancedSampler) -> StatefulDataLoader:
    return StatefulDataLoader(Keys(), sampler=sampler, batch_size=BATCH_SIZE, num_workers=2)


def main() -> None:
    folder = output_folder(sys.argv)
    sampler = BalancedSampler(LABELS, seed=0)  # before the process group: resolved at iteration
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    record = Record()

    # Epoch 0, interrupted: keep the loader's state as a checkpoint would.
    loader = loader_for(sampler)
    sampler.set_epoch(0)
    for number, batch in enumerate(loader):
        record.add(batch)
        if number + 1 == STOP_AT_BATCH:
            break
    checkpoint = loader.state_dict()

    # A new process would rebuild everything; so do we, then resume and finish.
    sampler = BalancedSampler(LABELS, seed=0)
    loader = loader_for(sampler)
    loader.load_state_dict(checkpoint)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for batch in loader:
            record.add(batch)

    # A StreamDataset of 6 shards: 2 ranks × 2 workers each read whole shards, every record once.
    shards = []
    for part in range(6):
        path = Path(folder) / f"part-{part}.jsonl"
        if rank == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(json.dumps({"id": part * 10 + i}) + "\n" for i in range(part + 1)))
        shards.append(str(path))
    dist.barrier()
    stream = StreamDataset(shards, shuffle_buffer=4, seed=0)
    stream.set_epoch(0)
    stream_loader = StatefulDataLoader(stream, batch_size=3, num_workers=2)
    records = [int(i) for batch in stream_loader for i in batch["id"]]
    record.write(folder, rank, world, padded=sampler.padded, stream=records)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
