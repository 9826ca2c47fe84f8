"""``torchloom doctor`` against the bare decode limit and against cleanvision, on the same files.

- doctor: ``diagnose(root, num_threads=2)`` end to end (scan, read, hash, decode, perceptual hash,
  quality scores, duplicate search, report; no plots), files/s;
- bare limit: the same files read and fully decoded by simplejpeg in a tight loop on 2 threads
  (32 files a task, as doctor hands them out);
- examine only, on 1 and 2 threads and on 2 processes (half the files each), to choose the pool;
- cleanvision (benchmark-only dependency): ``Imagelab(data_path=root).find_issues()`` as its
  docs show, files/s;
- the near-duplicate search alone over n random 64-bit hashes with planted near pairs, against
  the brute-force all-pairs comparison where it is affordable: the search grows ~linearly.

Usage: ``python -m benchmarks.doctor_bench [--quick]``
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from functools import partial

import numpy as np
import simplejpeg

from benchmarks.common import markdown_table
from torchloom.testing import write_class_folders
from torchloom.tools.doctor import diagnose
from torchloom.tools.doctor.duplicates import NEAR_MAX_DISTANCE, hash_pairs
from torchloom.tools.doctor.examine import examine_files
from torchloom.tools.doctor.layout import find_layout
from torchloom.tools.doctor.perceptual import hamming

BARE_GOAL = 0.8
CLEANVISION_GOAL = 10.0
SEARCH_SIZES = (1_000, 4_000, 16_000, 64_000)
BRUTE_FORCE_MAX = 4_000


def _best(rounds: int, run: Callable[[], object]) -> float:
    return _interleaved(rounds, {"run": run})["run"]


def _interleaved(rounds: int, runs: dict[str, Callable[[], object]]) -> dict[str, float]:
    """The best time of each run over ``rounds`` rounds that take turns, so that the load of a
    shared machine falls on all of them alike (a ratio of two runs measured apart is noise)."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            started = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - started)
    return {name: min(values) for name, values in times.items()}


def _bare(paths: list[str]) -> None:
    def decode(path: str) -> None:
        with open(path, "rb") as handle:
            simplejpeg.decode_jpeg(handle.read())

    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(decode, paths, chunksize=32))


def _examine_processes(paths: list[str]) -> None:
    half = len(paths) // 2
    with ProcessPoolExecutor(max_workers=2) as pool:
        list(pool.map(_examine_one_thread, [paths[:half], paths[half:]]))


def _examine_one_thread(paths: list[str]) -> int:
    return len(examine_files(paths, num_threads=1).paths)


def _cleanvision(root: str) -> float | None:
    try:
        from cleanvision import Imagelab
    except ImportError:
        return None
    started = time.perf_counter()
    Imagelab(data_path=root).find_issues()
    return time.perf_counter() - started


def _brute_force(unique: np.ndarray) -> list[np.ndarray]:
    return [
        np.flatnonzero(hamming(unique[i], unique[i + 1 :]) <= NEAR_MAX_DISTANCE) for i in range(len(unique))
    ]


def search_scaling(sizes: tuple[int, ...] = SEARCH_SIZES) -> list[dict[str, str]]:
    """Time of the near-duplicate search alone over random hashes with 1 % planted near pairs."""
    rows = []
    rng = np.random.default_rng(0)
    for n in sizes:
        hashes = rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64) ^ (
            rng.integers(0, 2, n).astype(np.uint64) << np.uint64(63)
        )
        planted = n // 100
        for i in range(planted):
            bits = rng.choice(64, int(rng.integers(1, NEAR_MAX_DISTANCE + 1)), replace=False).astype(
                np.uint64
            )
            hashes[n - 1 - i] = hashes[i] ^ np.bitwise_or.reduce(np.uint64(1) << bits)
        unique = np.unique(hashes)
        seconds = _best(3, partial(hash_pairs, unique, NEAR_MAX_DISTANCE))
        found = len(hash_pairs(unique, NEAR_MAX_DISTANCE))
        brute = "-"
        if n <= BRUTE_FORCE_MAX:
            brute = f"{_best(1, partial(_brute_force, unique)) * 1e3:,.0f}"
        rows.append(
            {
                "hashes": f"{n:,}",
                "planted near pairs": str(planted),
                "pairs found": str(found),
                "search ms": f"{seconds * 1e3:,.1f}",
                "µs per hash": f"{seconds / n * 1e6:.1f}",
                "brute force ms": brute,
            }
        )
        print(f"doctor search: {rows[-1]}", flush=True)
    return rows


def doctor_section(quick: bool) -> str:
    count = 500 if quick else 2000
    with tempfile.TemporaryDirectory(prefix="torchloom-bench-doctor-") as folder:
        root = os.path.join(folder, "data")
        write_class_folders(root, [count // 2] * 2, size=(256, 256), progress=False)
        paths = find_layout(root).paths.to_list()
        _bare(paths[:200])  # warm the page cache and the decoder
        rounds = 2 if quick else 3
        best = _interleaved(
            rounds,
            {
                "bare": lambda: _bare(paths),
                "doctor": lambda: diagnose(root, num_threads=2),
                "two": lambda: examine_files(paths, num_threads=2),
            },
        )
        best["one"] = _best(1, lambda: examine_files(paths, num_threads=1))
        best["proc"] = _best(1, lambda: _examine_processes(paths))
        cleanvision = None if quick else _cleanvision(root)
    rate = {name: count / seconds for name, seconds in best.items()}
    print(f"doctor: {rate}", flush=True)
    cv_rate = count / cleanvision if cleanvision else None
    rows = [
        {"run": "bare limit: read + simplejpeg full decode, 2 threads", "files/s": f"{rate['bare']:,.0f}"},
        {"run": "doctor end to end (diagnose, num_threads=2, no plots)", "files/s": f"{rate['doctor']:,.0f}"},
        {"run": "examine only, 1 thread", "files/s": f"{rate['one']:,.0f}"},
        {"run": "examine only, 2 threads", "files/s": f"{rate['two']:,.0f}"},
        {"run": "examine only, 2 processes", "files/s": f"{rate['proc']:,.0f}"},
        {
            "run": "cleanvision 0.3 Imagelab.find_issues()",
            "files/s": f"{cv_rate:,.0f}" if cv_rate else "not run",
        },
    ]
    search = search_scaling(SEARCH_SIZES[:2] if quick else SEARCH_SIZES)
    ratio = rate["doctor"] / rate["bare"]
    lines = [
        "## Doctor",
        "",
        f"{count:,} 256 px JPEGs; best of {rounds} interleaved rounds. doctor decodes every file "
        "(DCT-scaled to ≥64 px), hashes it twice (BLAKE2b, DCT pHash), scores cleanvision's quality checks "
        "and searches duplicates.",
        "",
        markdown_table(rows),
        "",
        "Near-duplicate search alone (multi-index hashing, 4 bands, ≤ "
        f"{NEAR_MAX_DISTANCE} bits), random hashes:",
        "",
        markdown_table(search),
        "",
        "| goal | measured | met |",
        "|---|---|---|",
        f"| doctor ≥ {BARE_GOAL}× bare decode | {ratio:.2f}× | {'yes' if ratio >= BARE_GOAL else 'no'} |",
    ]
    if cv_rate:
        versus = rate["doctor"] / cv_rate
        met = "yes" if versus >= CLEANVISION_GOAL else "no"
        lines.append(f"| doctor ≥ {CLEANVISION_GOAL:.0f}× cleanvision | {versus:.1f}× | {met} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    print(doctor_section(parser.parse_args().quick))


if __name__ == "__main__":
    main()
