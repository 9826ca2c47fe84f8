"""``torchloom check-resume module:function`` on an entry point in a temporary module."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from torchloom.tools.cli import main

PIPELINE = """
from torch.utils.data import DataLoader
from torchloom import IndexSampler


class Echo:
    def __len__(self):
        return 40

    def __getitem__(self, key):
        return {"index": int(key)}


class LosesOne(IndexSampler):
    def _set_state(self, state):
        super()._set_state(state)
        if self._resume_from:
            self._resume_from += 1


def make_loader(rank, world_size, num_workers, sampler=IndexSampler):
    order = sampler(40, seed=2, rank=rank, world_size=world_size)
    return DataLoader(Echo(), sampler=order, batch_size=4, num_workers=num_workers)


def make_broken_loader(rank, world_size, num_workers):
    return make_loader(rank, world_size, num_workers, sampler=LosesOne)
"""


@pytest.fixture
def pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "my_pipeline.py"
    path.write_text(PIPELINE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "my_pipeline", raising=False)
    return path


def test_an_exact_pipeline_exits_clean(pipeline: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-resume", "my_pipeline:make_loader", "--world-sizes", "1", "2"]) == 0
    assert capsys.readouterr().out.startswith("resume exact: 21 of 21 cases")


def test_a_pipeline_that_loses_a_sample_exits_1_naming_it(
    pipeline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check-resume", f"{pipeline}:make_broken_loader", "--random-stops", "0"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("resume NOT exact")
    assert "epoch 0 after batch 1 of 10 (after the first batch), resumed with world_size=1" in out
    assert " lost in epoch 0 on rank 0" in out


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("my_pipeline", "is not module:function"),
        ("my_pipeline:nothing", "has no function 'nothing'"),
        ("no_such_module:make_loader", "cannot be imported"),
        ("missing.py:make_loader", "does not exist"),
    ],
)
def test_a_bad_entry_point_is_a_usage_error(
    pipeline: Path, capsys: pytest.CaptureFixture[str], entry: str, message: str
) -> None:
    assert main(["check-resume", entry]) == 2
    assert message in capsys.readouterr().err
