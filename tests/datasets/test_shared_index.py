"""Under DDP rank 0 lists and validates, every rank gets the index: two gloo ranks on loopback
against the real S3 server, each rank through its own counting proxy (the proxies live in this
process, the ranks reach them by their endpoints), so what rank 1 asked is counted apart."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import simplejpeg

import torchloom
import torchloom.datasets.folder as folder_module
from distributed import run_ranks
from s3proxy import FaultProxy, RequestCounts
from s3server import S3Bucket, S3Server
from torchloom import FolderDataset, Image, Label, ManifestDataset
from torchloom.datasets.shared_index import _Failure, built_once, shares_index
from torchloom.errors import ConfigError, DistributedSetupError, MissingFileError
from torchloom.io import ObjectStore
from torchloom.testing import synthetic_image, write_class_folders

CLASSES = ("cat", "dog")
IMAGES = 10
RANK_TIMEOUT_S = 90.0
TORCHRUN_TIMEOUT_S = 180.0
SCRIPT = Path(__file__).with_name("shared_index_ranks.py")
DISTRIBUTED_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
ONE_READ = RequestCounts(ranged_gets=1)  # what a rank that was given its index asks: its sample


def put_dataset(s3_server: S3Server, bucket: S3Bucket) -> None:
    """JPEGs in class folders below ``train/``, one that is not a JPEG, and a manifest of them
    all with one row more naming a missing file."""
    keys = [f"train/{CLASSES[i % 2]}/{i:03d}.jpg" for i in range(IMAGES)]
    objects = {
        bucket.path(key): simplejpeg.encode_jpeg(synthetic_image(np.random.default_rng(i), 24, 24, i % 2))
        for i, key in enumerate(keys)
    }
    objects[bucket.path("train/dog/broken.jpg")] = b"not a jpeg at all"
    rows = [f"{key.split('/', 1)[1]},{key.split('/')[1]}" for key in keys]
    rows += ["dog/broken.jpg,dog", "cat/gone.jpg,cat"]
    objects[bucket.path("train/manifest.csv")] = ("file,label\n" + "\n".join(rows) + "\n").encode()
    s3_server.filesystem().pipe(objects)


def open_dataset(kind: str, url: str, store: ObjectStore, **options: Any) -> Any:
    if kind == "folder":
        return FolderDataset(url, storage_options=store, progress=False, **options)
    fields = [Image("file"), Label("label")]
    return ManifestDataset(url, fields=fields, storage_options=store, progress=False, **options)


def describe(dataset: Any) -> dict[str, Any]:
    """A dataset's index and report, comparable across processes."""
    return {
        "paths": dataset.index.paths.to_list(),
        "labels": dataset.targets.tolist(),
        "classes": dataset.classes,
        "invalid": sorted(dataset.report.invalid),
        "ignored": sorted(dataset.report.ignored),
    }


Scenario = tuple[str, str, dict[str, Any]]  # kind, URL, options


def _on_each_rank(
    rank: int, world_size: int, scenarios: list[Scenario], storage_options: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Build each dataset through this rank's own proxy and read its first sample; per dataset
    its index, or the error its construction raised."""
    store = ObjectStore(storage_options[rank], backoff=0.01)
    outcomes = []
    for kind, url, options in scenarios:
        try:
            dataset = open_dataset(kind, url, store, **options)
        except Exception as error:  # the test compares what each rank raised
            notes = getattr(error, "__notes__", [])
            outcomes.append({"error": type(error).__name__, "message": str(error), "notes": notes})
            continue
        dataset[0]
        outcomes.append({**describe(dataset), "own_store": dataset.read_root.store is store})
    return outcomes


def baseline(kind: str, url: str, proxy: FaultProxy) -> tuple[dict[str, Any], RequestCounts]:
    """The index one process builds alone, and what building it and reading sample 0 asked."""
    dataset = open_dataset(kind, url, ObjectStore(proxy.storage_options, backoff=0.01))
    dataset[0]
    counts = proxy.requests
    proxy.reset_counts()
    return describe(dataset), counts


@pytest.fixture
def proxies(s3_server: S3Server, s3_proxy: FaultProxy) -> Iterator[list[FaultProxy]]:
    """One counting proxy per rank, both in front of the same server."""
    with FaultProxy(s3_server.endpoint) as second:
        yield [s3_proxy, second]


@pytest.fixture
def bucket(s3_server: S3Server, s3_bucket: S3Bucket) -> S3Bucket:
    put_dataset(s3_server, s3_bucket)
    return s3_bucket


def run_two_ranks(scenarios: list[Scenario], proxies: list[FaultProxy]) -> list[list[dict[str, Any]]]:
    storage = [proxy.storage_options for proxy in proxies]
    return run_ranks(_on_each_rank, 2, scenarios, storage, timeout=RANK_TIMEOUT_S)


@pytest.mark.filterwarnings("ignore::torchloom.datasets.manifest.MissingFilesWarning")
def test_two_ranks_list_and_validate_once_and_get_the_same_index(
    bucket: S3Bucket, proxies: list[FaultProxy]
) -> None:
    folder, manifest = bucket.url_of("train"), bucket.url_of("train/manifest.csv")
    folder_alone, folder_asked = baseline("folder", folder, proxies[0])
    manifest_alone, manifest_asked = baseline("manifest", manifest, proxies[0])
    assert folder_asked.lists > 0 and folder_asked.ranged_gets > IMAGES  # a listing, a validation
    assert manifest_asked.lists == 0 and manifest_asked.ranged_gets > IMAGES
    assert len(folder_alone["invalid"]) == 1 and len(manifest_alone["invalid"]) == 2
    ranks = run_two_ranks([("folder", folder, {}), ("manifest", manifest, {})], proxies)
    expected = [{**folder_alone, "own_store": True}, {**manifest_alone, "own_store": True}]
    assert ranks[0] == ranks[1] == expected
    # Rank 0: one listing, one manifest, one validation of each, its samples; rank 1: its samples.
    assert proxies[0].requests == _sum(folder_asked, manifest_asked)
    assert proxies[1].requests == _sum(ONE_READ, ONE_READ)


def test_share_index_false_has_every_rank_index_for_itself(
    bucket: S3Bucket, proxies: list[FaultProxy]
) -> None:
    url = bucket.url_of("train")
    alone, asked = baseline("folder", url, proxies[0])
    ranks = run_two_ranks([("folder", url, {"share_index": False})], proxies)
    assert ranks[0] == ranks[1] == [{**alone, "own_store": True}]
    assert proxies[0].requests == proxies[1].requests == asked


def test_a_failure_on_rank_0_is_raised_typed_on_every_rank(
    bucket: S3Bucket, proxies: list[FaultProxy]
) -> None:
    failing: list[tuple[Scenario, str]] = [
        (("manifest", bucket.url_of("train/missing.csv"), {}), "MissingFileError"),
        (("folder", bucket.url_of("train"), {"strict": True}), "ValidationFailedError"),
        (("folder", bucket.url_of("nothing-here"), {}), "MissingFileError"),
    ]
    ranks = run_two_ranks([scenario for scenario, _ in failing], proxies)
    for ((_, url, _), raised), first, second in zip(failing, *ranks, strict=True):
        assert first["error"] == second["error"] == raised
        assert first["message"] == second["message"] and url.rsplit("/", 1)[1] in first["message"]
        assert first["notes"] == [] and "(raised on rank 0, which indexed" in second["notes"][0]
    assert proxies[1].requests.total == 0  # rank 1 asked nothing: it waited for rank 0's answer


def _sum(*counts: RequestCounts) -> RequestCounts:
    return RequestCounts(**{name: sum(getattr(c, name) for c in counts) for name in vars(counts[0])})


def _local_on_each_rank(rank: int, world_size: int, root: str) -> dict[str, Any]:
    automatic = describe(FolderDataset(root, progress=False))  # a local root: every rank walks it
    if rank != 0:
        def walk(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"rank {rank} walked {root} although rank 0 shares its index")

        folder_module.find_samples = walk
    return {"automatic": automatic, "shared": describe(FolderDataset(root, progress=False, share_index=True))}


def test_local_roots_index_on_every_rank_unless_shared_on_purpose(tmp_path: Path) -> None:
    write_class_folders(tmp_path, [4, 3], size=(16, 16), truncated=1, progress=False)
    alone = describe(FolderDataset(tmp_path, progress=False))
    ranks = run_ranks(_local_on_each_rank, 2, str(tmp_path), timeout=RANK_TIMEOUT_S)
    assert ranks[0] == ranks[1] == {"automatic": alone, "shared": alone}
    assert len(alone["invalid"]) == 1


def test_torchrun_ranks_share_one_listing(
    bucket: S3Bucket, proxies: list[FaultProxy], tmp_path: Path
) -> None:
    url = bucket.url_of("train")
    alone, asked = baseline("folder", url, proxies[0])
    options = json.dumps([proxy.storage_options for proxy in proxies])
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    source = str(Path(torchloom.__file__).parents[1])
    env = {key: value for key, value in os.environ.items() if key not in DISTRIBUTED_ENV}
    env["PYTHONPATH"] = os.pathsep.join([source, os.environ.get("PYTHONPATH", "")])
    process = subprocess.Popen(
        [*command, str(SCRIPT), url, options, str(tmp_path)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=TORCHRUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # torchrun and its ranks
        output, _ = process.communicate()
        pytest.fail(f"torchrun did not finish within {TORCHRUN_TIMEOUT_S} s:\n{output[-3000:]}")
    assert process.returncode == 0, output[-3000:]
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert ranks[0]["paths"] == ranks[1]["paths"] == alone["paths"]
    assert proxies[0].requests == asked and proxies[1].requests == ONE_READ


def test_without_a_process_group_nothing_is_shared() -> None:
    assert not shares_index(True, "s3://bucket/train") and not shares_index(None, "/data")
    assert built_once(lambda: [1, 2], share=False, what="a dataset") == [1, 2]


def test_share_index_takes_true_false_or_none(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="share_index must be True, False or None, got share_index='yes'"):
        FolderDataset(tmp_path, share_index="yes")  # type: ignore[typeddict-item]


class _Unpicklable(Exception):
    def __init__(self, first: str, second: str) -> None:
        super().__init__(f"{first} and {second}")


def test_an_error_travels_typed_or_named_when_it_does_not_unpickle() -> None:
    what = "ManifestDataset 's3://b/m.csv'"
    error = _Failure.of(MissingFileError("s3://b/m.csv holds nothing")).error(what)
    assert isinstance(error, MissingFileError) and str(error) == "s3://b/m.csv holds nothing"
    assert error.__notes__ == [f"(raised on rank 0, which indexed {what} for every rank)"]
    error = _Failure.of(_Unpicklable("one", "two")).error(what)
    assert isinstance(error, DistributedSetupError)
    assert str(error).endswith(f"failed to index {what}: test_shared_index._Unpicklable: one and two")
