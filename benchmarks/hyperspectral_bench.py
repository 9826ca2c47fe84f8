"""Hyperspectral patch loading: windowed reads against reading the whole cube for every sample.

One 512 × 512 × 200 int16 cube (100 MB; ``quick``: 256 × 256 × 100) is written as an HDF5 dataset
(HWC, contiguous, as ``h5py`` writes by default) and as an ENVI BIL cube. Samples are 9 × 9
patches around random centres, returned as CHW int16 tensors:

- **torchloom**: ``HyperspectralDataset(..., masks=..., patch_size=9)``: an h5py slice, or a
  memmap slice of the ENVI file, of just the window (reflect padding at borders);
- **whole cube per sample** (what a naive ``__getitem__`` does): ``h5py`` ``dataset[()]`` or
  ``np.fromfile`` of the whole cube, then ``np.pad`` and the same window.

Both run in this process on the same centres, rounds interleaved, the best round reported. The
files sit in the page cache (just written), so the naive figure is a best case: from disk it is
slower still.

Usage: ``python -m benchmarks.hyperspectral_bench [--quick]``
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np
import torch

from torchloom.datasets.hyperspectral import HyperspectralDataset
from torchloom.io.envi import write_envi

PATCH = 9
GOAL = 20.0
ROUNDS = 3
FAST_SECONDS = 1.0  # per round, patch reader
NAIVE_SAMPLES = 8  # per round, whole-cube reads (each reads the whole file)


@dataclass
class PatchResult:
    source: str
    patches_per_s: float
    naive_per_s: float

    @property
    def ratio(self) -> float:
        return self.patches_per_s / self.naive_per_s


def make_cube(quick: bool) -> np.ndarray:
    lines, samples, bands = (256, 256, 100) if quick else (512, 512, 200)
    rng = np.random.default_rng(0)
    return rng.integers(0, 4000, size=(lines, samples, bands), dtype=np.int16)


def naive_hdf5(path: str, row: int, col: int) -> torch.Tensor:
    with h5py.File(path, "r") as handle:
        cube = handle["cube"][()]
    return _naive_patch(cube, row, col)


def naive_envi(path: str, shape: tuple[int, int, int], row: int, col: int) -> torch.Tensor:
    lines, samples, bands = shape
    cube = np.fromfile(path, dtype="<i2").reshape(lines, bands, samples).transpose(0, 2, 1)
    return _naive_patch(cube, row, col)


def _naive_patch(cube: np.ndarray, row: int, col: int) -> torch.Tensor:
    half = PATCH // 2
    padded = np.pad(cube, ((half, half), (half, half), (0, 0)), mode="reflect")
    return torch.from_numpy(padded[row : row + PATCH, col : col + PATCH].transpose(2, 0, 1).copy())


def rate(load: Callable[[int], Any], count: int | None, seconds: float | None) -> float:
    """Samples/s of ``load(i)`` over ``count`` samples, or as many as fit in ``seconds``."""
    started = time.perf_counter()
    done = 0
    while (count is not None and done < count) or (
        seconds is not None and time.perf_counter() - started < seconds
    ):
        load(done)
        done += 1
    return done / (time.perf_counter() - started)


def measure(
    name: str, dataset: HyperspectralDataset, naive: Callable[[int, int], torch.Tensor], order: np.ndarray
) -> PatchResult:
    """Best rates over interleaved rounds: the dataset's patches, and whole-cube reads at its centres."""

    def patch(i: int) -> Any:
        return dataset[int(order[i % len(order)])]

    def whole_cube(i: int) -> torch.Tensor:
        return naive(int(dataset.rows[order[i]]), int(dataset.cols[order[i]]))

    fast_rates, naive_rates = [], []
    for _ in range(ROUNDS):
        fast_rates.append(rate(patch, None, FAST_SECONDS))
        naive_rates.append(rate(whole_cube, NAIVE_SAMPLES, None))
    return PatchResult(name, max(fast_rates), max(naive_rates))


def run_hyperspectral(quick: bool = False) -> list[PatchResult]:
    cube = make_cube(quick)
    shape = cube.shape
    lines, samples, _ = shape
    rng = np.random.default_rng(1)
    mask = (rng.random((lines, samples)) < 0.2).astype(np.uint8)  # random labelled centres
    with tempfile.TemporaryDirectory(prefix="torchloom-bench-hsi-") as folder:
        h5_path = os.path.join(folder, "cube.h5")
        with h5py.File(h5_path, "w") as handle:
            handle.create_dataset("cube", data=cube)
        envi_path = write_envi(os.path.join(folder, "cube.img"), cube, interleave="bil", byte_order=0)
        del cube
        sources = {
            "HDF5 (HWC, contiguous)": (h5_path, lambda r, c: naive_hdf5(h5_path, r, c)),
            "ENVI (BIL, memmap)": (envi_path, lambda r, c: naive_envi(envi_path, shape, r, c)),
        }
        results = []
        for name, (path, naive) in sources.items():
            dataset = HyperspectralDataset(path, masks=mask, patch_size=PATCH)
            results.append(measure(name, dataset, naive, rng.permutation(len(dataset))))
            print(f"hyperspectral {name}: {results[-1]}", flush=True)
    return results


def hyperspectral_rows(results: Sequence[PatchResult]) -> list[dict[str, str]]:
    return [
        {
            "source": r.source,
            "torchloom patches/s": f"{r.patches_per_s:,.0f}",
            "whole cube per sample, patches/s": f"{r.naive_per_s:,.1f}",
            "ratio": f"{r.ratio:,.0f}×",
        }
        for r in results
    ]


def run(quick: bool = False) -> list[dict[str, str]]:
    """The table's rows (for ``benchmarks.run``)."""
    return hyperspectral_rows(run_hyperspectral(quick))


def hyperspectral_section(quick: bool, table: Callable[[Sequence[dict[str, Any]]], str]) -> str:
    results = run_hyperspectral(quick)
    size = "256 × 256 × 100 (13 MB)" if quick else "512 × 512 × 200 (100 MB)"
    lines = [
        "## Hyperspectral patches",
        "",
        f"{PATCH} × {PATCH} patches around random centres of an int16 cube of {size}, as CHW tensors, in "
        "this process. torchloom's `HyperspectralDataset` reads just the window (an h5py slice of the "
        "HDF5 dataset, a memmap slice of the ENVI file); the reference reads the whole cube for every "
        "sample (h5py `dataset[()]`, `np.fromfile`) and cuts the patch from it, as a naive `__getitem__` "
        f"does. Best of {ROUNDS} interleaved rounds; the files are in the page cache.",
        "",
        table(hyperspectral_rows(results)),
        "",
        "| goal | measured | met |",
        "|---|---|---|",
    ]
    lines += [
        f"| {r.source}: patch reads ≥ {GOAL:g}× whole-cube reads | {r.ratio:,.0f}× | "
        f"{'yes' if r.ratio >= GOAL else 'no'} |"
        for r in results
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a 13 MB cube instead of 100 MB")
    args = parser.parse_args()
    for row in run(args.quick):
        print(row)


if __name__ == "__main__":
    main()
