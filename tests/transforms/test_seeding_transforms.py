"""Seeding and transforms: per-sample randomness independent of workers, different per epoch."""

from __future__ import annotations

import copy
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from conftest import write_jpeg
from torchloom import FolderDataset, SampleKey, collate, sample_rng
from torchloom._buffers.slots import BatchSlots
from torchloom.errors import ConfigError, TransformError
from torchloom.io.image import decode_image
from torchloom.seeding import sample_rngs
from torchloom.transforms import (
    CenterCrop,
    Compose,
    HorizontalFlip,
    Lambda,
    Normalize,
    RandomResizedCrop,
    Resize,
    ToTensor,
    plan_transform,
    to_chw_tensor,
)
from torchloom.transforms.geometry import Box, dct_denominator_for

AUGMENT = Compose([RandomResizedCrop(32, scale=(0.2, 1.0)), HorizontalFlip()])


def test_sample_key_is_an_int_that_pickles() -> None:
    key = SampleKey(5, epoch=3)
    assert key == 5 and [10, 11, 12, 13, 14, 15][key] == 15
    restored = pickle.loads(pickle.dumps(key))
    assert isinstance(restored, SampleKey) and restored.epoch == 3 and int(restored) == 5
    with pytest.raises(ValueError, match="epoch"):
        SampleKey(1, epoch=-1)


def test_sample_rng_depends_on_seed_epoch_and_index_only() -> None:
    draw = lambda *args: sample_rng(*args).integers(1 << 60)  # noqa: E731
    assert draw(1, 2, 3) == draw(1, 2, 3)
    assert len({draw(1, 2, 3), draw(0, 2, 3), draw(1, 0, 3), draw(1, 2, 0)}) == 4
    with pytest.raises(ValueError, match="non-negative"):
        sample_rng(0, 0, -1)


def _images_by_index(
    dataset: FolderDataset, keys: list[SampleKey], num_workers: int
) -> dict[int, torch.Tensor]:
    loader = DataLoader(dataset, sampler=keys, batch_size=4, num_workers=num_workers, collate_fn=collate)
    out: dict[int, torch.Tensor] = {}
    for batch in loader:
        for index, image in zip(batch["index"].tolist(), batch["image"], strict=True):
            out[index] = image
    return out


def test_augmentation_same_for_any_worker_count_and_differs_between_epochs(clean_folders: Path) -> None:
    dataset = FolderDataset(clean_folders, transform=AUGMENT, seed=7, progress=False)
    order = list(np.random.default_rng(0).permutation(len(dataset)))
    epoch0 = [SampleKey(int(i), epoch=0) for i in order]
    single = _images_by_index(dataset, epoch0, 0)
    multi = _images_by_index(dataset, epoch0, 2)
    assert single.keys() == multi.keys() == set(range(len(dataset)))
    for index in single:
        assert torch.equal(single[index], multi[index])
    epoch1 = _images_by_index(dataset, [SampleKey(int(i), epoch=1) for i in order], 2)
    assert sum(not torch.equal(single[i], epoch1[i]) for i in single) >= len(single) - 1
    reseeded = FolderDataset(clean_folders, transform=AUGMENT, seed=8, progress=False)
    assert not torch.equal(reseeded[SampleKey(0, epoch=0)]["image"], single[0])


def test_plain_integer_sampler_still_works(clean_folders: Path) -> None:
    dataset = FolderDataset(clean_folders, transform=AUGMENT, progress=False)
    torch.manual_seed(0)
    batches = list(DataLoader(dataset, batch_size=8, shuffle=True, num_workers=2, collate_fn=collate))
    assert sum(len(b["label"]) for b in batches) == len(dataset)
    assert batches[0]["image"].shape == (8, 3, 32, 32)
    first = torch.cat([b["image"] for b in DataLoader(dataset, batch_size=16, collate_fn=collate)])
    second = torch.cat([b["image"] for b in DataLoader(dataset, batch_size=16, collate_fn=collate)])
    assert not torch.equal(first, second)


def test_planned_decode_uses_dct_scaling_and_the_same_box(tmp_path: Path) -> None:
    write_jpeg(tmp_path / "only" / "big.jpg", height=600, width=800)
    transform = Compose([RandomResizedCrop(64), HorizontalFlip()])
    dataset = FolderDataset(tmp_path, transform=transform, seed=3, progress=False)
    box = RandomResizedCrop(64).draw_box(600, 800, sample_rng(3, 0, 0))
    denominator = dct_denominator_for(box, (64, 64))
    assert denominator == 4  # the box this seed draws still covers 64 px at 1/4 scale
    plan = plan_transform(transform, 600, 800, sample_rng(3, 0, 0))
    assert plan.min_size == (150, 200)
    decoded = decode_image((tmp_path / "only" / "big.jpg").read_bytes(), "big.jpg", min_size=plan.min_size)
    assert decoded.shape == (150, 200, 3)
    expected = to_chw_tensor(plan.finish(decoded))
    assert torch.equal(dataset[SampleKey(0, epoch=0)]["image"], expected)


def test_planned_and_eager_paths_match_without_scaling() -> None:
    rng_image = np.random.default_rng(0).integers(0, 255, (90, 120, 3), dtype=np.uint8)
    transform = Compose([RandomResizedCrop((40, 50)), HorizontalFlip()])
    for index in range(20):
        plan = plan_transform(transform, 90, 120, sample_rng(0, 0, index))
        assert plan.min_size is not None
        planned = plan.finish(rng_image)
        eager = transform(rng_image, sample_rng(0, 0, index))
        np.testing.assert_array_equal(planned, eager)


def test_random_resized_crop_boxes_stay_inside() -> None:
    crop = RandomResizedCrop(16, scale=(0.05, 1.0), ratio=(0.5, 2.0))
    for index in range(200):
        box = crop.draw_box(30, 300, sample_rng(0, 0, index))
        assert box.top >= 0 and box.top + box.height <= 30 and box.left >= 0 and box.left + box.width <= 300
    fallback = RandomResizedCrop(8, scale=(1.0, 1.0), ratio=(1.0, 1.0)).draw_box(10, 100, sample_rng(0, 0, 0))
    assert fallback == Box(0, 45, 10, 10)
    with pytest.raises(ValueError, match="scale"):
        RandomResizedCrop(8, scale=(0.0, 1.0))


def test_resize_center_crop_flip_to_tensor_normalize() -> None:
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, (100, 200, 3), dtype=np.uint8)
    assert Resize(50)(image, rng).shape == (50, 100, 3)
    assert Resize((20, 30))(image, rng).shape == (20, 30, 3)
    assert Resize(50).plan(1000, 2000, rng).min_size == (125, 250)
    assert CenterCrop((10, 20))(image, rng).shape == (10, 20, 3)
    np.testing.assert_array_equal(CenterCrop((100, 200))(image, rng), image)
    with pytest.raises(TransformError, match="Resize"):
        CenterCrop(150)(image, rng)
    np.testing.assert_array_equal(HorizontalFlip(p=1.0)(image, rng), image[:, ::-1])
    np.testing.assert_array_equal(HorizontalFlip(p=0.0)(image, rng), image)
    tensor = ToTensor()(image[:, ::-1], rng)
    assert tensor.shape == (3, 100, 200) and tensor.dtype == torch.uint8 and tensor.is_contiguous()
    assert torch.equal(tensor[1], torch.from_numpy(image[:, ::-1, 1].copy()))
    batch = torch.stack([tensor, tensor])
    normalized = Normalize((0.5, 0.25, 0.0), (0.5, 0.5, 2.0))(batch)
    expected = (image[:, ::-1, 2].astype(np.float32) / 255.0 - 0.0) / 2.0
    np.testing.assert_allclose(normalized[1, 2].numpy(), expected, rtol=1e-6)
    assert normalized.dtype == torch.float32
    with pytest.raises(ValueError, match="channel"):
        Normalize((0.5,), (0.5,))(batch)
    assert Lambda(lambda x: x + 1)(1, rng) == 2


def test_batch_seeding_equals_sample_rng_bit_for_bit() -> None:
    """Brute force: sample_rngs (the batch's SeedSequences computed as arrays) against numpy's own
    SeedSequence, over one-word, multi-word and huge seeds, epochs and indices."""
    values = [0, 1, 7, 2**31, 2**32 - 1, 2**32, 2**40 + 3, 2**64 - 1, 2**64, 2**70 + 5, 2**400 + 9]
    draw = np.random.default_rng(0)
    for _ in range(400):
        seed, epoch = (int(draw.choice(values)) for _ in range(2))
        indices = [int(draw.choice(values)) for _ in range(int(draw.integers(1, 7)))]
        keys = [SampleKey(index, epoch=epoch) for index in indices]
        batched = [g.integers(2**63, size=3).tolist() for g in sample_rngs(seed, keys)]
        one_by_one = [sample_rng(seed, epoch, index).integers(2**63, size=3).tolist() for index in indices]
        assert batched == one_by_one, (seed, epoch, indices)


def test_normalize_copies_its_statistics_to_a_device_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # A copy from ordinary memory to a GPU waits for the work queued there: once per device, not per batch.
    normalize = Normalize((0.5, 0.25, 0.0), (0.5, 0.5, 2.0))
    copies: list[object] = []
    original = torch.Tensor.to

    def counting_to(self: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        copies.append(args)
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(torch.Tensor, "to", counting_to)
    batch = torch.zeros(2, 3, 4, 4, dtype=torch.uint8)
    first = normalize(batch)
    for _ in range(5):
        assert torch.equal(normalize(batch), first)
    assert len(copies) == 2  # mean and std, at the first batch only


def test_batch_seeded_generators_spawn_and_report_like_sample_rng() -> None:
    batched = sample_rngs(3, [SampleKey(11, epoch=2)])[0]
    reference = sample_rng(3, 2, 11)
    assert batched.bit_generator.seed_seq.entropy == reference.bit_generator.seed_seq.entropy
    assert [child.random() for child in batched.spawn(3)] == [child.random() for child in reference.spawn(3)]
    assert [child.random() for child in batched.spawn(1)] == [child.random() for child in reference.spawn(1)]
    with pytest.raises(ConfigError):
        sample_rngs(-1, [SampleKey(0)])


def test_batch_seeded_generators_pickle_and_deep_copy_like_sample_rng() -> None:
    """A transform may keep, copy or checkpoint its generator: state and seed sequence go with it."""
    batched, reference = sample_rngs(5, [SampleKey(8, epoch=3)])[0], sample_rng(5, 3, 8)
    for generator in (batched, reference):
        generator.random(3)
        generator.spawn(2)
    for copied in (pickle.loads(pickle.dumps(batched)), copy.deepcopy(batched)):
        twin = copy.deepcopy(reference)
        assert copied.random(4).tolist() == twin.random(4).tolist()
        assert copied.spawn(1)[0].random() == twin.spawn(1)[0].random()


def test_a_batch_generator_is_handed_out_once_then_fresh_ones(clean_folders: Path) -> None:
    """A retry (or a second image) asks for the sample's generator again: it must start where the
    first did, not continue the first one's draws."""
    dataset = FolderDataset(clean_folders, transform=AUGMENT, progress=False)
    slots = BatchSlots(2)
    keys = [SampleKey(3, epoch=1), SampleKey(4, epoch=1)]
    slots.generators = dataset.batch_generators(keys)
    first = dataset.rng(keys[1], (slots, 1)).random(4).tolist()
    again = dataset.rng(keys[1], (slots, 1)).random(4).tolist()
    assert first == again == sample_rng(0, 1, 4).random(4).tolist()
    assert dataset.batch_generators([3, SampleKey(4)]) is None  # plain ints draw from torch per sample


def test_retried_sample_gets_the_same_augmentation_as_a_clean_read(clean_folders: Path) -> None:
    """A transient error after the crop was drawn: the retry draws the same crop again."""

    class FailsOnce:
        calls = 0

        def __call__(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
            FailsOnce.calls += 1
            if FailsOnce.calls == 1:
                raise OSError(5, "transient")  # EIO: retried
            return image

    keys = [SampleKey(2, epoch=4), SampleKey(6, epoch=4)]
    flaky = FolderDataset(
        clean_folders, transform=Compose([AUGMENT, FailsOnce()]), on_error="retry", progress=False
    )
    clean = FolderDataset(clean_folders, transform=AUGMENT, progress=False)
    for got, expected in zip(flaky.__getitems__(keys), clean.__getitems__(keys), strict=True):
        assert torch.equal(got["image"], expected["image"])
    assert FailsOnce.calls == 3


def _reference_box(crop: RandomResizedCrop, height: int, width: int, rng: np.random.Generator) -> Box | None:
    """RandomResizedCrop's draws written with rng.uniform, as the first release drew them."""
    log_ratio = (math.log(crop.ratio[0]), math.log(crop.ratio[1]))
    for _ in range(10):
        target_area = height * width * rng.uniform(crop.scale[0], crop.scale[1])
        aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        box_width, box_height = round(math.sqrt(target_area * aspect)), round(math.sqrt(target_area / aspect))
        if 0 < box_width <= width and 0 < box_height <= height:
            top = int(rng.integers(0, height - box_height + 1))
            return Box(top, int(rng.integers(0, width - box_width + 1)), box_height, box_width)
    return None  # the centred fallback


def test_crop_draws_are_those_of_rng_uniform() -> None:
    """The crop box is drawn as low + span * random(): the very boxes rng.uniform gave."""
    for crop in (RandomResizedCrop(224), RandomResizedCrop(32, scale=(0.2, 1.0), ratio=(0.5, 2.0))):
        for seed in range(1500):
            height, width = 64 + seed % 300, 64 + (seed * 7) % 500
            expected = _reference_box(crop, height, width, np.random.default_rng(seed))
            drawn = crop.draw_box(height, width, np.random.default_rng(seed))
            assert expected is None or drawn == expected, (seed, drawn, expected)
