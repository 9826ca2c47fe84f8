"""Augmentation drawn from (seed, epoch, index): the same with 0 or 2 workers, new every epoch."""

import tempfile

import torch
from torch.utils.data import DataLoader

import torchloom as tl
from torchloom.testing import write_class_folders
from torchloom.transforms import Compose, HorizontalFlip, RandomResizedCrop


def images(dataset: tl.FolderDataset, epoch: int, num_workers: int) -> torch.Tensor:
    keys = [tl.SampleKey(index, epoch=epoch) for index in range(len(dataset))]  # any iterable of keys
    loader = DataLoader(dataset, sampler=keys, batch_size=8, num_workers=num_workers, collate_fn=tl.collate)
    return torch.cat([batch["image"] for batch in loader])


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        write_class_folders(root, [8, 8], size=(64, 64), progress=False)
        augment = Compose([RandomResizedCrop(32), HorizontalFlip()])
        dataset = tl.FolderDataset(root, transform=augment, seed=0, progress=False)
        same_for_workers = torch.equal(images(dataset, 3, num_workers=0), images(dataset, 3, num_workers=2))
        new_each_epoch = not torch.equal(images(dataset, 3, num_workers=0), images(dataset, 4, num_workers=0))
        print(same_for_workers, new_each_epoch)  # True True


if __name__ == "__main__":
    main()
