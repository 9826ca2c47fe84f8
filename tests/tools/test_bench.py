"""``torchloom bench``: a folder of mixed sizes is measured padded (or through --transform), and a bad
option is a usage error (exit 2), never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from torchloom.tools.cli import main


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    """Two classes of PNGs of eight different sizes, as photos from several cameras are."""
    root = tmp_path / "mixed"
    for index in range(8):
        folder = root / ("cat" if index % 2 else "dog")
        folder.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (20 + 7 * index, 30 + 3 * index), (index * 30, 90, 10)).save(folder / f"{index}.png")
    return root


def bench(data: Path, *options: str) -> list[str]:
    return ["bench", str(data), "--batch-size", "4", "--plot", "", "--json", *options]


def test_a_folder_of_mixed_sizes_is_measured_padded(
    mixed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It failed with a CollateError whose fix (Collate({'image': PadImages()})) was Python-only."""
    assert main(bench(mixed, "--budget", "2")) == 0
    report = json.loads(capsys.readouterr().out)
    assert any(trial["status"] == "measured" and trial["samples_per_s"] > 0 for trial in report["trials"])


def test_a_transform_gives_the_images_the_size_training_uses(
    mixed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(bench(mixed, "--budget", "2", "--transform", "Resize((24, 24))")) == 0
    assert json.loads(capsys.readouterr().out)["best"]["batch_size"] == 4
    assert main(bench(mixed, "--transform", "Resize((24, 24)")) == 2
    assert "ConfigError: transform spec" in capsys.readouterr().err


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--budget", "0.3", "at least 1"),
        ("--budget", "nan", "at least 1"),
        ("--budget", "inf", "at least 1"),
        ("--budget", "-1", "at least 1"),
        ("--budget", "soon", "expected a number of seconds"),
        ("--batch-size", "0", "expected a positive integer"),
    ],
)
def test_a_bad_option_is_a_usage_error_not_a_traceback(
    mixed: Path, option: str, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bench", str(mixed), "--plot", "", option, value])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_the_chosen_setting_reports_its_latencies(mixed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Time to the first batch, the resume latency of a resume from mid-pass, p50/p99 of the wait."""
    assert main(bench(mixed, "--budget", "2")) == 0
    latencies = json.loads(capsys.readouterr().out)["latencies"]
    assert latencies["batches"] == 2 and latencies["first_batch_s"] > 0
    assert latencies["resume_s"] is not None and latencies["resume_s"] > 0
    assert 0 <= latencies["wait_p50_ms"] <= latencies["wait_p99_ms"]
    assert main(["bench", str(mixed), "--batch-size", "4", "--plot", "", "--budget", "2"]) == 0
    assert "latencies: first batch" in capsys.readouterr().out
