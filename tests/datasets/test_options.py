"""The options every dataset shares: checked in one place, with one text, before a file is read."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from conftest import write_jpeg
from torchloom import DecodedCache, FolderDataset, ManifestDataset, MixedDataset, TableDataset
from torchloom.datasets import HyperspectralDataset, VideoClipDataset, VolumeDataset, WindowDataset
from torchloom.errors import ConfigError, UsageError
from torchloom.fusion import JoinedDataset, TimeSync
from torchloom.io.cube import ArrayCube

MISSING = "/nonexistent/torchloom-options"
# Every dataset, built from a source that does not exist: an option is refused before it is read.
DATASETS: dict[str, Callable[..., object]] = {
    "FolderDataset": lambda **options: FolderDataset(MISSING, **options),
    "ManifestDataset": lambda **options: ManifestDataset(f"{MISSING}/m.csv", **options),
    "VideoClipDataset": lambda **options: VideoClipDataset(MISSING, frames=2, **options),
    "VolumeDataset": lambda **options: VolumeDataset(MISSING, **options),
    "HyperspectralDataset": lambda **options: HyperspectralDataset(f"{MISSING}/scene.hdr", **options),
}
FILE_DATASETS = ["FolderDataset", "ManifestDataset", "VideoClipDataset", "VolumeDataset"]
PROBED_DATASETS = ["VideoClipDataset", "VolumeDataset"]


def error_text(build: Callable[..., object], **options: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        build(**options)
    return str(caught.value)


@pytest.mark.parametrize(
    ("options", "text"),
    [
        ({"on_error": "ignore"}, "Invalid on_error='ignore'; must be one of ('raise', 'skip', 'retry')"),
        ({"seed": -1}, "seed must be an int >= 0, got seed=-1"),
        ({"seed": 1.5}, "seed must be an int >= 0, got seed=1.5"),
        ({"debug": "yes"}, "debug must be True or False, got debug='yes'"),
    ],
)
def test_every_dataset_refuses_a_bad_sample_option_with_one_text(options: dict[str, Any], text: str) -> None:
    for name, build in DATASETS.items():
        assert error_text(build, **options) == text, name


@pytest.mark.parametrize(
    ("options", "text"),
    [
        ({"num_threads": 0}, "num_threads must be an int >= 1 or None, got num_threads=0"),
        ({"num_threads": "4"}, "num_threads must be an int >= 1 or None, got num_threads='4'"),
        ({"strict": 1}, "strict must be True or False, got strict=1"),
        ({"progress": None}, "progress must be True or False, got progress=None"),
    ],
)
def test_every_file_dataset_refuses_a_bad_indexing_option_with_one_text(
    options: dict[str, Any], text: str
) -> None:
    for name in FILE_DATASETS:
        assert error_text(DATASETS[name], **options) == text, name


def test_validate_is_checked_against_what_each_dataset_offers() -> None:
    for name in ("FolderDataset", "ManifestDataset"):
        assert error_text(DATASETS[name], validate="deep") == (
            "Invalid validate='deep'; must be one of ('none', 'exists', 'header', 'full')"
        ), name
    for name in PROBED_DATASETS:  # they read every header to index the files: no "none" or "exists"
        for mode in ("deep", "none"):
            text = error_text(DATASETS[name], validate=mode)
            assert text == f"Invalid validate={mode!r}; must be one of ('header', 'full')", name


def test_an_unknown_keyword_is_a_type_error_naming_it() -> None:
    for name, build in DATASETS.items():
        with pytest.raises(TypeError, match=rf"^{name}\(\) got an unexpected keyword argument 'workers'"):
            build(workers=2)
    with pytest.raises(UsageError, match=r"'on_eror'; did you mean on_error=\?"):
        FolderDataset(MISSING, on_eror="skip")  # type: ignore[call-arg]
    # A dataset of cubes indexes no files: the indexing options are not among its keywords.
    with pytest.raises(UsageError, match=r"'validate': it takes the sample options .* but not the indexing"):
        HyperspectralDataset(ArrayCube(np.zeros((2, 2, 1))), validate="full")  # type: ignore[call-arg]


def test_a_misspelt_keyword_of_the_dataset_itself_gets_its_hint() -> None:
    with pytest.raises(UsageError, match=r"'exif_orientaton'; did you mean exif_orientation=\?"):
        FolderDataset(MISSING, exif_orientaton=False)  # type: ignore[call-arg]
    with pytest.raises(UsageError, match=r"'frame'; did you mean frames=\?"):
        VideoClipDataset(MISSING, frames=2, frame=3)  # type: ignore[call-arg]


# The datasets made from other datasets or from values in memory: nothing of theirs is decoded or can
# fail per sample, so they take no dataset option; each refusal says where the option goes instead.
COMPOSED: dict[str, Callable[..., object]] = {
    "TableDataset": lambda **options: TableDataset(pa.table({"x": [1, 2]}), **options),
    "MixedDataset": lambda **options: MixedDataset([TableDataset(pa.table({"x": [1]}))], **options),
    "WindowDataset": lambda **options: WindowDataset(np.arange(4.0), [4], window=2, **options),
    "JoinedDataset": lambda **options: JoinedDataset({"a": pa.table({"id": [1]})}, **options),
    "TimeSync": lambda **options: TimeSync({"a": ([0.0], [1.0])}, reference="a", tolerance=0.1, **options),
    "DecodedCache": lambda **options: DecodedCache(None, MISSING, **options),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("name", list(COMPOSED))
@pytest.mark.parametrize("option", ["transform", "on_error", "seed", "debug", "validate", "strict"])
def test_a_composed_dataset_says_why_it_takes_no_dataset_option(name: str, option: str) -> None:
    said = rf"^{name}\(\) got an unexpected keyword argument '{option}': {name} takes no {option}=: "
    with pytest.raises(UsageError, match=said + ".*(give|set|nothing)"):
        COMPOSED[name](**{option: None})


def test_a_composed_dataset_hints_its_own_keywords() -> None:
    with pytest.raises(UsageError, match=r"'colums'; did you mean columns=\?"):
        COMPOSED["TableDataset"](colums=["x"])
    with pytest.raises(UsageError, match=r"'strid'; did you mean stride=\?"):
        COMPOSED["WindowDataset"](strid=2)
    assert len(COMPOSED["TableDataset"](columns=["x"])) == 2  # what it takes still works


def test_the_checked_options_reach_the_dataset(tmp_path: Path) -> None:
    write_jpeg(tmp_path / "cat" / "a.jpg")
    transform = lambda image, rng: image  # noqa: E731 - the smallest transform(image, rng)
    dataset = FolderDataset(tmp_path, transform=transform, on_error="skip", seed=7, progress=False)
    assert dataset.transform is transform and dataset.policy.on_error == "skip" and dataset.seed == 7
    cubes = HyperspectralDataset(ArrayCube(np.zeros((2, 2, 1))), labels=[3], seed=np.int64(5), debug=True)
    assert cubes.seed == 5 and cubes.debug is True and cubes[0]["label"] == 3
