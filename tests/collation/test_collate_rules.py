"""Collate rules: padding exact under random inputs, equal to default_collate where shapes agree."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import default_collate

from torchloom import Collate, PadImages, PadSequences, SampleKey, Skipped, collate
from torchloom.collation import AsList, CropOrPadVolumes, Stack
from torchloom.errors import CollateError

SETTINGS = settings(max_examples=60, deadline=None)

# --- equal shapes: collate == default_collate ------------------------------------------------

leaf_specs = st.sampled_from(["int", "float", "str", "tensor", "array", "bool_tensor"])


@st.composite
def structures(draw: st.DrawFn, depth: int = 0) -> Any:
    """A random nested 'shape' of a sample: leaves are kinds, containers are dicts/tuples/lists."""
    if depth >= 2 or draw(st.booleans()):
        kind = draw(leaf_specs)
        shape = tuple(draw(st.lists(st.integers(1, 3), max_size=3)))
        return ("leaf", kind, shape)
    container = draw(st.sampled_from(["dict", "tuple", "list"]))
    size = draw(st.integers(1, 3))
    return (container, [draw(structures(depth + 1)) for _ in range(size)])


def realise(structure: Any, rng: np.random.Generator) -> Any:
    if structure[0] == "leaf":
        _, kind, shape = structure
        if kind == "int":
            return int(rng.integers(-100, 100))
        if kind == "float":
            return float(rng.normal())
        if kind == "str":
            return "s" + str(rng.integers(100))
        if kind == "tensor":
            return torch.from_numpy(np.asarray(rng.normal(size=shape), dtype=np.float32))
        if kind == "bool_tensor":
            return torch.from_numpy(np.asarray(rng.random(shape) < 0.5))
        return np.asarray(rng.integers(0, 9, size=shape), dtype=np.int32)
    container, children = structure
    values = [realise(child, rng) for child in children]
    if container == "dict":
        return {f"k{i}": value for i, value in enumerate(values)}
    return tuple(values) if container == "tuple" else values


def assert_same(ours: Any, reference: Any) -> None:
    if isinstance(reference, torch.Tensor):
        assert isinstance(ours, torch.Tensor) and ours.dtype == reference.dtype
        assert torch.equal(ours, reference)
    elif isinstance(reference, dict):
        assert list(ours) == list(reference)
        for key in reference:
            assert_same(ours[key], reference[key])
    elif isinstance(reference, (list, tuple)):
        assert len(ours) == len(reference)
        for a, b in zip(ours, reference, strict=True):
            assert_same(a, b)
    else:
        assert ours == reference


@SETTINGS
@given(structure=structures(), batch=st.integers(1, 4), seed=st.integers(0, 10_000))
def test_collate_equals_default_collate_on_equal_shapes(structure: Any, batch: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    samples = [realise(structure, rng) for _ in range(batch)]
    assert_same(collate(samples), default_collate(samples))


# --- padding is exact --------------------------------------------------------------------------


@SETTINGS
@given(
    sizes=st.lists(st.tuples(st.integers(1, 9), st.integers(1, 9)), min_size=1, max_size=5),
    channels=st.integers(1, 3),
    multiple=st.integers(1, 4),
    pad_value=st.integers(0, 255),
)
def test_pad_images_exact(sizes: list[tuple[int, int]], channels: int, multiple: int, pad_value: int) -> None:
    rng = np.random.default_rng(0)
    images = [torch.from_numpy(rng.integers(0, 256, (channels, h, w), dtype=np.uint8)) for h, w in sizes]
    batch = Collate({"image": PadImages(multiple_of=multiple, pad_value=pad_value)})(
        [{"image": i} for i in images]
    )
    out, mask, size = batch["image"], batch["image_mask"], batch["image_size"]
    assert out.shape[2] % multiple == 0 and out.shape[3] % multiple == 0
    assert out.shape[2] == -(-max(h for h, _ in sizes) // multiple) * multiple
    for position, image in enumerate(images):
        h, w = image.shape[1:]
        assert size[position].tolist() == [h, w]
        assert torch.equal(out[position, :, :h, :w], image)
        assert int(mask[position].sum()) == h * w and bool(mask[position, :h, :w].all())
        outside = out[position][:, ~mask[position]]
        assert bool((outside == pad_value).all())


@SETTINGS
@given(
    lengths=st.lists(st.integers(0, 8), min_size=1, max_size=5),
    features=st.sampled_from([(), (2,), (3,)]),
    max_length=st.one_of(st.none(), st.integers(0, 8)),
    truncate=st.sampled_from(["right", "left"]),
    pad_value=st.integers(-5, 5),
    as_list=st.booleans(),
)
def test_pad_sequences_exact(
    lengths: list[int],
    features: tuple[int, ...],
    max_length: int | None,
    truncate: str,
    pad_value: int,
    as_list: bool,
) -> None:
    rng = np.random.default_rng(1)
    sequences = [torch.from_numpy(rng.integers(10, 99, (n, *features))) for n in lengths]
    values: list[Any] = [s.tolist() for s in sequences] if as_list and not features else sequences
    rule = PadSequences(pad_value=pad_value, max_length=max_length, truncate=truncate)  # type: ignore[arg-type]
    batch = Collate({"tokens": rule})([{"tokens": v} for v in values])
    out, mask, length = batch["tokens"], batch["tokens_mask"], batch["tokens_length"]
    for position, sequence in enumerate(sequences):
        kept = (
            sequence
            if max_length is None
            else (
                sequence[:max_length]
                if truncate == "right"
                else sequence[max(0, len(sequence) - max_length) :]
            )
        )
        n = len(kept)
        assert length[position].item() == n
        assert mask[position].tolist() == [True] * n + [False] * (out.shape[1] - n)
        assert torch.equal(out[position, :n], kept)
        assert bool((out[position, n:] == pad_value).all())


def test_crop_or_pad_volumes_is_seeded_by_sample_key() -> None:
    volume = torch.arange(6 * 7 * 8, dtype=torch.float32).reshape(6, 7, 8)
    rule = CropOrPadVolumes((4, 9, 8), seed=3)

    def crop(epoch: int) -> torch.Tensor:
        return Collate({"v": rule})([{"v": volume, "index": SampleKey(5, epoch=epoch)}])["v"][0]

    assert torch.equal(crop(0), crop(0))
    assert any(not torch.equal(crop(0), crop(e)) for e in range(1, 6))
    batch = Collate({"v": rule})([{"v": volume, "index": SampleKey(5, epoch=0)}])
    assert batch["v"].shape == (1, 4, 9, 8) and batch["v_mask"].shape == (1, 4, 9, 8)
    assert batch["v_mask"][0, :, 0].sum() == 0 and batch["v_mask"][0, :, 1:8].all()  # padded row 0 and row 8


def test_crop_or_pad_reflect_and_centre() -> None:
    volume = torch.arange(3, dtype=torch.float32).reshape(1, 1, 3)
    rule = CropOrPadVolumes((1, 1, 7), padding="reflect", random=False)
    out = Collate({"v": rule})([{"v": volume}])["v"][0, 0, 0]
    assert out.tolist() == [2.0, 1.0, 0.0, 1.0, 2.0, 1.0, 0.0]
    centre = CropOrPadVolumes((2,), random=False)
    assert Collate({"v": centre})([{"v": torch.arange(6)}])["v"].tolist() == [[2, 3]]


def test_bad_inputs_give_clear_errors() -> None:
    with pytest.raises(CollateError, match="dtype"):
        Collate({"i": PadImages()})(
            [{"i": torch.zeros(3, 2, 2)}, {"i": torch.zeros(3, 2, 2, dtype=torch.uint8)}]
        )
    with pytest.raises(CollateError, match="channel count"):
        Collate({"i": PadImages()})([{"i": torch.zeros(3, 2, 2)}, {"i": torch.zeros(1, 2, 2)}])
    with pytest.raises(CollateError, match=r"\(C, H, W\)"):
        Collate({"i": PadImages()})([{"i": torch.zeros(4, 4)}])
    with pytest.raises(CollateError, match="pad_value"):
        Collate({"i": PadImages(pad_value=300)})([{"i": torch.zeros(3, 2, 2, dtype=torch.uint8)}])
    with pytest.raises(CollateError, match="feature shape"):
        Collate({"s": PadSequences()})([{"s": torch.zeros(2, 3)}, {"s": torch.zeros(2, 4)}])
    with pytest.raises(CollateError, match="scalar"):
        Collate({"s": PadSequences()})([{"s": 5}])
    with pytest.raises(CollateError, match="index"):
        Collate({"v": CropOrPadVolumes((2, 2))})([{"v": torch.zeros(3, 3)}])
    with pytest.raises(CollateError, match="fewer than"):
        Collate({"v": CropOrPadVolumes((2, 2, 2), random=False)})([{"v": torch.zeros(3, 3)}])
    with pytest.raises(CollateError, match="samples lack"):
        Collate({"missing": Stack()})([{"x": 1}])
    with pytest.raises(CollateError, match="already a field"):
        Collate({"i": PadImages()})([{"i": torch.zeros(1, 2, 2), "i_mask": 1}])
    with pytest.raises(ValueError, match="truncate"):
        PadSequences(truncate="middle")  # type: ignore[arg-type]


def test_empty_sequences_and_small_volumes_are_documented_behaviour() -> None:
    batch = Collate({"s": PadSequences()})([{"s": []}, {"s": []}])
    assert batch["s"].shape == (2, 0) and batch["s_length"].tolist() == [0, 0]
    mixed = Collate({"s": PadSequences()})([{"s": []}, {"s": [4, 5]}])
    assert mixed["s"].tolist() == [[0, 0], [4, 5]] and mixed["s"].dtype == torch.int64
    small = Collate({"v": CropOrPadVolumes((4, 4), random=False, pad_value=-1)})([{"v": torch.ones(2, 2)}])
    assert small["v"][0].tolist() == [[-1, -1, -1, -1], [-1, 1, 1, -1], [-1, 1, 1, -1], [-1, -1, -1, -1]]


def test_max_size_shrinks_only_when_asked_and_aslist_stack_skipped() -> None:
    big = torch.full((3, 40, 20), 200, dtype=torch.uint8)
    batch = Collate({"i": PadImages(max_size=(10, 10))})(
        [{"i": big}, {"i": torch.zeros(3, 4, 4, dtype=torch.uint8)}]
    )
    assert batch["i"].shape == (2, 3, 10, 5) and batch["i_size"].tolist() == [[40, 20], [4, 4]]
    assert int(batch["i"][0].min()) == 200  # shrunk (antialiased), not cropped
    marker = Skipped(7, "x.jpg", "DecodeError", "truncated")
    out = Collate({"p": AsList(), "x": Stack()})(
        [{"p": "a", "x": torch.zeros(2)}, marker, {"p": "b", "x": torch.ones(2)}]
    )
    assert out["p"] == ["a", "b"] and out["x"].shape == (2, 2) and out["skipped"] == [marker]
    assert Collate()([marker]) == {"skipped": [marker]}
