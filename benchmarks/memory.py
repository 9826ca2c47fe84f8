"""Worker memory growth: a 1,000,000-row manifest read in one full pass with 2 workers.

torchloom's ManifestDataset keeps the rows in numpy buffers; the reference keeps the same rows
as a Python list of dicts, whose reference counts are written on every access and so copy each
touched page into every forked worker (copy-on-write growth). Each worker reports its own PSS
and private memory (USS) growth from ``/proc/self/smaps_rollup`` as the pass goes.

The DataLoader itself grows a worker by tens of MiB over a million small-tensor samples whatever
the dataset (measured here with :class:`ConstantSamples`, which holds no metadata), so the
benchmark reports both the raw ratio and the ratio of growth beyond that machinery baseline.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch.utils.data import DataLoader, Dataset

from torchloom import Label, ManifestDataset, Numeric, Text, collate

ROWS = 1_000_000
BATCH = 1000
CLASSES = np.array(["ok", "scratch", "dent", "stain"])


def smaps_kib() -> tuple[int, int]:
    """(PSS, private) of this process in KiB."""
    fields: dict[str, int] = {}
    with open("/proc/self/smaps_rollup") as handle:
        for line in handle:
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                fields[parts[0].rstrip(":")] = int(parts[1])
    return fields["Pss"], fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)


class ListOfDicts(Dataset[dict[str, Any]]):
    """The reference: rows held as a Python list of dicts."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        self.class_to_idx = {name: i for i, name in enumerate(sorted(set(CLASSES.tolist())))}

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, Any]:
        row = self.rows[index]
        return {
            "label": self.class_to_idx[row["defect"]],
            "numeric": torch.tensor([row["age"], row["weight"]], dtype=torch.float32),
            "file": row["path"],
            "title": row["title"],
            "index": index,
        }


class ConstantSamples(Dataset[dict[str, Any]]):
    """Samples of the same structure from no metadata at all: the DataLoader's own growth."""

    def __init__(self, rows: int) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {
            "label": 1,
            "numeric": torch.tensor([1.0, 2.0]),
            "file": "images/0001/part_0000001.jpg",
            "title": "part 1 from line 1",
            "index": index,
        }


class MemoryProbe(Dataset[Any]):
    """Wraps a dataset; each batch fetch prepends (pid, PSS growth, private growth) in KiB.

    Growth is counted from the end of the worker's first batch, so the one-time cost of a
    worker's first fetch (allocator arenas, torch's first tensors) is not counted as growth.
    """

    def __init__(self, dataset: Dataset[Any]) -> None:
        self.dataset = dataset
        self.baseline: tuple[int, int] | None = None

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitems__(self, indices: list[int]) -> list[Any]:
        samples = [self.dataset[i] for i in indices]
        pss, private = smaps_kib()
        if self.baseline is None:  # after the first batch: one-time allocations are not growth
            self.baseline = (pss, private)
        return [(os.getpid(), pss - self.baseline[0], private - self.baseline[1]), *samples]


def probe_collate(batch: list[Any]) -> tuple[Any, tuple[int, int, int]]:
    return collate(batch[1:]), batch[0]


@dataclass
class MemoryResult:
    name: str
    pss_growth_mib: float
    private_growth_mib: float
    samples: int


def worker_growth(name: str, dataset: Dataset[Any]) -> MemoryResult:
    """Sum over 2 workers of each one's memory growth at the end of one pass."""
    loader = DataLoader(MemoryProbe(dataset), batch_size=BATCH, num_workers=2, collate_fn=probe_collate)
    last: dict[int, tuple[int, int]] = {}
    seen = 0
    for batch, (pid, pss, private) in loader:
        last[pid] = (pss, private)
        seen += len(batch["label"])
    pss_total = sum(value[0] for value in last.values()) / 1024
    private_total = sum(value[1] for value in last.values()) / 1024
    return MemoryResult(name, pss_total, private_total, seen)


def make_manifest(folder: str, rows: int = ROWS) -> str:
    rng = np.random.default_rng(0)
    table = pa.table(
        {
            "path": [f"images/{i // 1000:04d}/part_{i:07d}.jpg" for i in range(rows)],
            "defect": CLASSES[rng.integers(0, len(CLASSES), rows)],
            "age": rng.uniform(0, 10, rows),
            "weight": rng.uniform(1, 5, rows),
            "title": [f"part {i} from line {i % 17}" for i in range(rows)],
        }
    )
    path = os.path.join(folder, "manifest.parquet")
    pq.write_table(table, path)
    return path


def run_memory(rows: int = ROWS) -> tuple[MemoryResult, MemoryResult, MemoryResult]:
    """(torchloom, list of dicts, DataLoader machinery alone) worker growth over one pass."""
    machinery = worker_growth("no metadata (DataLoader's own growth)", ConstantSamples(rows))
    with tempfile.TemporaryDirectory(prefix="torchloom-mem-") as folder:
        path = make_manifest(folder, rows)
        ours = ManifestDataset(
            path,
            fields=[Label("defect"), Numeric(["age", "weight"]), Text("path", name="file"), Text("title")],
            validate="none",
            progress=False,
        )
        torchloom_result = worker_growth("torchloom ManifestDataset", ours)
        del ours
        reference = ListOfDicts(pq.read_table(path).to_pylist())
        reference_result = worker_growth("list of dicts", reference)
    return torchloom_result, reference_result, machinery
