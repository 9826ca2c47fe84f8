"""Object store: map-style datasets reading JPEGs from S3, against the loop a user writes with s3fs.

A real S3 server (SeaweedFS on loopback, ``tests/s3server.py``) behind the tests' fault proxy
(``tests/s3proxy.py``) adding 20 ms to every request, S3's usual first-byte latency, and counting
requests by kind. Same objects, same store, same run:

- throughput: a naive ``Dataset`` whose ``__getitem__`` GETs one object with s3fs ``cat_file`` and
  decodes it, in ``DataLoader(num_workers=2)``, against ``ManifestDataset`` (``validate="none"``) in
  ``DataLoader(num_workers=2, collate_fn=collate)`` and in ``Loader(num_threads=2)``;
- time to the first batch: a 100,000-row manifest, against ``FolderDataset`` on the prefix (a
  listing) and against listing the prefix with s3fs ``find`` and building the naive dataset;
- LitData (``StreamingRawDataset``, and ``StreamingDataset`` over chunks in the same bucket), run in
  ``.venv-peers`` by ``benchmarks/objectstore_litdata.py``; what fails is reported with its error.

Usage: ``python -m benchmarks.objectstore_bench [--quick]`` (``PYTHONPATH=src:.:tests``), or
``python -m benchmarks.run --only objectstore``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import simplejpeg
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from benchmarks.common import Measurement, count_items, interleave
from torchloom import FolderDataset, Image, Label, Loader, ManifestDataset, collate
from torchloom.io import ObjectStore
from torchloom.testing import synthetic_image

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The S3 server and the fault proxy are the test suite's helpers (tests/ is no package): the
# benchmark imports them from there rather than keeping a copy.
sys.path.insert(0, os.path.join(REPO, "tests"))

from s3client import bucket_name_for, storage_options_for  # noqa: E402
from s3proxy import FaultProxy, RequestCounts  # noqa: E402
from s3server import S3Bucket, S3Server  # noqa: E402

PEERS_PYTHON = os.path.join(REPO, ".venv-peers", "bin", "python")
if not os.path.exists(PEERS_PYTHON):  # a worktree shares the main checkout's peers venv
    PEERS_PYTHON = os.path.join("/work/main", ".venv-peers", "bin", "python")
LATENCY_S = 0.020
SIZE = 64
BATCH = 64
WORKERS = 2
CLASSES = ("cat", "dog")
MANIFEST_ROWS = 100_000
GOAL = 5.0
REQUESTS_GOAL = 1.0
FIRST_BATCH_GOAL_S = 2.0
LITDATA_TIMEOUT_S = 300.0


def serve_proxy(upstream: str, connection: Any) -> None:
    """A FaultProxy in this (child) process, driven over ``connection``."""
    with FaultProxy(upstream) as proxy:
        connection.send(proxy.endpoint)
        while True:
            command, value = connection.recv()
            if command == "stop":
                return
            if command == "latency":
                proxy.latency = value
            elif command == "reset":
                proxy.reset_counts()
            connection.send(proxy.requests)


class ProxyProcess:
    """The tests' FaultProxy in a process of its own: in this one its threads would take the GIL
    from the thread Loader (a real store's latency costs the client no CPU)."""

    def __init__(self, upstream: str) -> None:
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        self._process = context.Process(target=serve_proxy, args=(upstream, child), daemon=True)
        self._process.start()
        self.endpoint: str = self._connection.recv()

    def _ask(self, command: str, value: Any = None) -> RequestCounts:
        self._connection.send((command, value))
        counts: RequestCounts = self._connection.recv()
        return counts

    @property
    def storage_options(self) -> dict[str, Any]:
        return storage_options_for(self.endpoint)

    @property
    def requests(self) -> RequestCounts:
        return self._ask("counts")

    def reset_counts(self) -> None:
        self._ask("reset")

    def set_latency(self, seconds: float) -> None:
        self._ask("latency", seconds)

    def __enter__(self) -> ProxyProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self._connection.send(("stop", None))
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()


def jpeg(index: int) -> bytes:
    image = synthetic_image(np.random.default_rng(index), SIZE, SIZE, index % 2)
    return simplejpeg.encode_jpeg(image, quality=85)


def key_of(index: int) -> str:
    return f"train/{CLASSES[index % 2]}/{index:05d}.jpg"


class NaiveS3Dataset(Dataset[tuple[torch.Tensor, int]]):
    """What a user writes: one s3fs ``cat_file`` per sample, decoded in ``__getitem__``.

    The filesystem is made once per process (lazily, so each DataLoader worker has its own: an s3fs
    instance is not fork-safe), as a user following the s3fs documentation would.
    """

    def __init__(self, paths: Sequence[str], labels: Sequence[int], storage_options: dict[str, Any]):
        self.paths, self.labels, self.storage_options = list(paths), list(labels), storage_options
        self._fs: Any = None
        self._pid = -1

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        import s3fs

        if self._fs is None or self._pid != os.getpid():
            self._fs, self._pid = (
                s3fs.S3FileSystem(skip_instance_cache=True, **self.storage_options),
                os.getpid(),
            )
        data = self._fs.cat_file(self.paths[index])
        image = torch.from_numpy(simplejpeg.decode_jpeg(data)).permute(2, 0, 1).contiguous()
        return image, self.labels[index]


class PassSampler(Sampler[int]):
    """The indices of the next pass, set before each (the loaders are built once, workers persistent)."""

    def __init__(self) -> None:
        self.indices: list[int] = []

    def __iter__(self) -> Iterator[int]:
        return iter(list(self.indices))

    def __len__(self) -> int:
        return len(self.indices)


@dataclass
class Pipeline:
    name: str
    loader: Any
    sampler: PassSampler
    size: int  # samples in the dataset
    per_pass: int  # samples in a timed pass
    requests: list[RequestCounts]
    samples: list[int]

    def per_sample(self) -> float:
        counts = sum((c.object_gets + c.heads + c.lists) for c in self.requests)
        return counts / max(1, sum(self.samples))


def requests_of(counts: RequestCounts) -> int:
    return counts.object_gets + counts.heads + counts.lists


def run_pass(
    proxy: ProxyProcess, pipeline: Pipeline, rng: np.random.Generator, count: int
) -> tuple[float, int]:
    """Seconds and samples of one pass over ``count`` random samples; counts the requests."""
    pipeline.sampler.indices = rng.permutation(pipeline.size)[:count].tolist()
    proxy.reset_counts()
    started = time.perf_counter()
    seen = sum(count_items(batch) for batch in pipeline.loader)
    elapsed = time.perf_counter() - started
    pipeline.requests.append(proxy.requests)
    pipeline.samples.append(seen)
    return elapsed, seen


def populate(server: S3Server, bucket: S3Bucket, count: int) -> None:
    fs = server.filesystem()
    fs.pipe({bucket.path(key_of(i)): jpeg(i) for i in range(count)})
    rows = "".join(f"{key_of(i).split('/', 1)[1]},{CLASSES[i % 2]}\n" for i in range(count))
    fs.pipe(bucket.path("train/manifest.csv"), f"file,label\n{rows}".encode())
    # 100,000 rows naming the same objects in turn: each row names an object that exists.
    big = "".join(
        f"{key_of(i % count).split('/', 1)[1]},{CLASSES[i % count % 2]}\n" for i in range(MANIFEST_ROWS)
    )
    fs.pipe(bucket.path(f"train/manifest-{MANIFEST_ROWS // 1000}k.csv"), f"file,label\n{big}".encode())


def manifest(bucket: S3Bucket, store: ObjectStore, name: str = "manifest.csv") -> ManifestDataset:
    return ManifestDataset(
        bucket.url_of(f"train/{name}"),
        fields=[Image("file"), Label("label")],
        storage_options=store,
        validate="none",
        progress=False,
    )


def throughput(
    proxy: ProxyProcess, bucket: S3Bucket, count: int, naive_count: int, rounds: int
) -> tuple[list[Pipeline], dict[str, Measurement]]:
    options = proxy.storage_options
    naive_set = NaiveS3Dataset(
        [bucket.path(key_of(i)) for i in range(count)], [i % 2 for i in range(count)], options
    )
    samplers = [PassSampler() for _ in range(3)]
    common = {"batch_size": BATCH, "num_workers": WORKERS, "persistent_workers": True, "prefetch_factor": 4}
    ours_loader = manifest(bucket, ObjectStore(options))
    ours_threads = manifest(bucket, ObjectStore(options))
    pipelines = [
        Pipeline(
            "naive: s3fs cat_file per sample, DataLoader (2 workers)",
            DataLoader(naive_set, sampler=samplers[0], **common),
            samplers[0],
            count,
            naive_count,
            [],
            [],
        ),
        Pipeline(
            "torchloom ManifestDataset, DataLoader (2 workers) + collate",
            DataLoader(ours_loader, sampler=samplers[1], collate_fn=collate, **common),
            samplers[1],
            count,
            count,
            [],
            [],
        ),
        Pipeline(
            "torchloom ManifestDataset, Loader (2 threads)",
            Loader(ours_threads, batch_size=BATCH, sampler=samplers[2], num_threads=WORKERS),
            samplers[2],
            count,
            count,
            [],
            [],
        ),
    ]
    rng = np.random.default_rng(0)
    for pipeline in pipelines:  # warm-up: workers started, connections open (not counted)
        run_pass(proxy, pipeline, rng, 2 * BATCH)
        pipeline.requests.clear()
        pipeline.samples.clear()

    def timed(pipeline: Pipeline) -> Callable[[], list[float]]:
        def run() -> list[float]:
            elapsed, seen = run_pass(proxy, pipeline, rng, pipeline.per_pass)
            print(f"objectstore: {pipeline.name}: {seen / elapsed:,.0f} img/s", flush=True)
            return [seen / elapsed]

        return run

    runs = {p.name: timed(p) for p in pipelines}
    # A B C, then C B A: each pipeline's rounds sit at the same mean position in the run.
    forward = interleave(1, runs)
    measurements = forward
    for _ in range(rounds - 1):
        backward = interleave(1, dict(reversed(list(runs.items()))))
        for name, m in backward.items():
            measurements[name].rates.extend(m.rates)
    for pipeline in pipelines:
        if isinstance(pipeline.loader, DataLoader):
            del pipeline.loader  # shut the persistent workers down
    return pipelines, measurements


@dataclass
class FirstBatch:
    name: str
    seconds: float
    rows: int
    counts: RequestCounts


def first_batch(proxy: ProxyProcess, name: str, build: Callable[[], tuple[Any, int]]) -> FirstBatch:
    """From nothing to the first batch of a fresh ``DataLoader(num_workers=2)``, shuffled."""
    proxy.reset_counts()
    started = time.perf_counter()
    loader, rows = build()
    next(iter(loader))
    seconds = time.perf_counter() - started
    counts = proxy.requests
    del loader
    print(f"objectstore: first batch, {name}: {seconds:.2f} s, {counts}", flush=True)
    return FirstBatch(name, seconds, rows, counts)


def time_to_first_batch(proxy: ProxyProcess, bucket: S3Bucket) -> list[FirstBatch]:
    options = proxy.storage_options
    loader_options = {"batch_size": BATCH, "num_workers": WORKERS, "shuffle": True}

    def big_manifest() -> tuple[Any, int]:
        dataset = manifest(bucket, ObjectStore(options), name=f"manifest-{MANIFEST_ROWS // 1000}k.csv")
        return DataLoader(dataset, collate_fn=collate, **loader_options), len(dataset)

    def folder() -> tuple[Any, int]:
        dataset = FolderDataset(
            bucket.url + "/train", storage_options=ObjectStore(options), validate="none", progress=False
        )
        return DataLoader(dataset, collate_fn=collate, **loader_options), len(dataset)

    def naive_listing() -> tuple[Any, int]:
        import s3fs

        fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
        paths = sorted(p for p in fs.find(bucket.path("train")) if p.endswith(".jpg"))
        labels = [CLASSES.index(p.rsplit("/", 2)[1]) for p in paths]
        return DataLoader(NaiveS3Dataset(paths, labels, options), **loader_options), len(paths)

    cases = [
        (f"torchloom ManifestDataset, {MANIFEST_ROWS:,}-row CSV manifest", big_manifest),
        ("torchloom FolderDataset on the prefix (a listing)", folder),
        ("naive: s3fs find on the prefix, then the naive dataset", naive_listing),
    ]
    return [first_batch(proxy, name, build) for name, build in cases]


def litdata(
    proxy: ProxyProcess, server: S3Server, bucket: S3Bucket, count: int, workdir: str
) -> dict[str, Any]:
    """LitData's two S3 readers over the same objects, in ``.venv-peers``; errors, never made-up rates."""
    if not os.path.exists(PEERS_PYTHON):
        return {"raw": {"error": f"no {PEERS_PYTHON}"}}
    local = os.path.join(workdir, "jpegs")
    os.makedirs(local)
    for i in range(count):
        with open(os.path.join(local, f"{i:05d}.jpg"), "wb") as handle:
            handle.write(jpeg(i))
    results: dict[str, Any] = {}

    def peer(step: str, *args: str) -> dict[str, Any]:
        command = [PEERS_PYTHON, os.path.join(REPO, "benchmarks", "objectstore_litdata.py"), step, *args]
        proxy.reset_counts()
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=LITDATA_TIMEOUT_S, cwd=workdir
            )
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {LITDATA_TIMEOUT_S:.0f} s"}
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if not lines:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return {"error": f"exit {done.returncode}: " + " / ".join(tail)}
        result: dict[str, Any] = json.loads(lines[-1])
        result["requests"] = proxy.requests
        if "error" in result:  # the root cause, from the traceback (a worker's error is wrapped)
            causes = [line.strip() for line in done.stderr.splitlines() if "Original error:" in line]
            causes = [
                cause + (" (reqwest: BadScheme)" if "BadScheme" in done.stderr else "") for cause in causes
            ]
            if causes and causes[-1] not in result["error"]:
                result["error"] += f" (last error in its output: {causes[-1][:400]})"
        return result

    endpoint = proxy.endpoint
    results["raw"] = peer("raw", endpoint, f"s3://{bucket.name}/train/")
    optimized = os.path.join(workdir, "optimized")
    made = peer("optimize", local, optimized)
    if "error" in made:
        results["stream"] = results["stream-boto3"] = {"error": "litdata.optimize: " + made["error"]}
        return results
    server.filesystem().put(optimized, bucket.path("litdata"), recursive=True)
    for step in ("stream", "stream-boto3"):
        results[step] = peer(step, endpoint, f"s3://{bucket.name}/litdata", os.path.join(workdir, step))
    return results


def litdata_rows(results: dict[str, Any], naive: float) -> tuple[list[dict[str, str]], list[str]]:
    rows, notes = [], []
    names = {
        "raw": "LitData StreamingRawDataset on the prefix, StreamingDataLoader (2 workers)",
        "stream": "LitData StreamingDataset over optimized chunks in the bucket, StreamingDataLoader "
        "(2 workers), first (cold) epoch",
        "stream-boto3": "the same, LitData's boto3 downloader (obstore switched off in the script), first "
        "(cold) epoch",
    }
    for kind, name in names.items():
        result = results.get(kind, {"error": "not run"})
        if "error" in result:
            notes.append(f"- {name}: **no figure**: {result['error']}")
            continue
        counts: RequestCounts = result["requests"]
        rate = result["samples"] / result["seconds"]
        rows.append(
            {
                "pipeline": name,
                "img/s (best round)": f"{rate:,.0f}",
                "img/s (median)": f"{rate:,.0f}",
                "vs naive": f"{rate / naive:.1f}×",
                "requests per sample": f"{requests_of(counts) / result['samples']:.3f}",
            }
        )
        notes.append(
            f"- {name}: {result['samples']:,} samples in {result['seconds']:.1f} s, one pass; requests "
            f"during it: {counts.gets} GETs, {counts.ranged_gets} ranged GETs, {counts.heads} HEADs, "
            f"{counts.lists} LISTs. {result.get('note', '')}".rstrip()
        )
    return rows, notes


def objectstore_section(quick: bool, table: Callable[[Sequence[dict[str, Any]]], str] | None = None) -> str:
    from benchmarks.common import markdown_table

    table = table or markdown_table
    count = 640 if quick else 4000
    naive_count = 128 if quick else 640
    rounds = 1 if quick else 2
    started = time.perf_counter()
    with (
        S3Server() as server,
        ProxyProcess(server.endpoint) as proxy,
        tempfile.TemporaryDirectory(prefix="torchloom-bench-objectstore-") as workdir,
    ):
        bucket = server.make_bucket(bucket_name_for("bench-objectstore"))
        populate(server, bucket, count)
        sizes = [len(jpeg(i)) for i in range(0, count, max(1, count // 50))]
        print(f"objectstore: {count} objects in {time.perf_counter() - started:.0f} s", flush=True)
        proxy.set_latency(LATENCY_S)
        pipelines, measured = throughput(proxy, bucket, count, naive_count, rounds)
        firsts = time_to_first_batch(proxy, bucket)
        peers = litdata(proxy, server, bucket, count, workdir)
    naive = measured[pipelines[0].name]
    rows = []
    for pipeline in pipelines:
        m = measured[pipeline.name]
        rows.append(
            {
                "pipeline": pipeline.name,
                "img/s (best round)": f"{m.best:,.0f}",
                "img/s (median)": f"{m.median:,.0f}",
                "vs naive": f"{m.best / naive.best:.1f}×",
                "requests per sample": f"{pipeline.per_sample():.3f}",
            }
        )
    peer_rows, peer_notes = litdata_rows(peers, naive.best)
    ours = max(measured[p.name].best for p in pipelines[1:])
    ratio = ours / naive.best
    worst_requests = max(p.per_sample() for p in pipelines[1:])
    manifest_first = firsts[0]
    first_rows = [
        {
            "dataset": f.name,
            "rows": f"{f.rows:,}",
            "to first batch": f"{f.seconds:.2f} s",
            "LISTs": f.counts.lists,
            "GETs (ranged)": f"{f.counts.gets} ({f.counts.ranged_gets})",
            "HEADs": f.counts.heads,
        }
        for f in firsts
    ]
    lines = [
        "## Object store",
        "",
        f"{count:,} JPEGs of {SIZE}×{SIZE} ({min(sizes) / 1024:.1f}–{max(sizes) / 1024:.1f} KiB) in a bucket "
        "of a real S3 server (SeaweedFS on loopback, the test suite's `tests/s3server.py`), read through "
        f"the tests' proxy (`tests/s3proxy.py`), which adds {LATENCY_S * 1000:.0f} ms to every request "
        "(S3's usual first-byte latency) and counts requests by kind. Batches of 64, 2 workers or threads; "
        "each loader is built once (workers persistent) and warmed up on 2 batches. A round times one pass "
        f"of each pipeline, rounds interleaved A B C C B A ({rounds} each); the naive pass reads "
        f"{naive_count} random images, torchloom's all {count:,} in random order (rates are per image). "
        "Requests per sample: object GETs + HEADs + LISTs seen by the proxy during the timed passes, over "
        "the samples read.",
        "",
        "- **naive**: `__getitem__` calls s3fs `cat_file` on one object (one `S3FileSystem` per worker) and "
        "decodes it with simplejpeg; default collate.",
        '- **torchloom**: `ManifestDataset(url_of_manifest_csv, fields=[Image("file"), Label("label")], '
        'storage_options=ObjectStore(options), validate="none")`; `__getitems__` fetches a batch\'s '
        "objects concurrently (one GET each).",
        "- **LitData** (0.2.76, in `.venv-peers`, by `benchmarks/objectstore_litdata.py`; decodes with PIL, "
        "simplejpeg not being installed there: at 64×64 decoding is a small part of a sample's time).",
        "",
        table(rows + peer_rows),
        "",
        *peer_notes,
        "",
        f"Time to the first batch: from nothing (no dataset, no filesystem) to the first batch of a fresh "
        "shuffled `DataLoader(batch_size=64, num_workers=2)` (worker start included), through the same "
        f"proxy. The manifest has {MANIFEST_ROWS:,} rows naming the {count:,} objects in turn (each row "
        f"names an object that exists; {count:,} distinct objects, since putting {MANIFEST_ROWS:,} objects "
        'on this server takes too long): with `validate="none"` no request is made per row, so what it '
        "costs is reading and parsing the rows. The listings cover the "
        f"{count:,} objects of the prefix only ({-(-count // 1000)} LIST pages of 1,000 keys); a listing "
        f"of {MANIFEST_ROWS:,} objects would take {MANIFEST_ROWS // 1000} pages, one after another.",
        "",
        table(first_rows),
        "",
        "| goal | measured | met |",
        "|---|---|---|",
        f"| torchloom ≥ {GOAL:g}× naive images/s (the better of DataLoader and Loader) | {ratio:.1f}× | "
        f"{'yes' if ratio >= GOAL else 'no'} |",
        f"| torchloom requests per sample = {REQUESTS_GOAL:g} (the worse of the two) | "
        f"{worst_requests:.3f} | "
        f"{'yes' if worst_requests <= REQUESTS_GOAL + 1e-9 else 'no'} |",
        f"| {MANIFEST_ROWS:,}-row manifest: first batch ≤ {FIRST_BATCH_GOAL_S:g} s | "
        f"{manifest_first.seconds:.2f} s | "
        f"{'yes' if manifest_first.seconds <= FIRST_BATCH_GOAL_S else 'no'} |",
        f"| {MANIFEST_ROWS:,}-row manifest: zero LIST requests | {manifest_first.counts.lists} | "
        f"{'yes' if manifest_first.counts.lists == 0 else 'no'} |",
    ]
    print(f"objectstore: {time.perf_counter() - started:.0f} s", flush=True)
    return "\n".join(lines)


if __name__ == "__main__":
    print(objectstore_section(quick="--quick" in sys.argv))
