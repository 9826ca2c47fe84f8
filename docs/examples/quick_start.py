"""A class folder with a broken file: skipped and reported, batches normalised on the device."""

import tempfile

import torch
from torch.utils.data import DataLoader

import torchloom as tl
from torchloom.testing import write_class_folders


def train(root: str) -> None:
    augment = tl.Compose([tl.RandomResizedCrop(64), tl.HorizontalFlip()])
    dataset = tl.FolderDataset(root, transform=augment, on_error="skip", progress=False)
    sampler = tl.IndexSampler(len(dataset), shuffle=True, seed=0)  # crops drawn from (seed, epoch, index)
    pin = torch.cuda.is_available()  # pinned batches go to the GPU without blocking the loop
    loader = DataLoader(
        dataset, batch_size=16, sampler=sampler, num_workers=2, collate_fn=tl.collate, pin_memory=pin
    )
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    normalize = tl.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))

    report, trained = tl.FaultReport(), 0
    for epoch in range(2):
        sampler.set_epoch(epoch)  # a new order and new crops each epoch, the same for any num_workers
        for batch in report.watch(loader):  # records the samples skipped in every worker
            images = batch["image"].to(device, non_blocking=True)  # uint8 (B, 3, 64, 64)
            labels = batch["label"].to(device, non_blocking=True)
            images = normalize(images)  # float32, normalised on the device
            trained += len(labels)  # your training step
    print(dataset.class_counts, trained, images.dtype)  # {'class_0': 60, 'class_1': 21} 160 torch.float32
    print(report.summary())  # FaultReport: 1 sample(s) skipped ... broken_truncated_0.jpg': DecodeError


def main() -> None:
    with tempfile.TemporaryDirectory() as root:  # your data: root/<class>/<image>
        write_class_folders(root, [60, 20], size=(96, 96), truncated=1, progress=False)
        train(root)


if __name__ == "__main__":  # DataLoader workers import this file again where they are spawned
    main()
