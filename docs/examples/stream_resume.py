"""A stream of JSONL shards split across DataLoader workers, resumed in the middle of an epoch."""

import json
import tempfile

from torchdata.stateful_dataloader import StatefulDataLoader

import torchloom as tl


def loader_for(shards: list[str]) -> StatefulDataLoader:
    stream = tl.StreamDataset(shards, shuffle_buffer=16, seed=0)  # each shard to one consumer
    return StatefulDataLoader(stream, batch_size=5, num_workers=2, collate_fn=tl.collate)


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        shards = [f"{root}/part-{part}.jsonl" for part in range(4)]
        for part, shard in enumerate(shards):
            with open(shard, "w", encoding="utf-8") as handle:
                handle.writelines(json.dumps({"id": part * 10 + row}) + "\n" for row in range(10))

        loader = loader_for(shards)
        seen = []
        for step, batch in enumerate(loader):
            seen += batch["id"].tolist()
            if step == 2:
                checkpoint = loader.state_dict()
                break
        resumed = loader_for(shards)
        resumed.load_state_dict(checkpoint)
        seen += [record for batch in resumed for record in batch["id"].tolist()]
        print(len(seen), sorted(seen) == list(range(40)))  # 40 True: every record once across the resume


if __name__ == "__main__":
    main()
