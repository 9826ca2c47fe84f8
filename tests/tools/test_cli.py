"""The command line's words: --threads counts threads, --workers counts DataLoader processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from torchloom.tools import cli
from torchloom.tools.prepare import command as prepare_command

THREADED = {
    "doctor": ["doctor", "data"],
    "cache": ["cache", "data", "--out", "cache"],
    "prepare": ["prepare", "raw", "--rule", "cat:cat", "--out", "out"],
}


@pytest.mark.parametrize("command", list(THREADED))
def test_commands_that_read_in_threads_take_threads(command: str) -> None:
    parser = cli.build_parser()
    assert parser.parse_args([*THREADED[command], "--threads", "3"]).threads == 3
    assert parser.parse_args(THREADED[command]).threads is None
    for wrong in (["--threads", "0"], ["--workers", "3"]):
        with pytest.raises(SystemExit):
            parser.parse_args([*THREADED[command], *wrong])


def test_demo_counts_dataloader_workers() -> None:
    parser = cli.build_parser()
    assert parser.parse_args(["demo", "--workers", "0"]).workers == 0
    with pytest.raises(SystemExit):
        parser.parse_args(["demo", "--threads", "2"])


def test_prepare_threads_reach_the_pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def prepare_dataset(raw: str, out: str, **settings: Any) -> None:
        seen.update(settings)
        raise SystemExit(0)

    monkeypatch.setattr(prepare_command, "prepare_dataset", prepare_dataset)
    (tmp_path / "raw").mkdir()
    argv = ["prepare", str(tmp_path / "raw"), "--rule", "cat:cat", "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit):
        cli.main([*argv, "--threads", "2"])
    assert seen["num_threads"] == 2
