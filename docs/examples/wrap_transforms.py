"""Transforms of your own, and transforms of other libraries, kept reproducible."""

import tempfile
from collections.abc import Callable

import numpy as np
import torch

import torchloom as tl
from torchloom.testing import write_class_folders
from torchloom.transforms import Lambda


def brightness(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random transform of your own: it draws from the rng it is given, so it is reproducible."""
    factor = rng.uniform(0.6, 1.4)
    return np.clip(image * factor, 0, 255).astype(np.uint8)


def grayscale(image: np.ndarray) -> np.ndarray:
    """A one-argument, deterministic function (as torchvision's are): wrap it in Lambda."""
    gray = image @ np.array([0.299, 0.587, 0.114])
    return np.repeat(gray[..., None], 3, axis=2).astype(np.uint8)


def seeded_from_rng(
    transform: Callable[[torch.Tensor], torch.Tensor],
) -> Callable[[np.ndarray, np.random.Generator], torch.Tensor]:
    """Run a transform that draws from torch's global generator (a torchvision random transform)
    under a seed drawn from the sample's rng, leaving the global generator as it was."""

    def apply(image: np.ndarray, rng: np.random.Generator) -> torch.Tensor:
        chw = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(rng.integers(2**62)))
            return transform(chw)

    return apply


def random_erase(chw: torch.Tensor) -> torch.Tensor:
    """A stand-in for a torchvision transform: it draws from torch's global generator."""
    out = chw.clone()
    top, left = (int(torch.randint(0, size - 16, ())) for size in chw.shape[1:])
    out[:, top : top + 16, left : left + 16] = 0
    return out


def show(root: str) -> None:
    write_class_folders(root, [8, 8], size=(96, 96), progress=False)
    augment = tl.Compose([
        tl.RandomResizedCrop(64),  # first: the crop plans the decode
        brightness,
        Lambda(grayscale),
        seeded_from_rng(random_erase),  # last: it returns a CHW tensor, torchloom's take HWC arrays
    ])
    dataset = tl.FolderDataset(root, transform=augment, seed=0, progress=False)
    key = tl.SampleKey(3, epoch=0)
    same = torch.equal(dataset[key]["image"], dataset[key]["image"])
    other_epoch = torch.equal(dataset[key]["image"], dataset[tl.SampleKey(3, epoch=1)]["image"])
    print(dataset[key]["image"].shape, same, other_epoch)  # torch.Size([3, 64, 64]) True False

    # The same wrapper for torchvision, where it is installed:
    #     import torchvision.transforms.v2 as T
    #     augment = tl.Compose([tl.RandomResizedCrop(64), seeded_from_rng(T.ColorJitter(0.4, 0.4, 0.4))])
    # Without it, T.ColorJitter draws from the worker's torch generator: a new jitter per call,
    # not the same for the same (seed, epoch, index) with another number of workers or after a resume.


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        show(root)


if __name__ == "__main__":
    main()
