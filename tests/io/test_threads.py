"""One rule for the threads file work starts when not told how many, decided in one place: one per
core this process may use (its CPU affinity), at most 32; the Loader's batch threads at most 8."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import torchloom.cache.build
import torchloom.cache.fingerprint
import torchloom.datasets.index
import torchloom.io.threads as threads
import torchloom.testing
import torchloom.tools.doctor.examine
import torchloom.tools.prepare.raw
from torchloom import DecodedCache, FolderDataset, Loader
from torchloom.datasets import TableDataset
from torchloom.testing import write_class_folders
from torchloom.tools.doctor import diagnose
from torchloom.tools.prepare import parse_rules, prepare_dataset


def cores(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """This process may run on ``count`` cores, whatever the machine has."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(count)), raising=False)


def test_the_defaults_follow_the_cores_this_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    cores(monkeypatch, 3)
    assert threads.usable_cores() == threads.file_threads() == threads.batch_threads() == 3
    cores(monkeypatch, 64)
    assert threads.file_threads() == threads.MAX_FILE_THREADS == 32
    assert threads.batch_threads() == threads.MAX_BATCH_THREADS == 8


FILE_WORK: dict[str, tuple[Any, Callable[[Path], object]]] = {
    "dataset validation": (torchloom.datasets.index, lambda data: FolderDataset(data, progress=False)),
    "cache build and fingerprint": (
        (torchloom.cache.build, torchloom.cache.fingerprint),
        lambda data: DecodedCache(FolderDataset(data, progress=False), data.parent / "cache", progress=False),
    ),
    "doctor": (torchloom.tools.doctor.examine, lambda data: diagnose(data, progress=False)),
    "prepare": (
        torchloom.tools.prepare.raw,
        lambda data: prepare_dataset(
            str(data), str(data.parent / "out"), rules=parse_rules(["a:class_0", "b:class_1"]), progress=False
        ),
    ),
    "synthetic data": (torchloom.testing, lambda data: write_class_folders(data, [1], progress=False)),
}


@pytest.mark.parametrize("work", list(FILE_WORK))
def test_file_work_starts_one_thread_per_usable_core(
    work: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    write_class_folders(data, [3, 3], size=(16, 16), progress=False)
    modules, run = FILE_WORK[work]
    started: list[int | None] = []

    def executor(max_workers: int | None = None, **options: Any) -> ThreadPoolExecutor:
        started.append(max_workers)
        return ThreadPoolExecutor(max_workers=max_workers, **options)

    for module in modules if isinstance(modules, tuple) else (modules,):
        monkeypatch.setattr(module, "ThreadPoolExecutor", executor)
    cores(monkeypatch, 3)
    run(data)
    assert started and set(started) == {3}, started


def test_the_loader_starts_one_batch_thread_per_usable_core(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow as pa

    table = TableDataset(pa.table({"x": list(range(8))}))
    cores(monkeypatch, 3)
    assert Loader(table, batch_size=2).num_threads == 3
    cores(monkeypatch, 64)
    assert Loader(table, batch_size=2).num_threads == 8


@pytest.mark.parametrize("count", [0, -1, 1.5, True])
def test_file_work_refuses_a_thread_count_that_is_not_one_or_more(count: Any, tmp_path: Path) -> None:
    """0 used to mean the default silently (``num_threads or default``), in the library's file work
    as in the Loader, which refuses it too."""
    from torchloom.errors import ConfigError
    from torchloom.tools.doctor.examine import examine_files

    write_class_folders(tmp_path, [2], size=(8, 8), progress=False)
    paths = [str(path) for path in sorted(tmp_path.rglob("*.jpg"))]
    with pytest.raises(ConfigError, match="num_threads must be an integer >= 1"):
        examine_files(paths, num_threads=count)
    with pytest.raises(ConfigError, match="num_threads must be an integer >= 1"):
        threads.file_threads(count)
