"""uint8 batches built on the CPU, pinned, copied without blocking and normalised on the device."""

import tempfile
from collections.abc import Iterable
from typing import Any

import torch
from torch.utils.data import DataLoader

import torchloom as tl
from torchloom.testing import write_class_folders
from torchloom.transforms import Compose, HorizontalFlip, Normalize, RandomResizedCrop

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
pin = device.type == "cuda"  # pin_memory=True without CUDA warns and does nothing
normalize = Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


def train_one_epoch(
    loader: Iterable[dict[str, Any]], model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> dict[str, Any]:
    """One epoch of ``model`` on ``loader``; returns the last batch, as the loader gave it."""
    for batch in loader:
        images = batch["image"].to(device, non_blocking=True)  # uint8: a quarter of float32's bytes
        labels = batch["label"].to(device, non_blocking=True)
        loss = torch.nn.functional.cross_entropy(model(normalize(images)), labels)  # float32 from here
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return batch


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        write_class_folders(root, [32, 32], size=(96, 96), progress=False)
        augment = Compose([RandomResizedCrop(64), HorizontalFlip()])
        dataset = tl.FolderDataset(root, transform=augment, progress=False)
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 2)
        ).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

        workers = DataLoader(
            dataset,
            batch_size=16,
            shuffle=True,
            num_workers=2,
            persistent_workers=True,
            pin_memory=pin,
            collate_fn=tl.collate,
        )
        threads = tl.Loader(dataset, batch_size=16, shuffle=True, num_threads=2, pin_memory=pin)
        for loader in (workers, threads):
            batch = train_one_epoch(loader, model, optimizer)
            print(type(loader).__name__, batch["image"].dtype, batch["image"].is_pinned() == pin)
        # DataLoader torch.uint8 True
        # Loader torch.uint8 True


if __name__ == "__main__":
    main()
