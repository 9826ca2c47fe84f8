"""Object store, cubes: 9x9 hyperspectral patches from an ENVI cube in the store, read by byte
ranges, against downloading the cube for each sample (what a dataset without ranged reads does).

One cube (1,000 x 1,000 pixels x 200 bands of int16, band-interleaved by pixel: 400 MB) on the
tests' SeaweedFS server, read through their proxy adding 20 ms per request (in a process of its
own, as in the object-store section). torchloom's
``HyperspectralDataset`` on the cube's URL reads each patch as the 9 byte runs its rows cover, at
the same time; the naive sample GETs the whole object and slices it. Both give the same patches
(checked). Rounds A B B A; rates are per patch.

Run alone: ``python -m benchmarks.objectstore_cubes [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any

import numpy as np

# The bench starts the tests' own S3 server and proxy: one definition of both.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from benchmarks.common import markdown_table
from benchmarks.objectstore_bench import ProxyProcess
from s3client import filesystem_for
from s3server import S3Server
from torchloom.datasets import HyperspectralDataset
from torchloom.io import ObjectStore, write_envi

TITLE = "## Object store: hyperspectral patches"
GOAL = 50.0
LATENCY_S = 0.020
PATCH = 9


def cube_values(lines: int, samples: int, bands: int) -> np.ndarray:
    """A deterministic int16 cube, written a block of lines at a time (no 800 MB temporary)."""
    rng = np.random.default_rng(0)
    return rng.integers(-2000, 8000, size=(lines, samples, bands), dtype=np.int16)


def naive_patch(fs: Any, key: str, shape: tuple[int, int, int], row: int, col: int) -> np.ndarray:
    """The patch centred at ``(row, col)``, from the whole cube downloaded (reflect padding)."""
    lines, samples, bands = shape
    cube = np.frombuffer(fs.cat_file(key), dtype="<i2").reshape(lines, samples, bands)
    half = PATCH // 2
    rows = np.clip(np.arange(row - half, row + half + 1), 0, lines - 1)
    cols = np.clip(np.arange(col - half, col + half + 1), 0, samples - 1)
    return cube[np.ix_(rows, cols)].transpose(2, 0, 1).copy()


def cube_section(quick: bool = False) -> str:
    lines, samples, bands = (200, 200, 100) if quick else (1000, 1000, 200)
    patches_fast, patches_naive = (12, 2) if quick else (40, 3)
    with (
        tempfile.TemporaryDirectory() as folder,
        S3Server() as server,
        ProxyProcess(server.endpoint) as proxy,
    ):
        bucket = server.make_bucket("cubes-bench")
        values = cube_values(lines, samples, bands)
        path = write_envi(os.path.join(folder, "scene.img"), values, interleave="bip")
        del values
        fs = server.filesystem()
        fs.put(path, bucket.path("scene.img"))
        fs.put(os.path.splitext(path)[0] + ".hdr", bucket.path("scene.hdr"))
        size = os.path.getsize(path)
        shape = (lines, samples, bands)
        proxy.set_latency(LATENCY_S)
        rng = np.random.default_rng(1)
        centres = zip(rng.integers(0, lines, 64).tolist(), rng.integers(0, samples, 64).tolist(), strict=True)
        mask = np.full((lines, samples), -1, np.int64)
        for r, c in centres:
            mask[r, c] = 1
        store = ObjectStore(proxy.storage_options)
        dataset = HyperspectralDataset(
            bucket.url_of("scene.hdr"), masks=[mask], patch_size=PATCH, padding="constant",
            ignore_label=-1, storage_options=store,
        )
        positions = [tuple(dataset[i]["position"]) for i in range(len(dataset))]
        naive_fs = filesystem_for(proxy.storage_options)

        def fast_round() -> tuple[float, int]:
            began = time.perf_counter()
            for i in range(patches_fast):
                dataset[i % len(dataset)]
            return (time.perf_counter() - began) / patches_fast, patches_fast

        def naive_round() -> tuple[float, int]:
            began = time.perf_counter()
            for i in range(patches_naive):
                row, col = positions[i]
                naive_patch(naive_fs, bucket.path("scene.img"), shape, row, col)
            return (time.perf_counter() - began) / patches_naive, patches_naive

        # Same patches from both (the naive one clips at the border; compare interior centres).
        inside = range(PATCH, min(lines, samples) - PATCH)
        interior = [i for i, (r, c) in enumerate(positions) if r in inside and c in inside]
        check = interior[0]
        row, col = positions[check]
        whole = naive_patch(naive_fs, bucket.path("scene.img"), shape, row, col)
        same = np.array_equal(dataset[check]["image"].numpy(), whole)
        proxy.reset_counts()
        before = store.stats.bytes
        fast_a, _ = fast_round()
        fast_requests = proxy.requests.object_gets / patches_fast
        fast_bytes = (store.stats.bytes - before) / patches_fast
        naive_a, _ = naive_round()
        naive_b, _ = naive_round()
        fast_b, _ = fast_round()
    fast = min(fast_a, fast_b)
    naive = min(naive_a, naive_b)
    ratio = naive / fast
    rows = [
        {"reader": "torchloom HyperspectralDataset, byte ranges", "ms per patch": f"{fast * 1e3:.1f}",
         "GETs per patch": f"{fast_requests:.1f}", "bytes per patch": f"{fast_bytes:,.0f}"},
        {"reader": "naive: GET the whole cube, slice", "ms per patch": f"{naive * 1e3:.0f}",
         "GETs per patch": "1", "bytes per patch": f"{size:,}"},
    ]
    lines_out = [
        TITLE,
        "",
        f"A {lines}x{samples}x{bands} int16 ENVI cube (bip, {size / 1e6:.0f} MB) on SeaweedFS behind the "
        f"tests' proxy (+{LATENCY_S * 1e3:.0f} ms per request); {PATCH}x{PATCH} patches at random centres; "
        f"rounds A B B A, the better of each; the same patch from both: {'yes' if same else 'NO'}.",
        "",
        markdown_table(rows),
        "",
        markdown_table([{"goal": f"byte ranges >= {GOAL:.0f}x downloading the cube per sample",
                         "measured": f"{ratio:.0f}x", "met": "yes" if ratio >= GOAL and same else "no"}]),
    ]
    return "\n".join(lines_out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    print(cube_section(parser.parse_args().quick))
