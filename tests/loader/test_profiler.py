"""LoaderProfiler: the data-wait share exact on a loop whose loading and steps move a fake clock,
stage times from inside workers, verdicts and advice."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from torchloom import FolderDataset, Loader, LoaderProfiler, collate
from torchloom.loader import profiler as profiling

LOAD_S, STEP_S, BATCH = 0.002, 0.008, 8  # 16 ms of loading per batch, 8 ms of model step


class Clock:
    """The profiler's clock, moved only by the test: the loop's timings are exact under any load."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(profiling, "time", SimpleNamespace(perf_counter=clock.perf_counter))
    return clock


class Sleepy(Dataset[dict[str, Any]]):
    """Each sample takes ``LOAD_S`` of the fake clock when there is one (read in the main process),
    of real time otherwise (read by workers)."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock

    def __len__(self) -> int:
        return 30 * BATCH

    def __getitem__(self, index: int) -> dict[str, Any]:
        if self.clock is None:
            time.sleep(LOAD_S)
        else:
            self.clock.advance(LOAD_S)
        return {"x": torch.zeros(2), "index": index}


def test_wait_share_is_the_truth(clock: Clock) -> None:
    profiler = LoaderProfiler(DataLoader(Sleepy(clock), batch_size=BATCH, collate_fn=collate))
    for _ in profiler:
        clock.advance(STEP_S)
    report = profiler.report()
    waits = 29 * LOAD_S * BATCH  # the first batch's loading is start-up, timed apart
    truth = waits / (waits + 30 * STEP_S)
    assert report.wait_share == pytest.approx(truth), (report.wait_share, truth)
    assert report.startup_s == pytest.approx(LOAD_S * BATCH)
    assert report.batches == 30 and report.samples == 30 * BATCH and report.data_bound
    assert report.wait_p50_ms == pytest.approx(16) and report.verdict.startswith("data-bound")


def test_a_model_bound_loop_is_called_so(clock: Clock) -> None:
    profiler = LoaderProfiler()
    loader = Loader(Sleepy(), batch_size=BATCH, num_threads=4, prefetch=4)
    for _ in profiler(loader):
        clock.advance(0.03)  # loading, in the loader's threads, takes no time of this clock
    report = profiler.report()
    assert not report.data_bound and report.verdict.startswith("not data-bound")
    assert "model is the bottleneck" in report.advice


@pytest.mark.parametrize("num_workers", [0, 2])
def test_stage_times_come_from_every_worker(class_folders: tuple[Path, Any], num_workers: int) -> None:
    root, _ = class_folders
    dataset = FolderDataset(root, on_error="skip", progress=False)
    loader = DataLoader(dataset, batch_size=8, num_workers=num_workers, collate_fn=collate)
    profiler = LoaderProfiler(loader)
    batches = list(profiler)
    report = profiler.report()
    assert all("_torchloom_collated_at" not in batch for batch in batches)
    assert report.stages["read"] > 0 and report.stages["decode"] > 0 and report.stages["collate"] > 0
    assert loader.collate_fn is collate and dataset.stage_clock is None  # detached afterwards
    text = str(report)
    assert "loading time:" in text and "decode" in text


def test_tune_returns_usable_settings(class_folders: tuple[Path, Any]) -> None:
    from torchloom import tune

    root, _ = class_folders
    dataset = FolderDataset(root, on_error="skip", progress=False)
    result = tune(dataset, batch_size=8, budget_s=8, progress=False)  # the budget: tests/loader/test_tune.py
    measured = [trial for trial in result.table if trial.status == "measured"]
    assert len(measured) >= 3 and result.best in [trial.setting for trial in measured]
    best = max(measured, key=lambda trial: trial.samples_per_s)
    assert result.best == best.setting
    if result.best.get("loader") != "threads":
        options = {k: v for k, v in result.best.items() if k != "batch_size"}
        loader = DataLoader(dataset, batch_size=8, collate_fn=collate, **options)
        assert sum(len(b["label"]) + len(b.get("skipped", [])) for b in loader) == len(dataset)
    assert {"setting", "samples/s", "start-up s", "status", "vs best"} <= set(result.rows()[0])


def test_tune_refuses_settings_that_would_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    import torchloom.loader.autotune as tuning

    monkeypatch.setattr(tuning, "available_memory", lambda: 64 * 1024 * 1024)
    result = tuning.tune(Sleepy(), batch_size=8, budget_s=3, max_workers=2, try_loader=False, progress=False)
    refused = [trial for trial in result.table if trial.status.startswith("refused")]
    assert refused and all(trial.setting["num_workers"] > 0 for trial in refused)
    assert result.best["num_workers"] == 0


def test_tune_pins_every_trial_when_cuda_is_there(monkeypatch: pytest.MonkeyPatch) -> None:
    """The thread Loader is measured pinned, as the DataLoader trials are and as training runs it."""
    import torchloom.loader.autotune as tuning

    built: list[dict[str, Any]] = []

    def spy(kind: str) -> Any:
        def build(dataset: Any, **options: Any) -> list[Any]:
            built.append({"kind": kind, **options})
            return []

        return build

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(tuning, "Loader", spy("threads"))
    monkeypatch.setattr(tuning, "DataLoader", spy("dataloader"))
    result = tuning.tune(Sleepy(), batch_size=8, budget_s=3, max_workers=1, progress=False)
    threads = [trial for trial in result.table if trial.setting.get("loader") == "threads"]
    assert threads and all(trial.setting["pin_memory"] for trial in result.table)
    assert all(trial.name.endswith("pin_memory=True)") for trial in threads)
    assert {options["kind"] for options in built} == {"threads", "dataloader"}
    assert all(options["pin_memory"] for options in built)


def test_bench_command_prints_plots_and_speaks_json(class_folders: tuple[Path, Any], tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    root, _ = class_folders
    plot = tmp_path / "bench.png"
    command = [sys.executable, "-m", "torchloom", "bench", str(root), "--batch-size", "8", "--budget", "6"]
    piped = subprocess.run([*command, "--plot", str(plot)], capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0, piped.stderr
    assert "setting" in piped.stdout and "chosen:" in piped.stdout and "\x1b[" not in piped.stdout
    assert plot.read_bytes().startswith(b"\x89PNG")
    as_json = subprocess.run([*command, "--json", "--plot", ""], capture_output=True, text=True, timeout=120)
    report = json.loads(as_json.stdout)
    assert report["best"]["batch_size"] == 8 and len(report["trials"]) >= 3
    usage = subprocess.run([*command[:4], str(tmp_path / "missing")], capture_output=True, text=True)
    assert usage.returncode == 2 and "does not exist" in usage.stderr


def test_the_profiler_reads_a_stateful_dataloader_and_leaves_it_resumable() -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    loader = StatefulDataLoader(Sleepy(), batch_size=BATCH, num_workers=2, collate_fn=collate)
    profiler = LoaderProfiler(loader)
    seen = 0
    for batch in profiler:
        seen += len(batch["index"])
        if seen == 5 * BATCH:
            break
    state = loader.state_dict()
    resumed = StatefulDataLoader(Sleepy(), batch_size=BATCH, num_workers=2, collate_fn=collate)
    resumed.load_state_dict(state)
    assert seen + sum(len(b["index"]) for b in resumed) == len(Sleepy())
    assert profiler.report().batches == 5


@pytest.mark.parametrize("held", [False, True], ids=["dropped", "held"])
def test_a_loop_left_with_break_keeps_its_wall_time_and_its_last_step(held: bool, clock: Clock) -> None:
    profiler = LoaderProfiler(DataLoader(Sleepy(clock), batch_size=BATCH, collate_fn=collate))
    iterator = iter(profiler)
    for step, _ in enumerate(iterator):
        clock.advance(STEP_S)
        if step == 4:
            break
    if not held:
        del iterator  # as a plain ``for batch in profiler: ... break`` does
    report = profiler.report()
    assert report.batches == 5
    assert report.step_s == pytest.approx(5 * STEP_S), report.step_s  # the fifth, left by break, too
    assert report.wall_s == pytest.approx(5 * (LOAD_S * BATCH + STEP_S))
    assert report.samples_per_s > 0
