"""Decode once into a cache, then read random crops from it every epoch with the thread Loader."""

import tempfile

import torchloom as tl
from torchloom.testing import write_class_folders
from torchloom.transforms import Compose, HorizontalFlip, RandomResizedCrop


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        write_class_folders(f"{root}/data", [60, 20], size=(96, 96), truncated=1, progress=False)
        augment = Compose([RandomResizedCrop(64), HorizontalFlip()])
        dataset = tl.FolderDataset(f"{root}/data", transform=augment, on_error="skip", progress=False)

        cache = tl.DecodedCache(dataset, f"{root}/cache", progress=False)  # built once, fingerprinted
        loader = tl.Loader(cache, batch_size=16, shuffle=True, num_threads=2)
        for epoch in range(2):
            loader.set_epoch(epoch)  # new crops every epoch, from the decoded pixels
            samples = sum(len(batch["label"]) for batch in loader)
        print(samples, len(cache.report.skipped))  # 80 1: the broken file is left out of the cache

        # The same inputs and settings: opened as it is (rebuild=False would raise if it were stale).
        again = tl.DecodedCache(dataset, f"{root}/cache", rebuild=False, progress=False)
        print(len(again), again[0]["image"].shape)  # 81 torch.Size([3, 64, 64]): the dataset's samples


if __name__ == "__main__":
    main()
