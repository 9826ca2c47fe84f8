"""A transform is ``transform(image, rng)``: the rng is the sample's own, drawn from (seed, epoch, index)."""

import numpy as np

import torchloom as tl
from torchloom.transforms import plan_transform


def main() -> None:
    augment = tl.Compose([tl.RandomResizedCrop(64), tl.HorizontalFlip()])
    image = np.random.default_rng(0).integers(0, 256, (480, 640, 3), dtype=np.uint8)  # HWC uint8

    # A dataset calls augment(image, tl.sample_rng(seed, epoch, index)): the same sample in the same
    # epoch gets the same crop in any worker, another epoch another crop.
    first = augment(image, tl.sample_rng(0, 0, 7))
    again = augment(image, tl.sample_rng(0, 0, 7))
    next_epoch = augment(image, tl.sample_rng(0, 1, 7))
    same, changed = np.array_equal(first, again), not np.array_equal(first, next_epoch)
    print(first.shape, same, changed)  # (64, 64, 3) True True

    # Planning: the crop box is drawn from the header's size before decoding, so a JPEG of 1080p
    # whose crop is shrunk to 64 px is decoded at 1/2, 1/4 or 1/8 scale (DCT scaling).
    plan = plan_transform(augment, 1080, 1920, tl.sample_rng(0, 0, 7))
    print(plan.min_size)  # (135, 240): this JPEG would be decoded at 1/8 scale, then cropped


if __name__ == "__main__":
    main()
