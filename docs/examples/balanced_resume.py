"""Class-balanced sampling, a checkpoint in the middle of an epoch and an exact resume from it."""

import tempfile

from torchdata.stateful_dataloader import StatefulDataLoader

import torchloom as tl
from torchloom.testing import write_class_folders


def loader_for(dataset: tl.FolderDataset) -> StatefulDataLoader:
    sampler = tl.BalancedSampler(dataset.targets, mode="inverse", seed=0)  # ranks: torch.distributed
    return StatefulDataLoader(dataset, sampler=sampler, batch_size=16, num_workers=2, collate_fn=tl.collate)


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        write_class_folders(root, [60, 20], size=(64, 64), truncated=1, progress=False)
        dataset = tl.FolderDataset(root, on_error="skip", progress=False)

        loader = loader_for(dataset)
        loader.sampler.set_epoch(0)
        for step, _batch in enumerate(loader):
            if step == 2:
                checkpoint = loader.state_dict()  # save it with the model
                break

        resumed = loader_for(dataset)  # a new process builds everything again, then loads
        resumed.load_state_dict(checkpoint)
        rest = sum(len(batch["label"]) + len(batch.get("skipped", [])) for batch in resumed)
        print(rest, resumed.sampler.expected_counts())
        # 33 [40.5 40.5]: 81 - 3 batches of 16, none lost or repeated; each class expected 40.5 times


if __name__ == "__main__":
    main()
