"""Run the benchmark suite and write BENCHMARKS.md.

Every figure is a ratio against a reference measured in the same run on the same files, because
these machines are noisy; each rate is the best of several interleaved rounds.

Usage: ``python -m benchmarks.run --out BENCHMARKS.md [--quick]``
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import tempfile
import time
from collections.abc import Callable

import torch

from benchmarks.collate_bench import (
    BATCH,
    ROUNDS,
    WORKER_ROUNDS,
    WORKER_SAMPLES,
    WORKERS,
    run_collate,
    run_collate_workers,
)
from benchmarks.common import cpu_count, markdown_table
from benchmarks.compare import COMPARISON_TITLE, comparison_section, written_on
from benchmarks.doctor_bench import doctor_section
from benchmarks.fast_path import cache_section, loader_section, tune_section
from benchmarks.hyperspectral_bench import hyperspectral_section
from benchmarks.memory import ROWS, run_memory
from benchmarks.objectstore_bench import objectstore_section
from benchmarks.objectstore_cubes import cube_section
from benchmarks.peers_bench import peers_section
from benchmarks.pipeline import PipelineResult, as_rows, run_pipeline
from benchmarks.resume_bench import resume_section
from benchmarks.sampler_bench import INDICES, run_samplers
from benchmarks.timesync_bench import ONLINE_ROUNDS, ONLINE_TICKS, TICKS, run_timesync
from benchmarks.timesync_bench import ROUNDS as SYNC_ROUNDS
from benchmarks.video_bench import video_section
from torchloom.testing import write_class_folders

GOALS = {
    "256": ("vs naive", 3.0),
    "1080p": ("vs naive", 5.0),
}
BARE_GOAL = 0.85
MEMORY_GOAL = 0.1


def pipeline_section(quick: bool) -> tuple[str, list[PipelineResult]]:
    sizes = {"256": ((256, 256), 512 if quick else 2048), "1080p": ((1080, 1920), 128 if quick else 256)}
    results: list[PipelineResult] = []
    for source, (size, count) in sizes.items():
        with tempfile.TemporaryDirectory(prefix=f"torchloom-bench-{source}-") as root:
            write_class_folders(root, [count // 4] * 4, size=size, progress=False)
            for workers in (0, 2):
                started = time.perf_counter()
                results.append(
                    run_pipeline(root, f"{source} ({count} JPEGs)", workers, rounds=2 if quick else 7)
                )
                print(
                    f"pipeline {source} workers={workers}: {as_rows(results[-1:])[0]} "
                    f"({time.perf_counter() - started:.0f} s)",
                    flush=True,
                )
    lines = [
        "## JPEG training pipeline",
        "",
        "decode → RandomResizedCrop 224 → horizontal flip → CHW batches of 64. Each round times one "
        "shuffled epoch of each pipeline back to back (with workers: persistent workers, after a warm-up "
        "epoch). Rates are the best round; ratios are the median over rounds of the ratio within a "
        "round (in brackets: the lowest and highest round), which cancels much of this machine's noise.",
        "",
        "- **naive**: PIL open + convert, PIL crop + bilinear resize, flip, float32 normalise in "
        "`__getitem__`, default collate.",
        "- **torchloom**: `FolderDataset` + `Compose([RandomResizedCrop(224), HorizontalFlip()])` + "
        "`collate`; uint8 batches (normalise on the batch). JPEGs decode DCT-scaled when the crop allows.",
        "- **bare limit**: the same read/decode/transform calls in a tight loop over the same files, in "
        "the same number of processes, no DataLoader.",
        "",
        markdown_table(as_rows(results)),
        "",
        "| goal | measured | met |",
        "|---|---|---|",
    ]
    for result in results:
        key = "256" if result.source.startswith("256") else "1080p"
        goal = GOALS[key][1]
        lines.append(
            f"| {result.source}, {result.num_workers} workers: torchloom ≥ {goal:g}× naive | "
            f"{result.speedup:.2f}× | {'yes' if result.speedup >= goal else 'no'} |"
        )
    for result in results:
        lines.append(
            f"| {result.source}, {result.num_workers} workers: torchloom ≥ {BARE_GOAL}× bare limit | "
            f"{result.of_bare:.2f}× | {'yes' if result.of_bare >= BARE_GOAL else 'no'} |"
        )
    return "\n".join(lines), results


def memory_section(quick: bool) -> str:
    rows = 100_000 if quick else ROWS
    ours, reference, machinery = run_memory(rows)
    raw = ours.pss_growth_mib / reference.pss_growth_mib
    beyond = max(0.0, ours.pss_growth_mib - machinery.pss_growth_mib) / max(
        1e-9, reference.pss_growth_mib - machinery.pss_growth_mib
    )
    print(f"memory: ours {ours}, reference {reference}, machinery {machinery}", flush=True)
    table = markdown_table(
        [
            {
                "dataset": r.name,
                "samples read": f"{r.samples:,}",
                "worker PSS growth": f"{r.pss_growth_mib:.1f} MiB",
                "worker private growth": f"{r.private_growth_mib:.1f} MiB",
            }
            for r in (ours, reference, machinery)
        ]
    )
    return "\n".join(
        [
            "## Worker memory on a large manifest",
            "",
            f"A {rows:,}-row Parquet manifest (path, class, two numbers, a title), one full pass with "
            "`num_workers=2`, batches of 1000; growth of the two workers' PSS and private memory summed, "
            "from the end of each worker's first batch to the end of the pass.",
            "",
            table,
            "",
            "| goal | measured | met |",
            "|---|---|---|",
            f"| extra worker PSS ≤ {MEMORY_GOAL}× list of dicts, beyond the DataLoader's own growth | "
            f"{beyond:.3f}× | {'yes' if beyond <= MEMORY_GOAL else 'no'} |",
            f"| the same without subtracting the DataLoader's own growth (for reference) | {raw:.3f}× | "
            f"{'yes' if raw <= MEMORY_GOAL else 'no'} |",
            "",
            "The DataLoader's own growth is measured with a dataset that returns samples of the same "
            "structure from no metadata at all; it is the same for any dataset returning a small tensor "
            "per sample (allocator growth in the worker), not copy-on-write of metadata.",
        ]
    )


def collate_section(quick: bool) -> str:
    results = run_collate()
    for result in results:
        print(f"collate: {result}", flush=True)
    worker_rounds, worker_samples = (1, 512) if quick else (WORKER_ROUNDS, WORKER_SAMPLES)
    worker_ratio, worker_rates = run_collate_workers(worker_rounds, worker_samples)
    print(f"collate through workers: {worker_ratio:.2f}x {worker_rates}", flush=True)
    worker_rows = [
        {"collate_fn": name, "img/s (median)": f"{m.median:,.0f}", "img/s (best round)": f"{m.best:,.0f}"}
        for name, m in worker_rates.items()
    ]
    rows = [
        {
            "comparison": r.name,
            "torchloom batches/s": f"{r.ours:,.0f}",
            "reference batches/s": f"{r.reference:,.0f}",
            "ratio": f"{r.ratio:.2f}×",
        }
        for r in results
    ]
    same, pooled, variable = results
    return "\n".join(
        [
            "## Collate",
            "",
            f"Batches of {BATCH} in this process (best of {ROUNDS} interleaved rounds of 0.5 s). "
            "Same-shape samples: a 3×224×224 uint8 image, an int label, 8 float32 numbers. "
            "Variable-size: 3×H×W uint8 images with H, W in 160–256; the reference is the source "
            "document's `image_collate_fn` (float images, bilinear "
            "interpolation towards the batch maximum keeping the aspect ratio, pad, stack); `PadImages` pads "
            "without resizing and adds a mask and the sizes.",
            "`Collate()` stacks as `collate` does in this process; in a DataLoader worker it stacks "
            "into shared buffers of its own pool (below).",
            "",
            markdown_table(rows),
            "",
            f"Through {WORKERS} persistent DataLoader workers (prefetch 4, after a warm-up epoch): a dataset "
            f"of the user's own ({worker_samples} samples, each a copy of a prepared 3×224×224 uint8 image "
            "and a label, so the hand-off of batches between processes is what is measured), batched by "
            "`Collate()` (stacked into shared buffers each worker writes again once the main process drops "
            f"the batch) and by `default_collate` (a fresh shared buffer per batch); {worker_rounds} "
            "interleaved epochs each, the ratio the median of per-round ratios.",
            "",
            markdown_table(worker_rows),
            "",
            "| goal | measured | met |",
            "|---|---|---|",
            f"| collate ≥ 0.85× default_collate | {same.ratio:.2f}× | "
            f"{'yes' if same.ratio >= 0.85 else 'no'} |",
            f"| Collate() vs default_collate, in this process: report the ratio | {pooled.ratio:.2f}× "
            "| reported |",
            f"| Collate() vs default_collate, through {WORKERS} workers: report the ratio "
            f"| {worker_ratio:.2f}× | reported |",
            f"| PadImages vs interpolate-then-pad: report the ratio | {variable.ratio:.2f}× | reported |",
        ]
    )


def sampler_section() -> str:
    results = run_samplers()
    for result in results:
        print(f"sampler: {result}", flush=True)
    rows = [
        {
            "sampler": r.name,
            "torchloom indices/s": f"{r.ours_per_second:,.0f}",
            "WeightedRandomSampler indices/s": f"{r.torch_per_second:,.0f}",
            "ratio": f"{r.ratio:.2f}×",
        }
        for r in results
    ]
    lines = [
        "## Samplers",
        "",
        f"One epoch of {INDICES:,} indices, from `iter(sampler)` to the last index, in this process, best "
        "of 3 rounds each. torchloom's samplers yield `SampleKey`s (ints carrying the epoch); the reference "
        "is `torch.utils.data.WeightedRandomSampler` with the same weights (for BalancedSampler: `1 / "
        "class count` per sample, over 10 imbalanced classes).",
        "",
        markdown_table(rows),
        "",
        "| goal | measured | met |",
        "|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.name} ≥ 1× WeightedRandomSampler | {r.ratio:.2f}× | {'yes' if r.ratio >= 1 else 'no'} |"
        )
    return "\n".join(lines)


def merge_sections(path: str, fresh: list[str]) -> list[str]:
    """The sections of an existing BENCHMARKS.md, with those measured now replaced."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    old = ["## " + part.strip() for part in text.split("\n## ")[1:]]
    titles = {section.splitlines()[0]: section for section in fresh}
    merged = [titles.pop(section.splitlines()[0], section) for section in old]
    return merged + list(titles.values())


def timesync_section() -> str:
    result = run_timesync()
    print(f"timesync: {result}", flush=True)
    online = result.online
    lines = [
        "## TimeSync",
        "",
        f"Offline: 3 streams, {TICKS:,} reference ticks (camera 10 Hz; IMU 30 Hz and GPS 5 Hz with "
        "jitter), nearest record within 20 ms, gaps masked, timed from the input arrays to the aligned "
        'result, against `pandas.merge_asof` (`direction="nearest"`, `tolerance`) building the same '
        "columns: each stream's value, offset `dt` and validity. TimeSync keeps each tick's chosen record "
        "and reads values when a sample is taken; merge_asof copies the value columns. Same streams "
        "with float seconds, int64 nanoseconds since the epoch (~1.7e18) and `datetime64[ns]`. "
        f"Best of {SYNC_ROUNDS} interleaved rounds. The two choose the same records "
        f"({'checked: validity and dt agree' if result.agree else 'checked: they DISAGREE'} on 50,000 "
        "ticks, float seconds); with int64 nanoseconds and a miss, merge_asof's matched-time column turns "
        "float64, so its `dt` falls on 256 ns steps, while TimeSync's stays an exact int.",
        "",
        "| timestamps | TimeSync offline ticks/s | merge_asof ticks/s | ratio |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {pair.name} | {pair.timesync:,.0f} | {pair.reference:,.0f} | {pair.ratio:.2f}× |"
        for pair in result.offline
    ]
    lines += [
        "",
        f"Online: {ONLINE_TICKS:,} ticks of Python `(timestamp, value)` records through iterators "
        "(float seconds, same streams and rule), against the straightforward Python loop (`bisect` per "
        f"tick and stream over lists, one dict per tick). Best of {ONLINE_ROUNDS} interleaved rounds.",
        "",
        "| mode | ticks/s | ratio |",
        "|---|---|---|",
        f"| TimeSync online | {online.timesync:,.0f} | {online.ratio:.2f}× |",
        f"| Python loop reference | {online.reference:,.0f} | 1.00× |",
        "",
        "| goal | measured | met |",
        "|---|---|---|",
    ]
    lines += [
        f"| offline ≥ merge_asof ({pair.name}) | {pair.ratio:.2f}× | {'yes' if pair.ratio >= 1 else 'no'} |"
        for pair in result.offline
    ]
    lines.append(f"| online ≥ Python loop | {online.ratio:.2f}× | {'yes' if online.ratio >= 1 else 'no'} |")
    return "\n".join(lines)


SECTIONS: dict[str, Callable[[bool], str]] = {
    "pipeline": lambda quick: pipeline_section(quick)[0],
    "memory": memory_section,
    "collate": collate_section,
    "samplers": lambda quick: sampler_section(),
    "timesync": lambda quick: timesync_section(),
    "loader": lambda quick: loader_section(quick, markdown_table),
    "cache": lambda quick: cache_section(quick, markdown_table),
    "tune": lambda quick: tune_section(quick, markdown_table),
    "resume": lambda quick: resume_section(quick, markdown_table),
    "peers": lambda quick: peers_section(quick, markdown_table),
    "doctor": doctor_section,
    "hyperspectral": lambda quick: hyperspectral_section(quick, markdown_table),
    "video": lambda quick: video_section(quick, markdown_table),
    "objectstore": lambda quick: objectstore_section(quick, markdown_table),
    "objectstore-cubes": cube_section,
}
"""Every section of BENCHMARKS.md, in order: ``--only NAME`` re-measures one."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="BENCHMARKS.md")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--only", choices=list(SECTIONS), default=None)
    args = parser.parse_args()
    header = [
        "# torchloom benchmarks",
        "",
        f"Written by `make bench` (`python -m benchmarks.run{' --quick' if args.quick else ''}`) on "
        f"{datetime.date.today().isoformat()}: {platform.machine()}, {cpu_count()} CPUs, "
        f"Python {platform.python_version()}, torch {torch.__version__}. Ratios compare runs made in the "
        "same process on the same generated files."
        + (
            f" The {args.only} section was last re-measured alone (`--only {args.only}`)."
            if args.only
            else ""
        ),
        "",
    ]
    sections = []
    for name, section in SECTIONS.items():
        if args.only in (None, name):
            started = time.perf_counter()
            sections.append(section(args.quick))
            print(f"section {name}: {time.perf_counter() - started:.0f} s", flush=True)
    gpu = os.path.join(os.path.dirname(os.path.abspath(args.out)), "benchmarks", "GPU.md")
    if os.path.exists(gpu):
        with open(gpu, encoding="utf-8") as handle:
            sections.append(handle.read().strip())
    if args.only is not None and os.path.exists(args.out):
        stamp = f"\n\n_Re-measured alone: `python -m benchmarks.run --only {args.only}`._"
        measured = [s + stamp if not s.startswith("## GPU") else s for s in sections]
        # The comparison described the whole previous run: with one section re-measured it no longer holds.
        sections = [s for s in merge_sections(args.out, measured) if not s.startswith(COMPARISON_TITLE)]
    elif os.path.exists(args.out):
        with open(args.out, encoding="utf-8") as handle:
            previous = handle.read()
        sections.insert(0, comparison_section(previous, "\n".join(sections), written_on(previous)))
    with open(args.out, "w", encoding="utf-8") as handle:
        handle.write("\n".join(header) + "\n" + "\n\n".join(sections) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
