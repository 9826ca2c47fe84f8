"""torchloom against its peers (Hugging Face ``datasets``, WebDataset, LitData) on the JPEG training
pipeline, over the same files in the same run.

Pipeline: 256 px JPEGs -> decode -> RandomResizedCrop 224 -> horizontal flip -> uint8 CHW, batches
of 64, 2 workers. Each peer runs as its documentation shows, decoding and cropping with PIL
(``benchmarks.peers``), in a server process of its own: in this interpreter when it has the peer,
else in ``.venv-peers`` (a peer whose dependencies do not fit torchloom's; LitData pulls torchvision
and boto3, which pins python-dateutil < 3)::

    python3 -m venv .venv-peers
    .venv-peers/bin/pip install torch==2.13.0
    echo torch==2.13.0 > /tmp/torch.txt && .venv-peers/bin/pip install -c /tmp/torch.txt litdata

A peer found nowhere, or failing, is reported with the reason instead of a rate.

torchloom, without a cache: ``FolderDataset`` + ``Compose([RandomResizedCrop(224), HorizontalFlip()])``
through ``Loader(num_threads=2)`` and through ``DataLoader(num_workers=2)`` with ``collate``; with
the cache: ``DecodedCache`` over the same dataset, the same two ways. Every loader is built once
(workers persistent) and runs a warm-up epoch first; then each round times one shuffled epoch of
every pipeline back to back. Rates are medians over rounds; a ratio is the median over rounds of the
ratio within a round (``benchmarks.pipeline.paired_ratio``), for the better of torchloom's two ways.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import itertools
import json
import math
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmarks.common import Measurement, epoch_rate, interleave, shuffled_loader
from benchmarks.peers import PEER_MODULES, draw_box
from benchmarks.pipeline import CROP, paired_ratio, ratio_range
from torchloom import DecodedCache, FolderDataset, Loader, collate
from torchloom.testing import write_class_folders
from torchloom.transforms import Compose, HorizontalFlip, RandomResizedCrop

GOAL = 2.0
BATCH = 64
WORKERS = 2
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS_PYTHON = os.path.join(REPO, ".venv-peers", "bin", "python")
READY_TIMEOUT_S = 240.0
EPOCH_TIMEOUT_S = 120.0
WITHOUT_CACHE = ("torchloom Loader (2 threads)", "torchloom DataLoader (2 workers)")
WITH_CACHE = ("torchloom + cache Loader (2 threads)", "torchloom + cache DataLoader (2 workers)")
PEER_DOCS = {
    "hf-datasets": '`Dataset.from_dict` + `cast_column("image", Image())` + `set_transform`, `DataLoader`',
    "webdataset": '`ShardWriter` (8 tar shards), `WebDataset(...).shuffle(1000).decode("pil")`, '
    "batched in the workers, `WebLoader`",
    "litdata": "`optimize` (JPEG bytes as a `bytes` field, in a child process), `StreamingDataset` "
    "(PIL decode in `transform`: LitData's image serializer decodes with torchvision), "
    "`StreamingDataLoader`",
}


class PeerServer:
    """A ``benchmarks.peers`` server process: prepared and warmed up, timing an epoch on request."""

    def __init__(self, peer: str, python: str, manifest: str, workdir: str) -> None:
        self.peer, self.python = peer, python
        self.log = os.path.join(workdir, f"{peer}.log")
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [python, "-m", "benchmarks.peers", peer, manifest, workdir],
                cwd=REPO,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        if self.process.stdin is None or self.process.stdout is None:
            raise RuntimeError(f"{peer}: the server's pipes did not open")
        self.requests, self.answers = self.process.stdin, self.process.stdout
        self.version = ""
        self.prepare_s = 0.0
        self.failure: str | None = None

    def wait_ready(self, timeout_s: float) -> None:
        _, prepare_s, self.version = self._answer(timeout_s, "ready").split()
        self.prepare_s = float(prepare_s)

    def epoch(self) -> list[float]:
        """Images/s of one shuffled epoch; NaN, with :attr:`failure` set, once the server has failed."""
        if self.failure is None:
            try:
                self.requests.write("epoch\n")
                self.requests.flush()
                images, seconds = self._answer(EPOCH_TIMEOUT_S, "epoch").split()
                return [int(images) / float(seconds)]
            except (OSError, RuntimeError, ValueError) as error:
                self.failure = f"failed during the rounds: {error}"
        return [math.nan]

    def close(self) -> None:
        """End the server, or kill it when it does not end within 30 s."""
        if self.requests.closed:
            return
        with contextlib.suppress(BrokenPipeError):  # it has exited already
            self.requests.write("quit\n")
            self.requests.flush()
        with contextlib.suppress(BrokenPipeError):
            self.requests.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.answers.close()

    def _answer(self, timeout_s: float, waiting_for: str) -> str:
        if not select.select([self.answers], [], [], timeout_s)[0]:
            self.process.kill()
            raise RuntimeError(f"no answer ({waiting_for}) within {timeout_s:.0f} s: {self._last_log_line()}")
        line = self.answers.readline().strip()
        if line.startswith("error "):
            raise RuntimeError(line.removeprefix("error "))
        if not line:
            raise RuntimeError(f"the server exited: {self._last_log_line()}")
        return line

    def _last_log_line(self) -> str:
        with open(self.log, encoding="utf-8", errors="replace") as log:
            lines = [line.strip() for line in log if line.strip()]
        return lines[-1] if lines else "(nothing on its stderr)"


def peer_python(peer: str) -> str | None:
    """The interpreter that has ``peer``: this one, else ``.venv-peers``'s, else None."""
    try:
        importlib.metadata.version(PEER_MODULES[peer])
        return sys.executable
    except importlib.metadata.PackageNotFoundError:
        return PEERS_PYTHON if os.path.exists(PEERS_PYTHON) else None


def start_peers(manifest: str, workdir: str) -> tuple[dict[str, PeerServer], dict[str, str]]:
    """Start every peer's server (they prepare in parallel); the peers that cannot run, with why."""
    servers: dict[str, PeerServer] = {}
    missing: dict[str, str] = {}
    for peer, module in PEER_MODULES.items():
        python = peer_python(peer)
        if python is None:
            missing[peer] = f"not installed (`pip install {module}`, or into .venv-peers: see peers_bench.py)"
            continue
        folder = os.path.join(workdir, peer)
        os.makedirs(folder)
        servers[peer] = PeerServer(peer, python, manifest, folder)
    return servers, missing


def wait_for_peers(servers: dict[str, PeerServer], missing: dict[str, str]) -> dict[str, PeerServer]:
    """The servers that came up; the others are closed and their reasons added to ``missing``."""
    ready = {}
    for peer, server in servers.items():
        try:
            server.wait_ready(READY_TIMEOUT_S)
            ready[peer] = server
        except (RuntimeError, ValueError) as error:
            missing[peer] = f"failed: {error}"
            server.close()
    return ready


def torchloom_runs(dataset: Any, names: tuple[str, str]) -> dict[str, Callable[[], list[float]]]:
    """One epoch of ``dataset`` through a 2-thread Loader and through 2 DataLoader workers, each
    built once and warmed up by one epoch."""
    threads = Loader(dataset, batch_size=BATCH, shuffle=True, num_threads=WORKERS, prefetch=2)
    workers = shuffled_loader(dataset, num_workers=WORKERS, collate_fn=collate, batch_size=BATCH)
    epochs = iter(range(1, 1_000_000))

    def thread_epoch() -> list[float]:
        threads.set_epoch(next(epochs))
        return epoch_rate(threads)

    thread_epoch()
    epoch_rate(workers)
    return {names[0]: thread_epoch, names[1]: lambda: epoch_rate(workers)}


@dataclass
class PeersResult:
    files: int
    rounds: int
    rates: dict[str, Measurement]
    missing: dict[str, str]
    versions: dict[str, str]
    prepare_s: dict[str, float] = field(default_factory=dict)

    def best(self, names: tuple[str, str]) -> Measurement:
        """Of torchloom's two ways (Loader, DataLoader), the one with the higher median rate."""
        return max((self.rates[name] for name in names), key=lambda m: m.median)

    @property
    def peers(self) -> list[str]:
        return [peer for peer in PEER_MODULES if peer in self.rates]


def check_same_boxes(draws: int = 200) -> None:
    """Raise unless the peers' copy of the crop-box drawing draws torchloom's boxes."""
    crop = RandomResizedCrop(CROP)
    for seed, (height, width) in zip(range(draws), itertools.cycle([(256, 256), (180, 320), (500, 90)])):
        box = crop.draw_box(height, width, np.random.default_rng(seed))
        theirs = draw_box(height, width, np.random.default_rng(seed))
        if theirs != (box.left, box.top, box.left + box.width, box.top + box.height):
            raise RuntimeError(
                f"benchmarks.peers.draw_box drew {theirs} where torchloom's RandomResizedCrop drew {box} "
                f"(seed {seed}, {height}x{width}): copy torchloom's drawing into benchmarks/peers.py again"
            )


def run_peers(root: str, workdir: str, rounds: int) -> PeersResult:
    """Measure the peers and torchloom (without and with a cache) over the class folders in ``root``."""
    check_same_boxes()
    dataset = FolderDataset(
        root, transform=Compose([RandomResizedCrop(CROP), HorizontalFlip()]), progress=False
    )
    manifest = os.path.join(workdir, "manifest.json")
    with open(manifest, "w", encoding="utf-8") as handle:
        json.dump({"paths": dataset.index.paths.to_list(), "labels": dataset.targets.tolist()}, handle)
    servers, missing = start_peers(manifest, workdir)
    try:
        started = time.perf_counter()
        cache = DecodedCache(dataset, os.path.join(workdir, "cache"), progress=False)
        prepare_s = {"DecodedCache build": time.perf_counter() - started}
        runs = {**torchloom_runs(dataset, WITHOUT_CACHE), **torchloom_runs(cache, WITH_CACHE)}
        servers = wait_for_peers(servers, missing)
        for peer, server in servers.items():
            runs[peer] = server.epoch
            prepare_s[peer] = server.prepare_s
        rates = interleave(rounds, runs)
    finally:
        for server in servers.values():
            server.close()
    for peer, server in list(servers.items()):
        if server.failure is not None:
            missing[peer] = server.failure
            del rates[peer], servers[peer]
    versions = {
        peer: server.version + (" (in .venv-peers)" if server.python == PEERS_PYTHON else "")
        for peer, server in servers.items()
    }
    return PeersResult(len(dataset), rounds, rates, missing, versions, prepare_s)


def ratio_cell(ours: Measurement, peer: Measurement) -> str:
    return f"{paired_ratio(ours, peer):.2f}× ({ratio_range(ours, peer)})"


def result_tables(result: PeersResult, table: Callable[[Sequence[dict[str, Any]]], str]) -> list[str]:
    rates = [
        {"pipeline": name, "img/s (median)": f"{m.median:,.0f}", "img/s (best round)": f"{m.best:,.0f}"}
        for name, m in result.rates.items()
    ]
    rates += [
        {"pipeline": peer, "img/s (median)": why.replace("|", "/"), "img/s (best round)": "-"}
        for peer, why in result.missing.items()
    ]
    ratios = []
    goals = ["| goal | measured | met |", "|---|---|---|"]
    for label, names in (("without a cache", WITHOUT_CACHE), ("with DecodedCache", WITH_CACHE)):
        ours = result.best(names)
        row = {"torchloom": f"{label}: {ours.name}"}
        for peer in PEER_MODULES:
            row[f"vs {peer}"] = (
                ratio_cell(ours, result.rates[peer]) if peer in result.rates else "not measured"
            )
        ratios.append(row)
        for peer in result.peers:
            ratio = paired_ratio(ours, result.rates[peer])
            met = "yes" if ratio >= GOAL else "no"
            goals.append(f"| torchloom {label} ≥ {GOAL:g}× {peer} | {ratio:.2f}× | {met} |")
    return [table(rates), "", table(ratios), "", *goals]


def peers_section(quick: bool, table: Callable[[Sequence[dict[str, Any]]], str]) -> str:
    count, rounds = (256, 1) if quick else (2048, 5)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="torchloom-bench-peers-") as folder:
        root = os.path.join(folder, "data")
        write_class_folders(root, [count // 4] * 4, size=(256, 256), progress=False)
        result = run_peers(root, folder, rounds)
    elapsed = time.perf_counter() - started
    medians = {name: round(m.median) for name, m in result.rates.items()}
    print(f"peers: {medians} ({elapsed:.0f} s)", flush=True)
    versions = ", ".join(f"{PEER_MODULES[peer]} {version}" for peer, version in result.versions.items())
    how = "; ".join(f"**{peer}**: {PEER_DOCS[peer]}" for peer in PEER_MODULES)
    prepared = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in result.prepare_s.items())
    lines = [
        "## Peers",
        "",
        f"The JPEG training pipeline ({result.files} 256 px JPEGs: decode → RandomResizedCrop 224 → "
        f"horizontal flip → uint8 CHW, batches of {BATCH}, {WORKERS} workers) in Hugging Face `datasets`, "
        "WebDataset and LitData, each as its documentation shows, decoding and cropping with PIL (one "
        "`resize(box=...)` with torchloom's crop-box drawing): "
        f"{how}. Against torchloom without a cache (`FolderDataset` + torchloom transforms) and with "
        "`DecodedCache`, each through `Loader(num_threads=2)` and `DataLoader(num_workers=2)`; the "
        "faster of the two (higher median) is compared. Every loader is built once and warmed up by one "
        f"epoch; then {result.rounds} round(s) each time one shuffled epoch of every pipeline back to back. "
        "Ratios are the median over rounds of the ratio within a round (in brackets: lowest–highest).",
        "",
        *result_tables(result, table),
        "",
        f"Peers: {versions or 'none measured'}. Prepared once, not timed in the rates (peers: writing "
        f"their format and the warm-up epoch, in parallel): {prepared}. Section wall time {elapsed:.0f} s.",
    ]
    return "\n".join(lines)
