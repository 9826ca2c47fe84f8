"""DecodedCache shared by the processes of a node: one copy mapped by every local rank, one builder,
builders and copiers killed mid-way taken over, copies keyed by content, evicted under a budget."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from torchloom import FolderDataset
from torchloom.cache import CacheSpaceError, DecodedCache
from torchloom.cache import build as build_module
from torchloom.cache import memory as memory_module
from torchloom.cache.storage import read_meta, write_meta
from torchloom.testing import write_class_folders

SPAWN = multiprocessing.get_context("spawn")
#: Seconds a child may take to start (spawn imports torch) or to answer.
WAIT_S = 120


@pytest.fixture
def shm_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A folder of its own in shared memory: tests running beside these never see their copies."""
    root = os.path.join("/dev/shm", f"torchloom-test-{uuid.uuid4().hex[:8]}")
    os.mkdir(root)
    monkeypatch.setattr(memory_module, "SHM_ROOT", root)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def folders(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    write_class_folders(root, [8, 6], size=(64, 64), progress=False)
    return root


def open_cache(dataset: Any, path: Path | str, **kwargs: Any) -> DecodedCache:
    return DecodedCache(dataset, path, location="memory", progress=False, **kwargs)


def pss_bytes() -> int:
    with open("/proc/self/smaps_rollup") as handle:
        for line in handle:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no Pss line in /proc/self/smaps_rollup")


def copies_in(root: str) -> list[str]:
    return sorted(name for name in os.listdir(root) if name.startswith("torchloom-cache-"))


def start(target: Any, *args: Any) -> Any:
    process = SPAWN.Process(target=target, args=args)
    process.start()
    return process


def join_all(processes: list[Any]) -> None:
    for process in processes:
        process.join(timeout=WAIT_S)
        assert process.exitcode == 0, f"child {process.pid} exited with {process.exitcode}"


# -- children (spawned: they set shared memory's folder themselves) -----------------------------


def _read_whole_cache(data: str, path: str, shm: str, barrier: Any, results: Any) -> None:
    memory_module.SHM_ROOT = shm
    dataset = FolderDataset(data, progress=False)
    with DecodedCache(dataset, path, progress=False) as warm:  # the reading code's pages and heap
        for index in range(4):
            warm[index]
    del warm
    barrier.wait(timeout=WAIT_S)  # every rank started: the libraries' pages are divided alike
    before = pss_bytes()
    cache = open_cache(dataset, path)
    for index in range(len(cache)):
        cache[index]  # every page of the copy mapped in this process
    barrier.wait(timeout=WAIT_S)  # every rank maps the copy: its pages are divided among them
    grown = pss_bytes() - before
    barrier.wait(timeout=WAIT_S)  # measured before any rank closes
    results.put((grown, cache.nbytes, cache.report.built, cache.report.copied, cache._folder))


def _open_together(data: str, path: str, shm: str, barrier: Any, results: Any) -> None:
    memory_module.SHM_ROOT = shm
    dataset = FolderDataset(data, progress=False)
    barrier.wait(timeout=WAIT_S)
    cache = open_cache(dataset, path)
    results.put((cache.report.built, cache.report.copied, cache._folder, cache.meta["build_id"]))
    barrier.wait(timeout=WAIT_S)  # nobody closes (and removes the copy) before every one opened it


def _build_and_hang(data: str, path: str, events: Any) -> None:
    decode = build_module._decode

    def stalls(*args: Any) -> Any:
        image = decode(*args)
        events.put("decoding")
        threading.Event().wait()  # killed here, mid-build
        return image

    pytest.MonkeyPatch().setattr(build_module, "_decode", stalls)  # in this child only
    DecodedCache(FolderDataset(data, progress=False), path, progress=False, num_threads=1)


def _copy_and_hang(data: str, path: str, shm: str, events: Any) -> None:
    memory_module.SHM_ROOT = shm
    copy = shutil.copyfile

    def stalls(source: str, target: str) -> Any:
        copy(source, target)
        events.put("copying")
        threading.Event().wait()  # killed here, after the first file

    pytest.MonkeyPatch().setattr(memory_module.shutil, "copyfile", stalls)  # in this child only
    open_cache(FolderDataset(data, progress=False), path)


def _open_and_hang(data: str, path: str, shm: str, events: Any) -> None:
    memory_module.SHM_ROOT = shm
    cache = open_cache(FolderDataset(data, progress=False), path)
    events.put(cache._folder)
    threading.Event().wait()  # killed here, holding the copy


def _killed_when(target: Any, message: str | None, *args: Any) -> str:
    """Run ``target`` in a child, SIGKILL it once it reports, return its report."""
    events = SPAWN.Queue()
    process = start(target, *args, events)
    report = events.get(timeout=WAIT_S)
    assert message is None or report == message
    os.kill(process.pid, signal.SIGKILL)
    process.join(timeout=WAIT_S)
    assert process.exitcode == -signal.SIGKILL
    return str(report)


# -- one copy per node ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def large_cache(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """64 MiB of decoded pixels, built on disk: large beside what other processes sharing the same
    libraries move in a rank's PSS (a few MiB)."""
    folder = tmp_path_factory.mktemp("large")
    write_class_folders(folder / "data", [16] * 4, size=(576, 576), progress=False)
    DecodedCache(FolderDataset(folder / "data", progress=False), folder / "cache", progress=False).close()
    return folder / "data", folder / "cache"


@pytest.mark.parametrize("ranks", [2, 4])
def test_local_ranks_map_one_copy(large_cache: tuple[Path, Path], shm_root: str, ranks: int) -> None:
    data, path = large_cache
    barrier, results = SPAWN.Barrier(ranks), SPAWN.Queue()
    processes = [
        start(_read_whole_cache, str(data), str(path), shm_root, barrier, results) for _ in range(ranks)
    ]
    outcomes = [results.get(timeout=WAIT_S) for _ in processes]
    join_all(processes)
    nbytes = outcomes[0][1]
    assert nbytes >= 60 << 20
    grown = sum(outcome[0] for outcome in outcomes)
    assert grown <= 1.25 * nbytes, f"{ranks} ranks grew PSS by {grown / nbytes:.2f}x the cache's bytes"
    assert [outcome[3] for outcome in outcomes].count(True) == 1  # one rank copied, the others mapped
    assert len({outcome[4] for outcome in outcomes}) == 1
    assert copies_in(shm_root) == []  # the last rank to close removed it


def test_concurrent_openers_build_and_copy_once(folders: Path, tmp_path: Path, shm_root: str) -> None:
    barrier, results = SPAWN.Barrier(4), SPAWN.Queue()
    path = tmp_path / "cache"
    processes = [start(_open_together, str(folders), str(path), shm_root, barrier, results) for _ in range(4)]
    outcomes = [results.get(timeout=WAIT_S) for _ in processes]
    join_all(processes)
    assert sorted(built for built, _, _, _ in outcomes) == [False, False, False, True]
    assert sorted(copied for _, copied, _, _ in outcomes) == [False, False, False, True]
    assert len({(folder, build_id) for _, _, folder, build_id in outcomes}) == 1
    assert sorted(os.listdir(tmp_path)) == ["cache", "cache.lock", "data"]
    assert copies_in(shm_root) == []


# -- killed mid-way ------------------------------------------------------------------------------


def test_a_builder_killed_mid_build_is_taken_over(folders: Path, tmp_path: Path) -> None:
    path = tmp_path / "cache"
    _killed_when(_build_and_hang, "decoding", str(folders), str(path))
    assert not path.exists() and any(".building-" in name for name in os.listdir(tmp_path))
    dataset = FolderDataset(folders, progress=False)
    cache = DecodedCache(dataset, path, progress=False)  # the kernel released the dead builder's lock
    assert cache.report.built and cache.report.reason == f"no cache at {str(path)!r}"
    cache.verify()
    assert all(cache[i]["image"].equal(dataset[i]["image"]) for i in range(len(dataset)))
    assert sorted(os.listdir(tmp_path)) == ["cache", "cache.lock", "data"]  # its partial build removed


def test_a_copier_killed_mid_copy_is_taken_over(folders: Path, tmp_path: Path, shm_root: str) -> None:
    path = tmp_path / "cache"
    DecodedCache(FolderDataset(folders, progress=False), path, progress=False).close()
    _killed_when(_copy_and_hang, "copying", str(folders), str(path), shm_root)
    assert [".partial-" in name for name in copies_in(shm_root)] == [True]
    dataset = FolderDataset(folders, progress=False)
    with open_cache(dataset, path) as cache:
        assert cache.report.copied and not cache.report.built
        assert copies_in(shm_root) == [os.path.basename(cache._folder)]  # the partial copy removed
        cache.verify()
        assert all(cache[i]["image"].equal(dataset[i]["image"]) for i in range(len(dataset)))


def test_what_a_killed_job_left_is_removed_on_the_next_open(
    folders: Path, tmp_path: Path, shm_root: str
) -> None:
    left = _killed_when(_open_and_hang, None, str(folders), str(tmp_path / "a"), shm_root)
    assert os.path.isdir(left)
    dataset = FolderDataset(folders, progress=False)
    with open_cache(dataset, tmp_path / "b", max_side=32) as other:  # another cache
        assert copies_in(shm_root) == [os.path.basename(other._folder)]


# -- keyed by content ----------------------------------------------------------------------------


def test_a_sweep_shares_one_copy_and_a_changed_source_gets_a_new_one(
    folders: Path, tmp_path: Path, shm_root: str
) -> None:
    dataset = FolderDataset(folders, progress=False)
    first = open_cache(dataset, tmp_path / "cache")
    copied = os.stat(first._folder).st_ino
    # Another path, the same content: another build, whose metadata differs (its id, its date)
    DecodedCache(dataset, tmp_path / "elsewhere", progress=False).close()
    meta = read_meta(str(tmp_path / "elsewhere"))
    write_meta(str(tmp_path / "elsewhere"), {**meta, "created": meta["created"] + " (a longer date)"})
    elsewhere = open_cache(dataset, tmp_path / "elsewhere")
    assert not elsewhere.report.copied and elsewhere._folder == first._folder
    assert os.stat(first._folder).st_ino == copied  # mapped as it is, not copied again
    changed = sorted(folders.rglob("*.jpg"))[3]
    changed.write_bytes(changed.read_bytes() + b"\0")  # a changed source
    with pytest.warns(UserWarning, match="1 file changed since the cache was built"):
        rebuilt = open_cache(FolderDataset(folders, progress=False), tmp_path / "cache")
    assert rebuilt.report.built and rebuilt.report.copied and rebuilt._folder != first._folder
    assert first[3]["image"].equal(elsewhere[3]["image"])  # the running job keeps its copy
    for cache in (first, elsewhere):
        cache.close()
    assert copies_in(shm_root) == [os.path.basename(rebuilt._folder)]
    rebuilt.close()
    assert copies_in(shm_root) == []


# -- a budget ------------------------------------------------------------------------------------


def copy_bytes(path: Path) -> int:
    """What the shared-memory copy of the disk cache at ``path`` takes: all its files but the inputs."""
    return sum(entry.stat().st_size for entry in os.scandir(path) if entry.name != "inputs.npz")


def test_unused_copies_are_kept_under_a_budget_least_recently_used_evicted(
    folders: Path, tmp_path: Path, shm_root: str
) -> None:
    dataset = FolderDataset(folders, progress=False)
    sides = {"a": None, "b": 32, "c": 48, "d": 16}
    names = {}
    for name in "abc":
        with open_cache(dataset, tmp_path / name, max_side=sides[name], memory_budget=1 << 30) as cache:
            names[name] = os.path.basename(cache._folder)
        assert names[name] in copies_in(shm_root)  # kept for the next job
    with open_cache(dataset, tmp_path / "a", memory_budget=1 << 30) as again:
        assert not again.report.copied  # mapped, not copied again; "b" is now the least recently used
    DecodedCache(dataset, tmp_path / "d", max_side=16, progress=False).close()
    budget = sum(copy_bytes(tmp_path / name) for name in "acd")
    with open_cache(dataset, tmp_path / "d", max_side=16, memory_budget=budget) as newest:
        names["d"] = os.path.basename(newest._folder)
    assert copies_in(shm_root) == sorted(names[name] for name in "acd")
    with open_cache(dataset, tmp_path / "a", memory_budget=budget) as in_use:
        with pytest.raises(CacheSpaceError, match="memory_budget"):
            open_cache(dataset, tmp_path / "b", max_side=32, memory_budget=copy_bytes(tmp_path / "a") + 1)
        assert copies_in(shm_root) == [names["a"]]  # a copy in use is never evicted
        assert in_use[0]["image"].equal(dataset[0]["image"])


def test_memory_budget_is_checked(folders: Path, tmp_path: Path) -> None:
    dataset = FolderDataset(folders, progress=False)
    for budget in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="memory_budget must be a positive int"):
            open_cache(dataset, tmp_path / "cache", memory_budget=budget)
