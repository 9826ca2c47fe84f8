"""The command line's words: --threads counts threads, --workers counts DataLoader processes; every
option has help, takes the API's word and refuses what it cannot use."""

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


def _subparsers() -> dict[str, Any]:
    import argparse

    parser = cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_option_of_every_command_has_help() -> None:
    for name, parser in _subparsers().items():
        for action in parser._actions:
            assert action.help, f"torchloom {name} {'/'.join(action.option_strings) or action.dest}"


@pytest.mark.parametrize(
    "wrong",
    [["--images", "-5"], ["--workers", "-1"], ["--batch-size", "0"], ["--seed", "-1"], ["--images", "x"]],
)
def test_demo_refuses_counts_below_their_least(wrong: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.build_parser().parse_args(["demo", *wrong])
    assert exit_info.value.code == 2 and "expected" in capsys.readouterr().err


def test_bench_says_where_its_plot_goes_by_default() -> None:
    from torchloom.tools.bench.command import DEFAULT_PLOT

    assert DEFAULT_PLOT in _subparsers()["bench"].format_help()
    assert cli.build_parser().parse_args(["bench", "data"]).plot == DEFAULT_PLOT


def test_prepare_names_its_fractions_and_keeps_split_for_split_names() -> None:
    parser = cli.build_parser()
    prepare = ["prepare", "raw", "--rule", "cat:cat", "--out", "out"]
    assert parser.parse_args([*prepare, "--fractions", "0.5,0.5"]).fractions == "0.5,0.5"
    with pytest.raises(SystemExit):
        parser.parse_args([*prepare, "--split", "0.5,0.5"])
    for command in (["show", "data"], ["bench", "data"], ["cache", "data", "--out", "c"]):
        assert parser.parse_args([*command, "--split", "val"]).split == "val"
