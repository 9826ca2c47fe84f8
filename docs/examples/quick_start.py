"""A class folder with a broken file: skipped and reported, batches normalised on the device."""

import tempfile

import torch
from torch.utils.data import DataLoader

import torchloom as tl
from torchloom.testing import write_class_folders
from torchloom.transforms import Compose, HorizontalFlip, Normalize, RandomResizedCrop


def main() -> None:
    with tempfile.TemporaryDirectory() as root:  # your data: root/<class>/<image>
        write_class_folders(root, [60, 20], size=(96, 96), truncated=1, progress=False)

        augment = Compose([RandomResizedCrop(64), HorizontalFlip()])
        dataset = tl.FolderDataset(root, transform=augment, on_error="skip", progress=False)
        loader = DataLoader(dataset, batch_size=16, shuffle=True, num_workers=2, collate_fn=tl.collate)
        normalize = Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
        device = "cuda" if torch.cuda.is_available() else "cpu"

        report, trained = tl.FaultReport(), 0
        for batch in report.watch(loader):  # records the samples skipped in every worker
            images = normalize(batch["image"].to(device))  # uint8 (B, 3, 64, 64) -> float32
            labels = batch["label"].to(device)
            trained += len(labels)  # your training step
        print(dataset.class_counts, trained, images.dtype)  # {'class_0': 60, 'class_1': 21} 80 torch.float32
        print(report.summary())  # FaultReport: 1 sample(s) skipped ... broken_truncated_0.jpg': DecodeError


if __name__ == "__main__":
    main()
