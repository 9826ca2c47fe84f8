"""Resume latency of a StatefulDataLoader with 2 workers from the middle of a 100k-sample epoch,
against a fresh start of the same loader, both timed by LoaderProfiler.

- fresh start: a new loader, ``iter()`` to the first batch (``report.startup_s``);
- resume: a new loader, ``profiler.load_state_dict(state)`` to the first batch after it
  (``report.resume_s``): the workers start and the sampler skips to where the state left it.

The mid-epoch state is taken once per sampler; each round then times both, in alternating order,
so machine noise hits them alike. Two samplers: torchloom's ``IndexSampler`` (its state names the
position, the rest of the order is recomputed from ``(seed, epoch)``) and ``shuffle=True``
(torchdata's own random sampler, which skips the indices already yielded).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from torchdata.stateful_dataloader import StatefulDataLoader

from torchloom import LoaderProfiler, collate
from torchloom.datasets import TableDataset
from torchloom.samplers import IndexSampler

SAMPLES, WORKERS, BATCH = 100_000, 2, 64
RESUME_GOAL_S = 1.0


@dataclass
class ResumeResult:
    """Seconds of each round, fresh start and resume side by side."""

    sampler: str
    fresh_s: list[float]
    resume_s: list[float]

    @property
    def fresh(self) -> float:
        return statistics.median(self.fresh_s)

    @property
    def resume(self) -> float:
        return statistics.median(self.resume_s)

    @property
    def ratio(self) -> float:
        """Median over rounds of resume / fresh start within a round."""
        return statistics.median(r / f for r, f in zip(self.resume_s, self.fresh_s, strict=True))


def _first_batch(loader: StatefulDataLoader, state: dict[str, Any] | None) -> float:
    profiler = LoaderProfiler(loader, stages=False)
    if state is not None:
        profiler.load_state_dict(state)
    for _ in profiler:
        break
    report = profiler.report(gather=False)
    latency = report.startup_s if state is None else report.resume_s
    if latency is None:
        raise RuntimeError("the resumed loader delivered no batch: the state was taken at the epoch's end")
    return latency


def run_resume(samples: int = SAMPLES, rounds: int = 5) -> list[ResumeResult]:
    dataset = TableDataset(pa.table({"x": np.arange(samples, dtype=np.int64)}))
    builders: dict[str, Callable[[], StatefulDataLoader]] = {
        "IndexSampler": lambda: StatefulDataLoader(
            dataset,
            batch_size=BATCH,
            sampler=IndexSampler(samples, seed=0),
            num_workers=WORKERS,
            collate_fn=collate,
        ),
        "shuffle=True": lambda: StatefulDataLoader(
            dataset, batch_size=BATCH, shuffle=True, num_workers=WORKERS, collate_fn=collate
        ),
    }
    results = []
    for name, build in builders.items():
        loader = build()
        middle = len(loader) // 2
        for seen, _ in enumerate(loader, start=1):
            if seen == middle:
                break
        state = loader.state_dict()
        del loader
        result = ResumeResult(name, [], [])
        for round_ in range(rounds):
            order = (None, state) if round_ % 2 == 0 else (state, None)
            for loaded in order:
                seconds = _first_batch(build(), loaded)
                (result.fresh_s if loaded is None else result.resume_s).append(seconds)
        results.append(result)
    return results


def resume_section(quick: bool, table: Callable[[list[dict[str, Any]]], str]) -> str:
    samples = 20_000 if quick else SAMPLES
    results = run_resume(samples, rounds=2 if quick else 5)
    for result in results:
        print(f"resume {result.sampler}: fresh {result.fresh_s}, resume {result.resume_s}", flush=True)
    rows = [
        {
            "sampler": r.sampler,
            "fresh start s (median)": f"{r.fresh:.2f}",
            "resume s (median)": f"{r.resume:.2f}",
            "resume s (worst round)": f"{max(r.resume_s):.2f}",
            "resume / fresh start": f"{r.ratio:.2f}×",
        }
        for r in results
    ]
    lines = [
        "## Resume latency",
        "",
        f"`StatefulDataLoader(TableDataset(...), batch_size={BATCH}, num_workers={WORKERS})` over "
        f"{samples:,} samples, resumed from the middle of the epoch: from `load_state_dict` to the first "
        "batch after it (`LoaderProfiler`'s `resume_s`), beside a fresh start of the same loader (`iter` "
        f"to the first batch, `startup_s`). {len(results[0].resume_s)} rounds, the two in alternating "
        "order; medians, and the median of per-round ratios.",
        "",
        table(rows),
        "",
        "| goal | measured | met |",
        "|---|---|---|",
    ]
    for r in results:
        met = "yes" if r.resume <= RESUME_GOAL_S else "no"
        lines.append(f"| {r.sampler}: resume ≤ {RESUME_GOAL_S:g} s (median) | {r.resume:.2f} s | {met} |")
    return "\n".join(lines)
