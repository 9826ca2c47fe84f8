"""Train and validation pipelines over a split root: augment the train split only."""

import tempfile
from pathlib import Path

import torch
from torch.utils.data import DataLoader

import torchloom as tl
from torchloom.testing import write_class_folders


def evaluate(root: str) -> None:
    train = tl.FolderDataset(
        root, split="train", progress=False,
        transform=tl.Compose([tl.RandomResizedCrop(64), tl.HorizontalFlip()]),
    )
    # Validation: the same size, no randomness: shorter side to 73 (64 / 0.875), then the centre.
    val = tl.FolderDataset(
        root, split="val", progress=False, transform=tl.Compose([tl.Resize(73), tl.CenterCrop(64)])
    )
    print(train.classes == val.classes, train.class_to_idx)  # True {'cat': 0, 'dog': 1}

    loader = DataLoader(val, batch_size=8, shuffle=False, num_workers=2, collate_fn=tl.collate)
    normalize = tl.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    seen, passes = 0, []
    for _ in range(2):
        pixels = []
        for batch in loader:
            images = normalize(batch["image"].to(device, non_blocking=True))
            pixels.append(images.sum().item())  # your model, under torch.no_grad()
            seen += len(images)
        passes.append(pixels)
    print(seen, passes[0] == passes[1])  # 24 True: two passes over val see the very same pixels


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        root, classes = Path(folder), ["cat", "dog"]  # your data: root/{train,val}/<class>/<image>
        write_class_folders(root / "train", [20, 20], size=(96, 128), class_names=classes, progress=False)
        write_class_folders(root / "val", [6, 6], size=(96, 128), class_names=classes, seed=1, progress=False)
        evaluate(str(root))


if __name__ == "__main__":
    main()
