"""BENCHMARKS.md sections of the fast path: the thread Loader and the DecodedCache."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.cache_bench import CacheResult, ranks_pss_ratio, run_cache, shared_memory_pss
from benchmarks.loader_bench import run_loader
from benchmarks.tune_bench import SLICE_S, run_tune
from torchloom.testing import write_class_folders

LOADER_GOAL = 0.85
CACHE_GOALS = {"256": 10.0, "1080p": 5.0}
PSS_GOAL = 1.25  # summed worker PSS growth over the cache's size: ~1 when shared, ~2 when copied


def loader_section(quick: bool, table: Callable[[Sequence[dict[str, Any]]], str]) -> str:
    count = 512 if quick else 2048
    with tempfile.TemporaryDirectory(prefix="torchloom-bench-loader-") as root:
        write_class_folders(root, [count // 4] * 4, size=(256, 256), progress=False)
        started = time.perf_counter()
        result = run_loader(root, threads=2, rounds=2 if quick else 5)
    of_bare, of_workers = result.ratio(result.bare), result.ratio(result.dataloader)
    print(
        f"loader: vs bare {of_bare:.2f}, vs DataLoader {of_workers:.2f} "
        f"({time.perf_counter() - started:.0f} s)"
    )
    rows = [
        {
            "pipeline": "Loader (2 threads)",
            "img/s (best round)": f"{result.loader.best:,.0f}",
            "ratio": "1.00×",
        },
        {
            "pipeline": "bare limit (same calls, tight loop, 2 threads)",
            "img/s (best round)": f"{result.bare.best:,.0f}",
            "ratio": f"Loader {of_bare:.2f}×",
        },
        {
            "pipeline": "DataLoader (2 worker processes)",
            "img/s (best round)": f"{result.dataloader.best:,.0f}",
            "ratio": f"Loader {of_workers:.2f}×",
        },
    ]
    return "\n".join(
        [
            "## Thread Loader",
            "",
            f"The JPEG training pipeline of the section above (256 px sources, {count} files) through "
            "`torchloom.Loader(dataset, batch_size=64, num_threads=2)`, against its bare limit (the "
            "dataset's read/decode/transform calls in a tight loop on 2 threads of one process) and "
            "against `DataLoader(num_workers=2, persistent_workers=True)`. One epoch per round, rounds "
            "interleaved; ratios are medians of per-round ratios.",
            "",
            table(rows),
            "",
            "| goal | measured | met |",
            "|---|---|---|",
            f"| Loader ≥ {LOADER_GOAL}× its bare limit | {of_bare:.2f}× | "
            f"{'yes' if of_bare >= LOADER_GOAL else 'no'} |",
        ]
    )


def cache_section(quick: bool, table: Callable[[Sequence[dict[str, Any]]], str]) -> str:
    sizes = {
        "256": ((256, 256), 512 if quick else 2048, None),
        "1080p": ((1080, 1920), 64 if quick else 256, 320),
    }
    results: list[CacheResult] = []
    pss: tuple[float, float] | None = None
    ranks_ratio: float | None = None
    for name, (size, count, max_side) in sizes.items():
        with tempfile.TemporaryDirectory(prefix=f"torchloom-bench-cache-{name}-") as folder:
            root = os.path.join(folder, "data")
            write_class_folders(root, [count // 4] * 4, size=size, progress=False)
            started = time.perf_counter()
            result = run_cache(
                root,
                os.path.join(folder, "cache"),
                f"{name} ({count} JPEGs)",
                2,
                max_side,
                rounds=2 if quick else 5,
            )
            results.append(result)
            print(
                f"cache {name}: {result.ratio:.2f}× naive ({time.perf_counter() - started:.0f} s)", flush=True
            )
            if name == "256":
                pss = shared_memory_pss(root, os.path.join(folder, "memory-cache"))
                ranks_ratio = ranks_pss_ratio(root, os.path.join(folder, "memory-cache"))
    rows = [
        {
            "sources": r.source,
            "max_side": r.max_side or "-",
            "build s (once)": f"{r.build_s:.1f}",
            "cache MiB": f"{r.cache_mib:,.0f}",
            "naive img/s": f"{r.naive.best:,.0f}",
            "cache, 2 workers img/s": f"{r.cached.best:,.0f}",
            "cache, Loader 2 threads img/s": f"{r.cached_loader.best:,.0f}",
            "best cache vs naive": f"{r.ratio:.2f}×",
        }
        for r in results
    ]
    lines = [
        "## DecodedCache",
        "",
        "One shuffled epoch of RandomResizedCrop 224 + flip per round, naive PIL pipeline (as above, 2 "
        "DataLoader workers, persistent, after a warm-up epoch) against "
        "`DecodedCache(FolderDataset(..., transform), "
        "path, max_side=...)` with `collate`, read by 2 DataLoader workers and by `Loader(num_threads=2)`: "
        "the crop is drawn per epoch from each sample's own "
        "`(seed, epoch, index)`, on the cached image. The ratio takes the faster of the two cache readers. "
        "Building the cache (every file decoded once, in threads) is timed apart.",
        "",
        table(rows),
        "",
    ]
    if pss is not None:
        lines += [
            f'`location="memory"`: 2 workers each read the whole {pss[0]:,.0f} MiB cache; their PSS grew by '
            f"{pss[1]:,.0f} MiB together ({pss[1] / pss[0]:.2f}× the cache: its pages are counted once, "
            "shared, "
            "not once per worker).",
            "",
        ]
    lines += ["| goal | measured | met |", "|---|---|---|"]
    for r in results:
        goal = CACHE_GOALS[r.source.split()[0]]
        lines.append(
            f"| {r.source}: cache ≥ {goal:g}× naive | {r.ratio:.2f}× | {'yes' if r.ratio >= goal else 'no'} |"
        )
    if pss is not None:
        shared = pss[1] / pss[0]
        lines.append(
            f"| memory cache counted once in PSS (≤ {PSS_GOAL}× its size over 2 workers) | {shared:.2f}× | "
            f"{'yes' if shared <= PSS_GOAL else 'no'} |"
        )
    if ranks_ratio is not None:
        lines.append(
            f"| memory cache mapped once by 2 local ranks (≤ {PSS_GOAL}× its size in PSS) | "
            f"{ranks_ratio:.2f}× | {'yes' if ranks_ratio <= PSS_GOAL else 'no'} |"
        )
    return "\n".join(lines)


TUNE_GOAL = 0.9
PROFILER_OVERHEAD_GOAL = 0.02


def tune_section(quick: bool, table: Callable[[Sequence[dict[str, Any]]], str]) -> str:
    count = 512 if quick else 1024
    with tempfile.TemporaryDirectory(prefix="torchloom-bench-tune-") as root:
        write_class_folders(root, [count // 4] * 4, size=(256, 256), progress=False)
        started = time.perf_counter()
        result = run_tune(root, rounds=1 if quick else 2, budget_s=10 if quick else 30)
    print(
        f"tune: chosen {result.chosen.name} at {result.ratio:.2f}× the grid's best {result.best.name}; "
        f"profiler overhead {result.profiler_overhead:.2%} ({time.perf_counter() - started:.0f} s)",
        flush=True,
    )
    rows = [
        {
            "setting": trial.name,
            "samples/s": f"{trial.samples_per_s:,.0f}",
            "": "grid's best" if trial.setting == result.best.setting else "",
        }
        for trial in result.grid
    ]
    overhead = result.profiler_overhead
    return "\n".join(
        [
            "## Autotuner and profiler",
            "",
            f"The JPEG training pipeline ({count} 256 px JPEGs, batches of 64). The full grid: every setting "
            f"`tune()` may consider here, each measured for {SLICE_S:g} s of steady state (best of the "
            "rounds). Then `tune(dataset, batch_size=64, budget_s=...)` searches on its own "
            f"({result.tune_s:.0f} s); its choice and the grid's best are re-measured side by side (3 "
            "interleaved rounds, best of each) "
            "for the ratio.",
            "",
            table(rows),
            "",
            f"`tune()` chose {result.chosen.name}: {result.chosen.samples_per_s:,.0f} samples/s, "
            f"{result.ratio:.2f}× the grid's best ({result.best.name}, {result.best.samples_per_s:,.0f}).",
            "",
            "LoaderProfiler overhead, measured apart from the pipeline's noise (best of 5 rounds each): "
            f"{result.profiler_costs[0]:.1f} µs per batch of bookkeeping around the loader, "
            f"{result.profiler_costs[1]:.1f} µs per sample of stage timing inside the dataset (its clock "
            "readings and additions), against "
            f"{result.profiler_costs[2]:.0f} µs per sample for the pipeline itself: {overhead:.2%} of a "
            "loop's time.",
            "",
            "A training loop: a tiny CNN on the CPU (the demo's) for one epoch, fed by the naive loader and "
            "by torchloom with the settings `tune()` chose, each timed by `LoaderProfiler`:",
            "",
            table(
                [
                    {
                        "loop": loop.name,
                        "samples/s": f"{loop.samples_per_s:,.0f}",
                        "waiting for data": f"{loop.wait_share:.0%}",
                        "LoaderProfiler's verdict": loop.verdict,
                    }
                    for loop in result.loops
                ]
            ),
            "",
            "| goal | measured | met |",
            "|---|---|---|",
            f"| tune() within 10% of the full grid's best | {result.ratio:.2f}× | "
            f"{'yes' if result.ratio >= TUNE_GOAL else 'no'} |",
            f"| LoaderProfiler overhead < 2% of wall time | {overhead:.2%} | "
            f"{'yes' if overhead < PROFILER_OVERHEAD_GOAL else 'no'} |",
        ]
    )
