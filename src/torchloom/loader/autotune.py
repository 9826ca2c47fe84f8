"""tune(): pick DataLoader settings by measuring them, within a time budget.

Rules of thumb ("num_workers = cores, prefetch 2, pin memory") are where the search starts, not
the answer. :func:`tune` measures steady-state samples/s (start-up timed apart and reported) for a
handful of settings chosen by search rather than a full grid: worker counts doubling up to the
cores this process may use, then the neighbours of the best, then the prefetch depth and, where
it exists, torchloom's thread :class:`~torchloom.Loader`; ``pin_memory`` only when CUDA is there
(for the DataLoader trials and the Loader's alike, so each is measured as training would run it).
A memory estimate per worker (its private start-up growth plus the batches it holds in flight)
refuses settings that would not fit in the memory available.

The budget is shared by every trial still to come, whatever its sweep, so the last ones (the
thread Loader's) get their slice too. A slice reads epoch after epoch, as training does, so a
small dataset is measured over its epochs' boundaries too, not over the gap between two batches;
a trial that saw fewer than :data:`MIN_STEADY_BATCHES` batches after its first is not compared
(``too few batches to tell``), and the result says so in :attr:`TuneResult.note`.

"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler
from tqdm.auto import tqdm

from torchloom.collation import collate
from torchloom.errors import ConfigError
from torchloom.io.threads import usable_cores
from torchloom.loader.counts import check_count
from torchloom.loader.loader import Loader
from torchloom.loader.profiler import count_samples

# A worker's private memory at start-up beyond its parent's (torch's own growth, measured
# ~30-70 MiB per worker on this project's machines); batches in flight come on top.
WORKER_BASE_BYTES = 96 * 1024 * 1024
# Keep this share of the available memory free.
MEMORY_HEADROOM = 0.2
# Longest single measurement, whatever the budget.
MAX_SLICE_S = 6.0
# Shortest: below it a trial says more about timer noise and start-up than about the setting.
MIN_SLICE_S = 0.5
#: The smallest budget :func:`tune` takes: one trial's slice and its start-up.
MIN_BUDGET_S = 1.0
#: Batches a trial must see after its first to be compared with the others.
MIN_STEADY_BATCHES = 5
# The prefetch depths tried after the best worker count, and at most how many neighbours of it.
PREFETCH_DEPTHS = (4, 8)
MAX_NEIGHBOURS = 2


@dataclass
class Trial:
    """One measured setting: its keyword arguments, samples/s, start-up time, and what happened.

    Example:
        >>> from torchloom.loader import Trial
        >>> trial = Trial({"batch_size": 32, "num_workers": 4, "pin_memory": True}, samples_per_s=2400.0)
        >>> trial.name, trial.status
        ('DataLoader(num_workers=4, pin_memory=True)', 'measured')
    """

    setting: dict[str, Any]
    samples_per_s: float = 0.0
    startup_s: float = 0.0
    status: str = "measured"

    @property
    def name(self) -> str:
        threads = self.setting.get("loader") == "threads"
        if threads:
            parts = [f"num_threads={self.setting['num_threads']}"]
        else:
            parts = [f"num_workers={self.setting['num_workers']}"]
        if self.setting.get("prefetch_factor") is not None:
            parts.append(f"prefetch_factor={self.setting['prefetch_factor']}")
        if self.setting.get("pin_memory"):
            parts.append("pin_memory=True")
        return ("Loader(" if threads else "DataLoader(") + ", ".join(parts) + ")"


@dataclass
class TuneResult:
    """The best keyword arguments (for ``DataLoader``, or ``{"loader": "threads", ...}`` for
    :class:`torchloom.Loader`) and every trial, in the order measured.

    Example:
        >>> from torchloom.loader import Trial, TuneResult
        >>> trials = [Trial({"batch_size": 32, "num_workers": 0}, samples_per_s=900.0),
        ...           Trial({"batch_size": 32, "num_workers": 2}, samples_per_s=1800.0)]
        >>> result = TuneResult(best=trials[1].setting, table=trials)
        >>> [(row["status"], row["vs best"]) for row in result.rows()]
        [('measured', '0.50×'), ('measured (chosen)', '1.00×')]
    """

    best: dict[str, Any]
    table: list[Trial] = field(default_factory=list)
    elapsed_s: float = 0.0
    #: What the measurements cannot tell (empty when every trial could be compared).
    note: str = ""

    def rows(self) -> list[dict[str, str]]:
        best = max((t.samples_per_s for t in self.table if t.status == "measured"), default=0.0)
        return [
            {
                "setting": trial.name,
                "samples/s": f"{trial.samples_per_s:,.0f}" if trial.status == "measured" else "-",
                "start-up s": f"{trial.startup_s:.2f}" if trial.status == "measured" else "-",
                "status": trial.status + (" (chosen)" if trial.setting == self.best else ""),
                "vs best": f"{trial.samples_per_s / best:.2f}×"
                if best and trial.status == "measured"
                else "-",
            }
            for trial in self.table
        ]


def available_memory() -> int:
    """Bytes of memory available to new processes (``MemAvailable``), or a large number if unknown."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 50


def tune(
    dataset: Dataset[Any],
    *,
    batch_size: int,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    sampler: Sampler[Any] | None = None,
    budget_s: float = 30.0,
    max_workers: int | None = None,
    try_loader: bool = True,
    progress: bool = True,
) -> TuneResult:
    """Measure loader settings for ``dataset`` within ``budget_s`` and return the fastest.

    The search (:mod:`torchloom.loader.autotune`'s notes say more): worker counts doubling up to
    the cores, then the neighbours of the best, the prefetch depth and torchloom's thread
    :class:`~torchloom.Loader`, each measured at steady state with its start-up timed apart; a
    setting whose workers would not fit in the memory available is refused, not tried.

    Args:
        dataset: a map-style dataset (an IterableDataset is measured over worker counts only).
        batch_size: the batch size training will use.
        collate_fn: default :func:`torchloom.collate`.
        sampler: the sampler training will use (default: shuffled).
        budget_s: the time the whole search may take, start-ups included (at least
            :data:`MIN_BUDGET_S`).
        max_workers: the most workers to try (default: the cores this process may use).
        try_loader: also measure torchloom's thread :class:`~torchloom.Loader` (map-style
            datasets only).
        progress: show a progress bar.

    Example:
        >>> import pyarrow as pa
        >>> from torchloom import tune
        >>> from torchloom.datasets import TableDataset
        >>> result = tune(TableDataset(pa.table({"x": list(range(256))})), batch_size=32, budget_s=3,
        ...               max_workers=1, progress=False)
        >>> result.best["batch_size"], len(result.table) >= 3
        (32, True)
    """
    check_budget(budget_s)
    check_count("batch_size", batch_size, least=1)
    if max_workers is not None:
        check_count("max_workers", max_workers, least=0, fix="0 measures num_workers=0 only")
    collate_fn = collate_fn or collate
    cores = usable_cores()
    top = max(0, min(cores, max_workers if max_workers is not None else cores))
    started = time.perf_counter()
    batch_bytes = _batch_bytes(dataset, batch_size, collate_fn)
    result = TuneResult(best={})
    cuda = torch.cuda.is_available()

    def remaining() -> float:
        return budget_s - (time.perf_counter() - started)

    bar = tqdm(
        total=round(budget_s),
        disable=not progress,
        desc="tuning the loader",
        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s",
        leave=False,
    )

    base = {"batch_size": batch_size}
    counts = sorted({0, *[2**k for k in range(8) if 2**k <= top], top})
    thread_counts = sorted({1, max(1, cores)}) if try_loader and _map_style(dataset) else []
    # Trials still to come in every sweep: each slice is a share of the budget left over all of them.
    planned = len(counts) + MAX_NEIGHBOURS + len(PREFETCH_DEPTHS) + len(thread_counts)
    overheads: list[float] = []  # each measured trial's time beyond its slice (start-up, shutdown)

    def measure(setting: dict[str, Any]) -> Trial:
        nonlocal planned
        left, planned = planned, planned - 1
        trial = Trial(dict(setting))
        result.table.append(trial)
        workers = int(setting.get("num_workers", 0))
        need = workers * (WORKER_BASE_BYTES + batch_bytes * (setting.get("prefetch_factor") or 2) * 2)
        if need > available_memory() * (1 - MEMORY_HEADROOM):
            trial.status = f"refused: needs ~{need / 2**30:.1f} GiB, more than the memory available"
            return trial
        if remaining() <= 0.5:
            trial.status = "not measured: out of budget"
            return trial
        overhead = sum(overheads) / len(overheads) if overheads else 0.0
        slice_s = min(MAX_SLICE_S, max(MIN_SLICE_S, remaining() / max(1, left) - overhead))
        began = time.perf_counter()
        loader = _build(dataset, setting, batch_size, collate_fn, sampler)
        trial.samples_per_s, trial.startup_s, steady = _rate(loader, slice_s)
        del loader  # its workers or threads end before the next trial starts
        overheads.append(max(0.0, time.perf_counter() - began - slice_s))
        if steady < MIN_STEADY_BATCHES:
            trial.status = f"too few batches to tell ({steady} after the first in {slice_s:.1f} s)"
        bar.n = round(min(budget_s, time.perf_counter() - started))
        bar.refresh()
        return trial

    trials = [measure({**base, "num_workers": n, **_worker_options(n, cuda)}) for n in counts]
    best = _best(trials)
    n = best.setting["num_workers"] if best is not None else 0
    neighbours = [k for k in sorted({n - 1, n + 1} - set(counts)) if 0 < k <= top] if n > 0 else []
    planned -= MAX_NEIGHBOURS - len(neighbours) + (0 if n > 0 else len(PREFETCH_DEPTHS))
    if best is not None and n > 0:
        for neighbour in neighbours:
            measure({**base, "num_workers": neighbour, **_worker_options(neighbour, cuda)})
        best = _best(result.table) or best
        for depth in PREFETCH_DEPTHS:
            measure({**best.setting, "prefetch_factor": depth})
    for count in thread_counts:
        measure({**base, "loader": "threads", "num_threads": count, "pin_memory": cuda})
    bar.close()
    chosen = _best(result.table)
    result.best = chosen.setting if chosen is not None else {**base, "num_workers": 0}
    result.note = _note(result.table, chosen)
    result.elapsed_s = time.perf_counter() - started
    return result


def check_budget(budget_s: float) -> float:
    """``budget_s`` if :func:`tune` can measure within it, else a :class:`ConfigError` naming it.

    Example:
        >>> check_budget(30)
        30
    """
    number = isinstance(budget_s, (int, float)) and not isinstance(budget_s, bool)
    if not number or not math.isfinite(budget_s) or budget_s < MIN_BUDGET_S:
        raise ConfigError(
            f"budget must be a number of seconds of at least {MIN_BUDGET_S:g} (one trial and its start-up), "
            f"got {budget_s!r}"
        )
    return budget_s


def _map_style(dataset: Dataset[Any]) -> bool:
    return hasattr(dataset, "__getitem__") and not isinstance(dataset, torch.utils.data.IterableDataset)


def _note(table: list[Trial], chosen: Trial | None) -> str:
    """What the result cannot tell: trials with too few batches to compare, or none compared."""
    few = [trial for trial in table if trial.status.startswith("too few")]
    if chosen is None and few:
        return (
            f"the data is too small to tell the settings apart: no trial saw {MIN_STEADY_BATCHES} "
            "batches after its first; num_workers=0 is returned. Give a larger budget, a smaller "
            "batch size or more data"
        )
    if few:
        return f"{len(few)} of {len(table)} trials saw too few batches to tell: a larger budget measures them"
    return ""


def _worker_options(workers: int, cuda: bool) -> dict[str, Any]:
    options: dict[str, Any] = {"pin_memory": cuda}
    if workers > 0:
        options.update(prefetch_factor=2, persistent_workers=True)
    return options


def _best(trials: list[Trial]) -> Trial | None:
    measured = [trial for trial in trials if trial.status == "measured"]
    return max(measured, key=lambda trial: trial.samples_per_s) if measured else None


def _build(
    dataset: Dataset[Any],
    setting: dict[str, Any],
    batch_size: int,
    collate_fn: Callable[[list[Any]], Any],
    sampler: Sampler[Any] | None,
) -> Any:
    if setting.get("loader") == "threads":
        return Loader(
            dataset,
            batch_size=batch_size,
            sampler=sampler,
            shuffle=sampler is None,
            collate_fn=collate_fn,
            num_threads=setting["num_threads"],
            pin_memory=setting.get("pin_memory", False),
        )
    options = {key: value for key, value in setting.items() if key != "batch_size"}
    iterable = isinstance(dataset, torch.utils.data.IterableDataset)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        shuffle=sampler is None and not iterable,
        collate_fn=collate_fn,
        **options,
    )


def _rate(loader: Any, slice_s: float) -> tuple[float, float, int]:
    """(steady samples/s over about ``slice_s`` seconds, seconds to the first batch, batches after
    the first): epoch after epoch, as training reads, so each new epoch's cost is in the rate."""
    began = time.perf_counter()
    first_at: float | None = None
    seen = steady_batches = 0
    while True:
        iterator = iter(loader)
        delivered = 0
        for batch in iterator:
            delivered += 1
            now = time.perf_counter()
            if first_at is None:
                first_at = now
                continue
            seen += count_samples(batch)
            steady_batches += 1
            if now - first_at >= slice_s:
                break
        del iterator  # a Loader's threads stop with its iteration
        if not delivered or (first_at is not None and time.perf_counter() - first_at >= slice_s):
            break
    ended = time.perf_counter()
    startup = (first_at or ended) - began
    steady = ended - (first_at or ended)
    return (seen / steady if steady > 0 else 0.0), startup, steady_batches


def _batch_bytes(dataset: Dataset[Any], batch_size: int, collate_fn: Callable[[list[Any]], Any]) -> int:
    """The size of one batch, from a few samples (0 when it cannot be told)."""
    try:
        samples = [dataset[index] for index in range(min(4, len(dataset)))]  # type: ignore[arg-type]
        batch = collate_fn(samples)
    except Exception:  # an estimate only: a dataset that cannot be sampled here is still tuned
        return 0
    total = _nbytes(batch)
    return total * batch_size // max(1, len(samples))


def _nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.element_size() * value.nelement()
    if isinstance(value, dict):
        return sum(_nbytes(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(item) for item in value)
    return 0
