"""torchvision's ImageFolder, line for line in torchloom."""

import tempfile
from pathlib import Path

import torchloom as tl
from torchloom.testing import write_class_folders

# torchvision:
#     dataset = ImageFolder(root, transform=T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(),
#                                                      T.ToTensor(), T.Normalize(mean, std)]))
#     image, label = dataset[0]                       # a float tensor, normalised, and an int
#     dataset.classes, dataset.class_to_idx, dataset.targets


def compare(root: Path) -> None:
    dataset = tl.FolderDataset(
        root, transform=tl.Compose([tl.RandomResizedCrop(64), tl.HorizontalFlip()]), progress=False
    )
    sample = dataset[0]  # a dict; the image is uint8 CHW: Normalize runs on the batch, on the device
    print(sorted(sample), sample["image"].dtype, tuple(sample["image"].shape))
    # ['image', 'index', 'label', 'path'] torch.uint8 (3, 64, 64)
    print(dataset.classes, dataset.class_to_idx, dataset.targets[:3].tolist(), dataset.class_counts)
    # ['cat', 'dog'] {'cat': 0, 'dog': 1} [0, 0, 0] {'cat': 5, 'dog': 5}
    print("\n".join(dataset.report.summary()))  # what was left out, and why
    # left out: 2 ignored file(s) ... metadata folder of an OS or an archiver ... extension not in extensions


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        write_class_folders(root, [5, 5], size=(80, 80), class_names=["cat", "dog"], progress=False)
        (root / "__MACOSX" / "cat").mkdir(parents=True)  # left by unzipping a macOS archive
        (root / "__MACOSX" / "cat" / "._cat_0.jpg").write_bytes(b"\0" * 64)  # ImageFolder: class 0
        (root / "cat" / "notes.txt").write_text("not an image")
        compare(root)


if __name__ == "__main__":
    main()
