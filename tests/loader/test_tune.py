"""tune(): the budget shared over every sweep, steady state over repeated epochs, settings refused."""

from __future__ import annotations

import math
import time
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset

import torchloom.loader.autotune as tuning
from torchloom import Loader
from torchloom.errors import ConfigError

LOAD_S = 0.004  # per sample: one thread or worker reads at most 250 samples/s


class Slow(Dataset[dict[str, Any]]):
    """13 samples: two batches of 8 an epoch, as 13 PNGs are."""

    def __len__(self) -> int:
        return 13

    def __getitem__(self, index: int) -> dict[str, Any]:
        time.sleep(LOAD_S)
        return {"x": torch.zeros(2), "index": index}


def fake_clock(monkeypatch: pytest.MonkeyPatch, *, steady: int = 50, overhead_s: float = 0.3) -> list[float]:
    """Trials that take their slice plus ``overhead_s`` of a clock that only they move; returns the
    slices given, in order."""
    now = [0.0]
    slices: list[float] = []

    def rate(loader: Any, slice_s: float) -> tuple[float, float, int]:
        slices.append(slice_s)
        now[0] += slice_s + overhead_s
        return 100.0 + len(slices), 0.1, steady

    monkeypatch.setattr(tuning, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    monkeypatch.setattr(tuning, "_build", lambda *args: None)
    monkeypatch.setattr(tuning, "_rate", rate)
    monkeypatch.setattr(tuning, "usable_cores", lambda: 2)
    return slices


def test_the_default_budget_on_two_cores_measures_every_setting_the_thread_loader_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each sweep used to size its slices over itself alone: the worker sweep took the whole budget
    and Loader(num_threads=2) was never measured at the default budget on 2 cores."""
    slices = fake_clock(monkeypatch)
    result = tuning.tune(Slow(), batch_size=8, progress=False)
    names = [trial.name for trial in result.table]
    assert "Loader(num_threads=2)" in names and "Loader(num_threads=1)" in names
    assert all(trial.status == "measured" for trial in result.table), result.rows()
    assert len(slices) == len(result.table) == 7
    assert min(slices) > 2.5 and sum(slices) + 0.3 * len(slices) <= 30.0 + 1e-9, slices
    assert result.best == result.table[-1].setting  # the fake rates grow: the last trial is the best


def test_too_few_batches_to_tell_are_said_and_not_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_clock(monkeypatch, steady=2)
    result = tuning.tune(Slow(), batch_size=8, budget_s=5, progress=False)
    assert all(trial.status.startswith("too few batches to tell") for trial in result.table)
    assert result.best == {"batch_size": 8, "num_workers": 0}
    assert "too small to tell" in result.note and "larger budget" in result.note


def test_a_small_dataset_is_measured_over_repeated_epochs_not_one_gap() -> None:
    """Two batches an epoch: the rate came from the one gap between them (the second batch ready in
    parallel with the first: 26,010 samples/s from 13 PNGs)."""
    result = tuning.tune(Slow(), batch_size=8, budget_s=8, max_workers=2, progress=False)
    measured = [trial for trial in result.table if trial.status == "measured"]
    assert any(trial.setting.get("loader") == "threads" for trial in measured)
    assert any(trial.setting.get("num_workers") for trial in measured)
    for trial in measured:
        parallel = max(1, trial.setting.get("num_workers", 0), trial.setting.get("num_threads", 0))
        ceiling = parallel / LOAD_S  # samples/s the setting can reach at all
        assert trial.samples_per_s <= 1.2 * ceiling, (trial.name, trial.samples_per_s, ceiling)


@pytest.mark.parametrize("budget", [0.3, 0, -1, math.nan, math.inf, True, "30"])
def test_a_budget_tune_cannot_measure_within_is_refused(budget: Any) -> None:
    with pytest.raises(ConfigError, match=r"budget must be a number of seconds of at least 1"):
        tuning.tune(Slow(), batch_size=8, budget_s=budget, progress=False)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"batch_size": 0}, "batch_size must be an integer >= 1, got 0"),
        ({"batch_size": 8, "max_workers": -1}, "max_workers must be an integer >= 0, got -1"),
        ({"batch_size": 8, "max_workers": 1.5}, "max_workers must be an integer >= 0, got 1.5"),
    ],
)
def test_tune_refuses_bad_counts(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        tuning.tune(Slow(), budget_s=2, progress=False, **options)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"num_threads": 0}, r"num_threads must be an integer >= 1, got 0; leave it out"),
        ({"num_threads": -2}, "num_threads must be an integer >= 1, got -2"),
        ({"num_threads": 2.0}, r"num_threads must be an integer >= 1, got 2\.0"),
        ({"num_threads": True}, "num_threads must be an integer >= 1, got True"),
        ({"batch_size": 0}, "batch_size must be an integer >= 1, got 0"),
        ({"prefetch": -1}, "prefetch must be an integer >= 0, got -1"),
    ],
)
def test_loader_refuses_counts_that_would_silently_mean_something_else(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Loader(Slow(), **{"batch_size": 4, **options})
