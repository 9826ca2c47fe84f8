"""The public API imports, the README's quick start runs, and the demo reports what it planted."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import torchloom
from torchloom.cli import main
from torchloom.demo import run_demo

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.parametrize("name", torchloom.__all__)
def test_every_public_name_imports(name: str) -> None:
    module = importlib.import_module("torchloom")
    assert getattr(module, name) is not None


def test_readme_examples_run(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 9
    namespace: dict[str, object] = {}
    for block in blocks:  # one namespace: later blocks use the quick start's names
        exec(compile(block, str(README), "exec"), namespace)
    printed = capsys.readouterr().out
    assert "{'class_0': 60, 'class_1': 21}" in printed
    assert "1 sample(s) skipped" in printed
    assert "0 tensor([3.]) clean part" in printed
    assert (
        "torch.Size([2, 3, 96, 96]) torch.Size([2, 96, 96]) [[17, 4, 9], [0, 0, 0]] [True, False]" in printed
    )
    assert len(namespace["keys"]) == 81  # type: ignore[arg-type]
    assert "33 [40.5 40.5]" in printed
    assert "20 [0.8, 0.9, 1.0, 1.1, 1.2] 24" in printed
    assert "28 1 True" in printed
    assert "80 1" in printed and "data-bound" in printed
    assert sorted(namespace["mixed_batch"]) == [0, 0, 0, 0, 0, 0, 1, 1]  # type: ignore[arg-type]


def test_demo_trains_and_reports_every_planted_fault() -> None:
    result = run_demo(
        counts=(40, 20, 8), image_size=64, crop_size=48, batch_size=16, num_workers=2, quiet=True
    )
    assert result.samples_trained == 68
    assert len(result.excluded) == 2 and len(result.skipped) == 2
    assert result.images_per_second > 0 and result.final_loss == result.final_loss


def test_cli_rejects_too_few_images() -> None:
    with pytest.raises(SystemExit, match="--images"):
        main(["demo", "--images", "1"])
