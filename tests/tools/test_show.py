"""``torchloom show``: grids of transformed samples, collated batches with masks, safe transform specs."""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import refuse_listing, write_jpeg
from torchloom.errors import ConfigError
from torchloom.testing import write_class_folders
from torchloom.tools.bench import measure as bench_measure
from torchloom.tools.cli import main
from torchloom.tools.show.command import batch_tiles, open_dataset
from torchloom.tools.show.grid import figure_pixels, grid_shape
from torchloom.tools.show.transform_spec import parse_transform_spec

WHITE = 250


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """Two classes of 48×64 JPEGs plus two 30×90 ones: variable sizes for --batch."""
    root = tmp_path / "data"
    write_class_folders(root, [5, 4], size=(48, 64), class_names=["dent", "ok"], progress=False)
    write_jpeg(root / "ok" / "wide.jpg", height=30, width=90, seed=3)
    write_jpeg(root / "dent" / "wide.jpg", height=30, width=90, seed=4)
    return root


def read_png(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"))


def tile_runs(row: np.ndarray) -> int:
    """Number of non-white horizontal runs in one row of pixels (tiles cut by white gaps)."""
    inked = (row < WHITE).any(axis=1).astype(np.int8)
    return int(np.sum(np.diff(np.concatenate([[0], inked])) == 1))


def test_grid_has_the_layout_and_is_not_blank(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "grid.png"
    spec = "Resize((40, 40)), HorizontalFlip()"
    assert main(["show", str(data), "--n", "6", "--out", str(out), "--transform", spec]) == 0
    pixels = read_png(out)
    assert grid_shape(6) == (2, 3)
    assert (pixels.shape[1], pixels.shape[0]) == figure_pixels(6, legend=False)
    assert pixels.std() > 20
    for center in (0.25, 0.70):  # through the middle of each row of tiles
        assert tile_runs(pixels[int(center * pixels.shape[0])]) == 3
    again = tmp_path / "again.png"
    assert main(["show", str(data), "--n", "6", "--out", str(again), "--transform", spec]) == 0
    assert again.read_bytes() == out.read_bytes()  # same seed, same samples and augmentation


def test_batch_shows_padding_masks(data: Path, tmp_path: Path) -> None:
    dataset = open_dataset(str(data), transform=None, seed=0)
    samples = [dataset[i] for i in range(len(dataset))]
    tiles = batch_tiles(samples, dataset.classes, multiple_of=32)  # type: ignore[arg-type]
    assert all(tile.image.shape == (64, 96, 3) for tile in tiles)
    for sample, tile in zip(samples, tiles, strict=True):
        assert tile.padding is not None
        height, width = sample["image"].shape[1:]  # type: ignore[index]
        assert not tile.padding[:height, :width].any() and tile.padding.sum() == 64 * 96 - height * width
    out = tmp_path / "batch.png"
    assert main(["show", str(data), "--n", "11", "--out", str(out), "--batch", "--multiple-of", "32"]) == 0
    pixels = read_png(out).astype(np.int16)
    assert (pixels.shape[1], pixels.shape[0]) == figure_pixels(11, legend=True)
    red = (pixels[..., 0] > 120) & (pixels[..., 1] < 60) & (pixels[..., 2] < 60)
    assert red.mean() > 0.05  # the hatched padding is visible


def test_manifest_data_and_skipped_samples(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (data / "ok" / "broken.jpg").write_bytes((data / "ok" / "000000.jpg").read_bytes()[:200])
    manifest = data / "manifest.csv"
    manifest.write_text("image,label\nok/000000.jpg,ok\ndent/000001.jpg,dent\nok/broken.jpg,ok\n")
    out = tmp_path / "m.png"
    assert main(["show", str(manifest), "--out", str(out)]) == 1  # the broken file is named, others drawn
    assert "ok/broken.jpg" in capsys.readouterr().err
    assert read_png(out).std() > 20


def test_transform_spec_is_parsed_without_eval() -> None:
    transform = parse_transform_spec("RandomResizedCrop(24, scale=[0.5, 1.0]), CenterCrop((8, 10))")
    assert transform is not None
    assert transform(np.zeros((40, 50, 3), np.uint8), np.random.default_rng(0)).shape == (8, 10, 3)
    assert parse_transform_spec("  ") is None
    refused = {
        "Resize(224), Evil()": "'Evil' is not an allowed transform; allowed: CenterCrop",
        "__import__('os').system('true')": "__import__('os').system",
        "Resize(size=x)": "argument 'x' is not a literal",
        "Resize(2 ** 40)": "argument '2 ** 40' is not a literal",
        "Resize(224": "not a comma-separated list of calls",
        "Resize(-3)": 'part "Resize(-3)": size must be positive',
        "Resize(100000)": "sizes above 4096",
        "Resize": 'part "Resize" is not a call',
    }
    for spec, message in refused.items():
        with pytest.raises(
            ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")
        ):
            parse_transform_spec(spec)


def test_a_long_transform_spec_parses_in_linear_time() -> None:
    """2,000 calls took 9.9 s when each part's text was found from the start of the whole spec."""
    import time

    def seconds_for(parts: int) -> float:
        started = time.perf_counter()
        transform = parse_transform_spec(",".join(["HorizontalFlip(p=0.5)"] * parts))
        assert transform is not None and len(transform.transforms) == parts
        return time.perf_counter() - started

    small = seconds_for(2_000)
    assert small < 1.0, small
    large = seconds_for(8_000)
    assert large < 4 * small + 0.5, (small, large)  # four times the calls, about four times the time


@pytest.mark.parametrize(
    "spec",
    [
        "Resize(" + "-" * 100_000 + "1)",  # the parser's stack: MemoryError
        "Resize(a" + ".b" * 50_000 + ")",  # RecursionError during ast construction
        "Resize(" + "+".join(["1"] * 50_000) + ")",
        "Resize(a" + "[0]" * 50_000 + ")",
        "Resize(" + "not " * 50_000 + "1)",
        "Resize(" + "(1," * 150 + ")" * 150 + ")",
        "Resize(224" + ")" * 3,
    ],
    ids=["unary", "attributes", "sum", "subscripts", "not", "tuples", "unmatched"],
)
def test_a_deeply_nested_transform_spec_is_a_config_error_and_exits_2(
    spec: str, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ConfigError, match="transform spec"):
        parse_transform_spec(spec)
    assert main(["show", str(data), "--out", str(tmp_path / "x.png"), "--transform", spec]) == 2
    assert "ConfigError: transform spec" in capsys.readouterr().err


def test_bad_transform_exits_2_naming_the_part(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x.png"
    spec = "RandomResizedCrop(32),os.system('echo hi')"
    assert main(["show", str(data), "--out", str(out), "--transform", spec]) == 2
    captured = capsys.readouterr()
    assert "os.system('echo hi')" in captured.err and "allowed: CenterCrop" in captured.err
    assert "hi\n" not in captured.out and not out.exists()


def test_missing_matplotlib_gives_the_install_hint(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["show", str(data), "--out", str(tmp_path / "x.png")]) == 1
    err = capsys.readouterr().err
    assert "pip install matplotlib" in err and "pip install -e '.[plot]'" in err


def test_show_cache_and_bench_say_what_was_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An iPhone export: the HEIC and raw photos are not images the dataset reads; say so."""
    root = tmp_path / "data"
    for name in ("IMG_1.JPG", "IMG_2.JPG"):
        write_jpeg(root / "cat" / name)
    for name in ("IMG_3.HEIC", "IMG_4.HEIC", "IMG_5.dng"):
        (root / "cat" / name).write_bytes(b"\x00\x00\x00\x18ftypheic")
    expected = [
        "left out: 3 ignored file(s)",
        "  ignored (3): extension not in extensions: 'cat/IMG_3.HEIC', 'cat/IMG_4.HEIC', 'cat/IMG_5.dng'",
    ]
    assert main(["show", str(root), "--out", str(tmp_path / "grid.png")]) == 0
    assert capsys.readouterr().err.splitlines() == [f"torchloom show: {expected[0]}", expected[1]]
    assert main(["cache", str(root), "--out", str(tmp_path / "cache")]) == 0
    assert capsys.readouterr().err.splitlines()[-2:] == [f"torchloom cache: {expected[0]}", expected[1]]

    def stop(*args: object, **kwargs: object) -> None:
        raise ConfigError("measured nothing")

    monkeypatch.setattr(bench_measure, "tune", stop)
    assert main(["bench", str(root), "--plot", ""]) == 2  # a ConfigError is a usage error
    assert capsys.readouterr().err.splitlines()[-3:] == [  # after the validation's progress bar
        f"torchloom bench: {expected[0]}",
        expected[1],
        "torchloom bench: ConfigError: measured nothing",
    ]


def test_show_draws_names_that_are_not_utf8(tmp_path: Path) -> None:
    root = os.fsencode(tmp_path / "data")
    for seed, name in enumerate([b"cat/1.jpg", b"caf\xe9/img\xff.jpg"]):
        write_jpeg(os.fsdecode(os.path.join(root, name)), seed=seed)
    assert main(["show", os.fsdecode(root), "--out", str(tmp_path / "grid.png")]) == 0
    assert read_png(tmp_path / "grid.png").std() > 5


def test_show_says_the_data_could_not_be_read_not_the_grid(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    refuse_listing(monkeypatch, data)
    assert main(["show", str(data), "--out", str(tmp_path / "grid.png")]) == 1
    error = capsys.readouterr().err
    assert error.startswith(
        f"torchloom show: UnreadableFileError: cannot read {str(data)!r}: permission denied"
    )
    assert "--out" not in error


def test_a_manifests_missing_files_are_said_once_on_the_command_line(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command prints what was left out; the dataset's warning would say it a second time."""
    manifest = data / "m.csv"
    manifest.write_text("image,label\nok/wide.jpg,ok\ndent/wide.jpg,dent\nok/gone.jpg,ok\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        status = main(["show", str(manifest), "--out", str(tmp_path / "m.png")])
    err = capsys.readouterr().err
    assert status == 1 and "file does not exist" in err and "MissingFilesWarning" not in err
