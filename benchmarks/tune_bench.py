"""tune() against a full grid measured separately on the same data, and LoaderProfiler's overhead.

- grid: every DataLoader setting tune() may consider on this machine (workers 0..cores, prefetch
  2/4/8) and the thread Loader (1..cores threads), each measured for the same time slice; the grid's
  best is the reference. tune() then runs with its budget, and its chosen setting is re-measured
  like the grid's: the ratio chosen / best is the figure (goal >= 0.9).
- profiler overhead: the same in-process loop (0 workers, so loading fills the wall time) with and
  without LoaderProfiler wrapped around the loader, rounds interleaved.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from benchmarks.common import cpu_count
from benchmarks.pipeline import CROP, NaiveDataset
from torchloom import FolderDataset, LoaderProfiler, collate, tune
from torchloom.loader.autotune import Trial, _build, _rate
from torchloom.tools.demo.run import IMAGE_FEATURES, tiny_image_trunk
from torchloom.transforms import Compose, HorizontalFlip, Normalize, RandomResizedCrop

SLICE_S = 3.0
BATCH = 64


def tiny_cnn(num_classes: int) -> nn.Module:
    """The demo's image trunk and a linear head: a step cheap enough to be fed."""
    return nn.Sequential(tiny_image_trunk(), nn.Linear(IMAGE_FEATURES, num_classes))


@dataclass
class TrainingLoop:
    name: str
    samples_per_s: float
    wait_share: float
    verdict: str


@dataclass
class TuneBench:
    grid: list[Trial]
    chosen: Trial
    best: Trial
    tune_s: float
    profiler_costs: tuple[float, float, float]
    loops: list[TrainingLoop]

    @property
    def ratio(self) -> float:
        return self.chosen.samples_per_s / self.best.samples_per_s

    @property
    def profiler_overhead(self) -> float:
        """The profiler's share of a loop's time: (per batch / batch size + per sample) / per sample."""
        per_batch_us, per_sample_us, sample_us = self.profiler_costs
        return (per_batch_us / BATCH + per_sample_us) / sample_us


def measure(dataset: FolderDataset, setting: dict[str, Any], rounds: int) -> Trial:
    rates = []
    for _ in range(rounds):
        loader = _build(dataset, setting, BATCH, collate, None)
        rates.append(_rate(loader, SLICE_S)[0])
        del loader
    return Trial(setting, samples_per_s=max(rates))


def grid_settings() -> list[dict[str, Any]]:
    cores = cpu_count()
    settings: list[dict[str, Any]] = [{"batch_size": BATCH, "num_workers": 0, "pin_memory": False}]
    for workers in range(1, cores + 1):
        for depth in (2, 4, 8):
            settings.append(
                {
                    "batch_size": BATCH,
                    "num_workers": workers,
                    "pin_memory": False,
                    "prefetch_factor": depth,
                    "persistent_workers": True,
                }
            )
    settings += [{"batch_size": BATCH, "loader": "threads", "num_threads": n} for n in range(1, cores + 1)]
    return settings


def profiler_overhead(dataset: FolderDataset, rounds: int) -> tuple[float, float, float]:
    """The profiler's own cost, measured apart from the pipeline's noise.

    Returns (µs per batch of the profiler's bookkeeping around a loader that yields ready batches,
    µs per sample of the stage timing a dataset does (its clock readings and additions, timed in a
    tight loop), the pipeline's µs per sample without the profiler). The overhead share is their
    sum over the pipeline's time per sample.
    """
    ready = [collate([dataset[i] for i in range(BATCH)])] * 200
    bare, wrapped = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        for _batch in iter(ready):
            pass
        bare.append(time.perf_counter() - started)
        profiler = LoaderProfiler(ready, stages=False)
        started = time.perf_counter()
        for _batch in profiler:
            pass
        wrapped.append(time.perf_counter() - started)
    per_batch_us = (min(wrapped) - min(bare)) / len(ready) * 1e6
    # Stage timing adds, per sample, what this loop does: 3 clock readings and 3 additions (the
    # once-per-batch flush is in the per-batch figure's order of magnitude, and divided by 64).
    clock = LoaderProfiler().clock
    repeats = 100_000
    started = time.perf_counter()
    for _ in range(repeats):
        began = time.perf_counter()
        clock.add("read", time.perf_counter() - began)
        clock.add("decode", time.perf_counter() - began)
        clock.add("transform", time.perf_counter() - began)
    per_sample_us = (time.perf_counter() - started) / repeats * 1e6
    keys = list(range(min(len(dataset), 256)))
    untimed = []
    for _ in range(rounds):
        started = time.perf_counter()
        dataset.__getitems__(keys)
        untimed.append(time.perf_counter() - started)
    return per_batch_us, per_sample_us, min(untimed) / len(keys) * 1e6


def run_tune(root: str, rounds: int = 2, budget_s: float = 30.0) -> TuneBench:
    dataset = FolderDataset(
        root, transform=Compose([RandomResizedCrop(CROP), HorizontalFlip()]), progress=False
    )
    grid = [measure(dataset, setting, rounds) for setting in grid_settings()]
    best = max(grid, key=lambda trial: trial.samples_per_s)
    started = time.perf_counter()
    result = tune(dataset, batch_size=BATCH, budget_s=budget_s, progress=False)
    tune_s = time.perf_counter() - started
    # The grid's best and tune's choice re-measured side by side, rounds interleaved.
    chosen, best = Trial(result.best), Trial(best.setting)
    for _ in range(3):
        for trial in (chosen, best):
            trial.samples_per_s = max(trial.samples_per_s, measure(dataset, trial.setting, 1).samples_per_s)
    loops = training_loops(root, result.best)
    return TuneBench(grid, chosen, best, tune_s, profiler_overhead(dataset, rounds=5), loops)


def training_loops(root: str, tuned: dict[str, Any], epochs: int = 1) -> list[TrainingLoop]:
    """A tiny CNN on the CPU fed by the naive loader (2 workers) and by torchloom with ``tuned``
    settings, each loop timed by LoaderProfiler (data-wait share, samples/s, verdict)."""
    dataset = FolderDataset(
        root, transform=Compose([RandomResizedCrop(CROP), HorizontalFlip()]), progress=False
    )
    naive = DataLoader(
        NaiveDataset(dataset.index.paths.to_list(), dataset.targets.tolist()),
        batch_size=BATCH,
        shuffle=True,
        num_workers=2,
        persistent_workers=True,
    )
    ours = _build(dataset, tuned, BATCH, collate, None)
    normalize = Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    results = []
    for name, loader in (("naive (PIL, float32, 2 workers)", naive), ("torchloom, tuned settings", ours)):
        torch.manual_seed(0)
        model = tiny_cnn(4)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        profiler = LoaderProfiler(loader)
        for _ in range(epochs):
            for batch in profiler:
                images, labels = (batch["image"], batch["label"]) if isinstance(batch, dict) else batch
                if images.dtype == torch.uint8:
                    images = normalize(images)
                loss = torch.nn.functional.cross_entropy(model(images), labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        report = profiler.report()
        results.append(TrainingLoop(name, report.samples_per_s, report.wait_share, report.verdict))
    return results
