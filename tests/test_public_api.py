"""The public API imports, the README's quick start runs, and the demo reports what it planted."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torchloom
import torchloom.errors
from torchloom.tools.cli import main
from torchloom.tools.demo.run import run_demo

README = Path(__file__).resolve().parents[1] / "README.md"


SUBPACKAGES = (
    "torchloom.io",
    "torchloom.datasets",
    "torchloom.transforms",
    "torchloom.collate",
    "torchloom.samplers",
    "torchloom.fusion",
    "torchloom.streaming",
    "torchloom.cache",
    "torchloom.loader",
    "torchloom.resume",
    "torchloom.errors",
    "torchloom.tools.doctor",
    "torchloom.tools.prepare",
    "torchloom.tools.show",
    "torchloom.tools.bench",
    "torchloom.tools.demo",
)


def test_the_core_api_is_small_and_every_name_imports() -> None:
    assert len(torchloom.__all__) <= 40
    assert len(set(torchloom.__all__)) == len(torchloom.__all__)
    for name in torchloom.__all__:
        assert getattr(torchloom, name) is not None, name


@pytest.mark.parametrize("module_name", SUBPACKAGES)
def test_every_subpackage_name_imports(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert module.__all__, module_name
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{module_name}.{name}"


def test_domain_names_live_in_their_subpackages_not_the_core() -> None:
    homes = {
        "EnviCube": "torchloom.io",
        "HyperspectralDataset": "torchloom.datasets",
        "VideoClipDataset": "torchloom.datasets",
        "spatial_block_split": "torchloom.datasets",
        "PCA": "torchloom.transforms",
        "TimeSync": "torchloom.fusion",
        "diagnose": "torchloom.tools.doctor",
    }
    for name, home in homes.items():
        assert name not in torchloom.__all__
        assert name in importlib.import_module(home).__all__


def _package_modules() -> list[str]:
    return [info.name for info in pkgutil.walk_packages(torchloom.__path__, "torchloom.")]


def test_every_error_type_is_exported_from_torchloom_errors() -> None:
    defined: set[type[BaseException]] = set()
    for module_name in _package_modules():
        module = importlib.import_module(module_name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, torchloom.TorchloomError):
                defined.add(value)
    exported = {getattr(torchloom.errors, name) for name in torchloom.errors.__all__}
    assert defined <= exported, sorted(error.__name__ for error in defined - exported)
    assert all(error.__module__ == "torchloom.errors" for error in defined)


def test_the_version_is_written_once() -> None:
    assert importlib.metadata.version("torchloom") == torchloom.__version__


def test_readme_examples_run(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's one example; the guides' examples are run by tests/test_docs.py."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 1
    namespace: dict[str, object] = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    printed = capsys.readouterr().out
    assert "{'class_0': 60, 'class_1': 21}" in printed
    assert "1 sample(s) skipped" in printed and "broken_truncated_0.jpg" in printed
    assert namespace["images"].dtype == torch.float32  # type: ignore[attr-defined]


def test_demo_finds_what_it_planted_splits_without_leaks_and_trains(tmp_path: Path) -> None:
    result = run_demo(
        counts=(40, 20, 8),
        image_size=64,
        crop_size=48,
        batch_size=16,
        num_workers=2,
        out=tmp_path,
        quiet=True,
    )
    assert result.leaks_found_before == result.leaks_planted == 2
    assert result.broken_found == result.broken_planted == 3
    assert result.leaks_found_after == 0
    train = sum(result.split_counts["train"].values())
    assert sum(result.split_counts["val"].values()) + train == 68 + 2  # the images and 2 planted copies
    assert result.samples_trained == train and not result.skipped  # prepare kept broken files out
    assert 0 <= result.wait_share <= 1 and result.final_loss == result.final_loss
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert report["leaks_found_before"] == 2 and report["samples_trained"] == train
    for name in ("first-batch.png", "doctor-given/classes.png", "doctor-prepared/report.json"):
        assert (tmp_path / name).stat().st_size > 0


def test_demo_command_writes_its_report(tmp_path: Path) -> None:
    out = tmp_path / "report"
    completed = subprocess.run(
        [sys.executable, "-m", "torchloom", "demo", "--images", "80", "--workers", "0", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert "LEAK" in completed.stdout and (out / "report.json").exists()


def test_cli_rejects_too_few_images(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--images", "1"])
    assert exit_info.value.code == 2 and "--images must be at least 8" in capsys.readouterr().err
