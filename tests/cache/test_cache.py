"""DecodedCache (build, reuse, staleness, integrity, concurrency, workers, shared memory) and LRUCache."""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import pickle
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image as PILImage
from torch.utils.data import DataLoader

from conftest import write_jpeg
from torchloom import (
    FolderDataset,
    Image,
    Label,
    ManifestDataset,
    Numeric,
    SampleError,
    SampleKey,
    Skipped,
    collate,
    sample_rng,
)
from torchloom.cache import (
    CacheError,
    CacheSpaceError,
    CorruptCacheError,
    DecodedCache,
    LRUCache,
    NotACacheError,
    StaleCacheError,
)
from torchloom.cache import build as build_module
from torchloom.cache import memory as memory_module
from torchloom.cache.atomic import cache_lock
from torchloom.cache.storage import META_FILE, read_meta, write_meta
from torchloom.errors import EmptyDatasetError
from torchloom.io import read_image
from torchloom.testing import PlantedFaults, synthetic_image, write_class_folders
from torchloom.tools.cli import main as cli_main
from torchloom.transforms import (
    CenterCrop,
    Compose,
    HorizontalFlip,
    Lambda,
    RandomResizedCrop,
    Resize,
    to_chw_tensor,
)

AUGMENT = Compose([RandomResizedCrop(24, scale=(0.3, 1.0)), HorizontalFlip()])


@pytest.fixture
def folders(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    write_class_folders(root, [8, 6], size=(64, 64), progress=False)
    return root


def open_cache(dataset: Any, path: Path, **kwargs: Any) -> DecodedCache:
    return DecodedCache(dataset, path, progress=False, **kwargs)


def samples_equal(a: Any, b: Any) -> bool:
    if isinstance(a, Skipped) or isinstance(b, Skipped):
        return a == b
    if a.keys() != b.keys():
        return False
    for key in a:
        if isinstance(a[key], torch.Tensor):
            if not torch.equal(a[key], b[key]):
                return False
        elif a[key] != b[key] or type(a[key]) is not type(b[key]):
            return False
    return True


def flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))


def write_png(path: Path, height: int, width: int, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    PILImage.fromarray(synthetic_image(np.random.default_rng(seed), height, width, seed)).save(path)


@pytest.fixture
def png_manifest(tmp_path: Path) -> Path:
    """PNGs of three sizes (the variable layout) listed in a manifest with label and numeric fields."""
    sizes = [(40, 56), (56, 40), (48, 48), (40, 56), (30, 70)]
    lines = ["file,defect,size"]
    for i, (height, width) in enumerate(sizes):
        write_png(tmp_path / "img" / f"{i}.png", height, width, seed=i)
        lines.append(f"img/{i}.png,{'ok' if i % 2 else 'dent'},{i * 0.5}")
    manifest = tmp_path / "manifest.csv"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


def manifest_dataset(manifest: Path, image_name: str = "image", **kwargs: Any) -> ManifestDataset:
    fields = [Image("file", name=image_name), Label("defect"), Numeric("size")]
    return ManifestDataset(manifest, fields=fields, progress=False, **kwargs)


# -- build, reuse, equality ----------------------------------------------------------------------


def test_build_then_reuse_without_decoding(
    folders: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset = FolderDataset(folders, progress=False)
    cache = open_cache(dataset, tmp_path / "cache")
    assert cache.report.built and cache.report.layout == "fixed" and cache.report.shape == (64, 64, 3)
    assert len(cache) == len(dataset) and sorted(os.listdir(tmp_path / "cache")) == [
        "images.npy",
        "inputs.npz",
        "meta.json",
    ]

    def no_decoding(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a valid cache was decoded again")

    monkeypatch.setattr(build_module, "decode_image", no_decoding)
    monkeypatch.setattr(build_module, "probe_file", no_decoding)
    again = open_cache(dataset, tmp_path / "cache")
    assert not again.report.built
    for i in range(len(dataset)):  # JPEGs decoded by the same decoder at full size: exact
        assert samples_equal(again[i], dataset[i])
    assert not [name for name in os.listdir(tmp_path) if ".building-" in name or ".old-" in name]


def test_png_manifest_samples_equal_uncached_exactly_in_the_variable_layout(
    png_manifest: Path, tmp_path: Path
) -> None:
    dataset = manifest_dataset(png_manifest)
    cache = open_cache(dataset, tmp_path / "cache")
    assert cache.report.layout == "variable" and cache.report.shape is None
    assert {"images.bin", "offsets.npy", "shapes.npy"} <= set(os.listdir(tmp_path / "cache"))
    for i in range(len(dataset)):
        key = SampleKey(i, epoch=2)
        assert samples_equal(cache[key], dataset[key])
        assert set(cache[key]) == {"image", "label", "numeric", "path", "index"}
        assert cache[key]["index"].epoch == 2
    batch = cache.__getitems__([1, 3])  # 56x40 and 40x56 images from the blob, in one batch
    assert all(samples_equal(a, dataset[i]) for a, i in zip(batch, [1, 3], strict=True))


def test_same_random_draws_as_without_the_cache(png_manifest: Path, tmp_path: Path) -> None:
    dataset = manifest_dataset(png_manifest, transform=AUGMENT, seed=5)
    cache = open_cache(dataset, tmp_path / "cache")
    for epoch in (0, 1):
        for i in range(len(dataset)):  # lossless sources, no max_side: identical outputs
            key = SampleKey(i, epoch=epoch)
            assert samples_equal(cache[key], dataset[key])


def test_deterministic_transform_and_batched_fetch_match_uncached(folders: Path, tmp_path: Path) -> None:
    dataset = FolderDataset(folders, transform=Compose([Resize(40), CenterCrop(32)]), progress=False)
    cache = open_cache(dataset, tmp_path / "cache")
    keys = [SampleKey(i, epoch=1) for i in (4, 0, 9, 2)]
    samples = cache.__getitems__(keys)
    batch = collate(samples)
    assert batch["image"].data_ptr() == samples[0]["image"].data_ptr()  # written into one buffer
    for position, key in enumerate(keys):  # a shrink too small for DCT scaling: exact
        assert torch.equal(batch["image"][position], dataset[key]["image"])
    assert batch["index"].tolist() == [4, 0, 9, 2]


def test_reading_transforms_get_views_and_writing_ones_private_copies(folders: Path, tmp_path: Path) -> None:
    def scribble(image: np.ndarray) -> np.ndarray:  # writes into its input, as user code may
        image[:] = 7
        return image

    plain = FolderDataset(folders, progress=False)
    cache = open_cache(plain, tmp_path / "cache")
    expected = [cache[i]["image"].clone() for i in range(len(cache))]
    keys = list(range(len(cache)))
    reading = Compose([CenterCrop(32), HorizontalFlip(p=1.0)])
    for transform, intact in ((reading, True), (Lambda(scribble), False)):
        dataset = FolderDataset(folders, transform=transform, progress=False)
        with open_cache(dataset, tmp_path / "cache") as transformed:
            batch = collate(transformed.__getitems__(keys))
            single = transformed[3]["image"]
        single.fill_(1)  # a sample owns its memory, whatever the cache handed the transform
        assert bool((batch["image"] == 7).all()) is not intact
    with open_cache(plain, tmp_path / "cache") as again:  # the cache itself is untouched
        assert all(torch.equal(again[i]["image"], expected[i]) for i in keys)


def test_a_read_only_single_channel_array_becomes_a_tensor_of_its_own() -> None:
    array = np.arange(12, dtype=np.uint8).reshape(3, 4)
    array.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns when it wraps a read-only array
        tensor = to_chw_tensor(array)
    tensor.fill_(0)
    assert array.sum() == 66 and tensor.shape == (1, 3, 4)


def test_load_sample_hook_transforms_the_given_image_and_leaves_no_trace(folders: Path) -> None:
    dataset = FolderDataset(folders, transform=HorizontalFlip(p=1.0), progress=False)
    image = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    sample = dataset.load_sample(2, 2, None, image)
    assert torch.equal(sample["image"], torch.from_numpy(image[:, ::-1].copy()).permute(2, 0, 1))
    assert sample["path"] == dataset.index.paths[2] and sample["label"] == 0
    assert dataset[2]["image"].shape == (3, 64, 64)  # the next read decodes the file again
    with pytest.raises(IndexError):  # _load fails before it reaches load_image ...
        dataset.load_sample(10**6, 0, None, image)
    assert dataset[2]["image"].shape == (3, 64, 64)  # ... and the image given is not left behind


# -- max_side ------------------------------------------------------------------------------------


def test_max_side_shrinks_keeping_the_aspect_and_keeps_the_random_draws(tmp_path: Path) -> None:
    root = tmp_path / "data"
    write_class_folders(root, [4, 4], size=(360, 640), progress=False)
    crop = RandomResizedCrop(48, scale=(0.25, 1.0))
    dataset = FolderDataset(root, transform=crop, seed=7, progress=False)
    cache = open_cache(dataset, tmp_path / "cache", max_side=128)
    assert cache.report.layout == "fixed" and cache.report.shape == (72, 128, 3)
    plain = open_cache(FolderDataset(root, progress=False), tmp_path / "cache", max_side=128)
    assert not plain.report.built  # the transform is not part of the cache
    assert plain[0]["image"].shape == (3, 72, 128)
    same, other = [], []
    for i in range(len(dataset)):
        cached = cache[SampleKey(i, epoch=3)]["image"].permute(1, 2, 0).numpy().astype(np.float32)
        full = read_image(dataset.index.paths[i])
        same.append(np.abs(cached - crop(full, sample_rng(7, 3, i))).mean())
        other.append(np.abs(cached - crop(full, sample_rng(7, 4, i))).mean())
    assert np.mean(same) < 10 and np.mean(same) < np.mean(other) / 2


def test_max_side_leaves_small_images_alone(tmp_path: Path) -> None:
    write_jpeg(tmp_path / "data" / "a" / "big.jpg", height=360, width=640)
    write_jpeg(tmp_path / "data" / "a" / "tall.jpg", height=300, width=100)
    write_jpeg(tmp_path / "data" / "a" / "small.jpg", height=48, width=64)
    cache = open_cache(FolderDataset(tmp_path / "data", progress=False), tmp_path / "cache", max_side=128)
    shapes = {Path(cache[i]["path"]).name: tuple(cache[i]["image"].shape) for i in range(3)}
    assert shapes == {"big.jpg": (3, 72, 128), "tall.jpg": (3, 128, 43), "small.jpg": (3, 48, 64)}
    assert cache.report.layout == "variable"


# -- staleness -----------------------------------------------------------------------------------


def test_a_touched_file_rebuilds_with_a_warning(folders: Path, tmp_path: Path) -> None:
    dataset = FolderDataset(folders, progress=False)
    open_cache(dataset, tmp_path / "cache")
    path = dataset.index.paths[3]
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    with pytest.warns(UserWarning, match=r"1 file changed since the cache was built .*000003\.jpg.*modified"):
        cache = open_cache(dataset, tmp_path / "cache")
    assert cache.report.built and "1 file changed" in str(cache.report.reason)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not open_cache(dataset, tmp_path / "cache").report.built


def test_a_replaced_file_is_named_and_rebuilt(folders: Path, tmp_path: Path) -> None:
    dataset = FolderDataset(folders, progress=False)
    open_cache(dataset, tmp_path / "cache")
    path = Path(dataset.index.paths[5])
    old_size = path.stat().st_size
    write_jpeg(path, height=64, width=64, seed=99)
    with pytest.raises(StaleCacheError, match=rf"{path.name}'?: size {old_size} -> \d+.*rebuild=True"):
        open_cache(dataset, tmp_path / "cache", rebuild=False)
    with pytest.warns(UserWarning, match="rebuilding"):
        cache = open_cache(dataset, tmp_path / "cache")
    assert samples_equal(cache[5], dataset[5])


def test_changed_settings_and_file_lists_are_stale(folders: Path, tmp_path: Path) -> None:
    dataset = FolderDataset(folders, progress=False)
    open_cache(dataset, tmp_path / "cache")
    with pytest.raises(StaleCacheError, match="max_side None -> 32"):
        open_cache(dataset, tmp_path / "cache", max_side=32, rebuild=False)
    upright = FolderDataset(folders, exif_orientation=False, progress=False)
    with pytest.raises(StaleCacheError, match="exif_orientation True -> False"):
        open_cache(upright, tmp_path / "cache", rebuild=False)
    write_jpeg(folders / "class_0" / "new.jpg", height=64, width=64)
    grown = FolderDataset(folders, progress=False)
    with pytest.raises(
        StaleCacheError, match=r"file list changed .*14 files when built, 15 now; 1 new, e\.g\."
    ):
        open_cache(grown, tmp_path / "cache", rebuild=False)


def test_a_cache_rebuilt_elsewhere_is_not_read_by_an_older_copy(folders: Path, tmp_path: Path) -> None:
    dataset = FolderDataset(folders, progress=False)
    stale_copy = pickle.loads(pickle.dumps(open_cache(dataset, tmp_path / "cache")))
    with pytest.warns(UserWarning):
        open_cache(dataset, tmp_path / "cache", max_side=32)
    with pytest.raises(StaleCacheError, match="was rebuilt since this DecodedCache opened it"):
        stale_copy[0]


# -- integrity -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("manifest", "data_file"), [(False, "images.npy"), (True, "images.bin")])
def test_truncation_is_named(
    folders: Path, png_manifest: Path, tmp_path: Path, manifest: bool, data_file: str
) -> None:
    dataset = manifest_dataset(png_manifest) if manifest else FolderDataset(folders, progress=False)
    open_cache(dataset, tmp_path / "cache")
    target = tmp_path / "cache" / data_file
    os.truncate(target, target.stat().st_size - 100)
    with pytest.raises(CorruptCacheError, match=rf"{data_file} is truncated \(.* bytes\).*rebuild=True"):
        open_cache(dataset, tmp_path / "cache", rebuild=False)
    with pytest.warns(UserWarning, match=rf"{data_file} is truncated.*rebuilding"):
        cache = open_cache(dataset, tmp_path / "cache")
    assert samples_equal(cache[0], dataset[0])


def test_tampering_is_named_on_open_and_by_verify(folders: Path, tmp_path: Path) -> None:
    dataset = FolderDataset(folders, progress=False)
    cache = open_cache(dataset, tmp_path / "cache")
    data = tmp_path / "cache" / "images.npy"
    flip_byte(data, data.stat().st_size // 2)
    with pytest.raises(CorruptCacheError, match=r"images\.npy is altered"):
        open_cache(dataset, tmp_path / "cache", rebuild=False)
    with pytest.raises(CorruptCacheError, match=r"images\.npy is altered \(full checksum differs\)"):
        cache.verify()
    with pytest.warns(UserWarning, match="altered"):
        fresh = open_cache(dataset, tmp_path / "cache")
    fresh.verify()
    assert samples_equal(fresh[7], dataset[7])


def test_verify_finds_what_sampled_checks_miss(
    folders: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchloom.cache import integrity

    monkeypatch.setattr(integrity, "CHECK_BLOCKS", 2)
    monkeypatch.setattr(integrity, "CHECK_BLOCK_BYTES", 4096)
    dataset = FolderDataset(folders, progress=False)
    open_cache(dataset, tmp_path / "cache")
    flip_byte(tmp_path / "cache" / "images.npy", 100_000)  # between the first and the last block
    cache = open_cache(dataset, tmp_path / "cache", rebuild=False)  # sampled blocks: not seen
    with pytest.raises(CorruptCacheError, match=r"images\.npy"):
        cache.verify()
    with pytest.raises(CorruptCacheError, match="full checksum"):
        open_cache(dataset, tmp_path / "cache", rebuild=False, verify=True)


def test_altered_metadata_is_detected(folders: Path, tmp_path: Path) -> None:
    dataset = FolderDataset(folders, progress=False)
    open_cache(dataset, tmp_path / "cache")
    meta_path = tmp_path / "cache" / META_FILE
    meta = json.loads(meta_path.read_text())
    meta["shape"] = [32, 32, 3]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(CorruptCacheError, match=r"meta\.json was altered"):
        open_cache(dataset, tmp_path / "cache", rebuild=False)


def test_foreign_paths_and_newer_formats_are_refused(folders: Path, tmp_path: Path) -> None:
    dataset = FolderDataset(folders, progress=False)
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(NotACacheError, match="never overwritten"):
        open_cache(dataset, foreign)
    assert (foreign / "notes.txt").read_text() == "keep me"
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotACacheError, match="is a file"):
        open_cache(dataset, tmp_path / "file")
    open_cache(dataset, tmp_path / "cache")
    meta = read_meta(str(tmp_path / "cache"))
    write_meta(str(tmp_path / "cache"), {**meta, "version": 99})
    with pytest.raises(CacheError, match="format version 99, newer"):
        open_cache(dataset, tmp_path / "cache")


# -- faults --------------------------------------------------------------------------------------


def test_skipped_samples_stay_skipped(class_folders: tuple[Path, PlantedFaults], tmp_path: Path) -> None:
    root, faults = class_folders
    dataset = FolderDataset(root, on_error="skip", progress=False)
    cache = open_cache(dataset, tmp_path / "cache")
    assert sorted(s.path for s in cache.report.skipped) == sorted(faults.truncated)
    assert sorted(r["path"] for r in cache.meta["skipped"]) == sorted(faults.truncated)
    for skipped in cache.report.skipped:
        assert cache[skipped.index] == dataset[skipped.index]  # the same marker, same dataset name
    batch = collate(cache.__getitems__(list(range(len(cache)))))
    assert sorted(s.path for s in batch["skipped"]) == sorted(faults.truncated)
    assert batch["image"].shape[0] == len(cache) - len(faults.truncated)
    strict = FolderDataset(root, on_error="raise", progress=False)
    reused = open_cache(strict, tmp_path / "cache")  # on_error is not a setting: the same cache
    with pytest.raises(SampleError, match="recorded when cache"):
        reused[cache.report.skipped[0].index]


def test_a_failing_sample_under_raise_stops_the_build(
    class_folders: tuple[Path, PlantedFaults], tmp_path: Path
) -> None:
    root, faults = class_folders
    dataset = FolderDataset(root, validate="none", progress=False)  # the empty file too
    with pytest.raises(SampleError) as caught:
        open_cache(dataset, tmp_path / "cache")
    assert caught.value.path in faults.all
    assert sorted(os.listdir(tmp_path)) == ["cache.lock", "data"]  # no partial cache left


def test_an_empty_file_is_skipped_at_probe_time(
    class_folders: tuple[Path, PlantedFaults], tmp_path: Path
) -> None:
    root, faults = class_folders
    dataset = FolderDataset(root, validate="none", on_error="skip", progress=False)
    cache = open_cache(dataset, tmp_path / "cache")
    assert sorted(s.path for s in cache.report.skipped) == sorted(faults.all)
    assert {s.error for s in cache.report.skipped} == {"DecodeError"}


# -- processes -----------------------------------------------------------------------------------


def _build_in_child(root: str, path: str, results: Any) -> None:
    dataset = FolderDataset(root, transform=AUGMENT, progress=False)
    results.put("ready")
    cache = DecodedCache(dataset, path, progress=False)  # waits while the test holds the lock
    images = [cache[SampleKey(i, epoch=0)]["image"].sum().item() for i in range(len(cache))]
    results.put((cache.report.built, cache.meta["build_id"], images))


def test_concurrent_builders_make_one_valid_cache(folders: Path, tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    path = tmp_path / "cache"
    processes = [
        context.Process(target=_build_in_child, args=(str(folders), str(path), results)) for _ in range(2)
    ]
    with cache_lock(str(path), exclusive=True):  # both builders start together when it is released
        for process in processes:
            process.start()
        assert [results.get(timeout=120) for _ in processes] == ["ready", "ready"]
        time.sleep(0.5)
    outcomes = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert sorted(built for built, _, _ in outcomes) == [False, True]  # one built, one waited and reused
    assert outcomes[0][1] == outcomes[1][1] and outcomes[0][2] == outcomes[1][2]
    assert sorted(os.listdir(tmp_path)) == ["cache", "cache.lock", "data"]
    cache = open_cache(FolderDataset(folders, transform=AUGMENT, progress=False), path)
    cache.verify()
    assert not cache.report.built
    assert [cache[SampleKey(i, epoch=0)]["image"].sum().item() for i in range(len(cache))] == outcomes[0][2]


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_dataloader_workers_read_the_cache(folders: Path, tmp_path: Path, start_method: str) -> None:
    dataset = FolderDataset(folders, transform=AUGMENT, progress=False)
    cache = open_cache(dataset, tmp_path / "cache")
    keys = [SampleKey(i, epoch=1) for i in range(len(cache))]
    loader = DataLoader(
        cache,
        sampler=keys,
        batch_size=4,
        num_workers=2,
        collate_fn=collate,
        multiprocessing_context=start_method,
    )
    seen = []
    for batch in loader:
        for position, index in enumerate(batch["index"].tolist()):
            assert torch.equal(batch["image"][position], cache[SampleKey(index, epoch=1)]["image"])
            seen.append(index)
    assert sorted(seen) == list(range(len(cache)))
    copy = pickle.loads(pickle.dumps(cache))
    key = SampleKey(3, epoch=4)
    assert copy._store is None and samples_equal(copy[key], cache[key])


# -- shared memory -------------------------------------------------------------------------------


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm (Linux shared memory) here")
def test_memory_location_shares_one_copy_and_removes_it(folders: Path, tmp_path: Path) -> None:
    dataset = FolderDataset(folders, progress=False)
    cache = open_cache(dataset, tmp_path / "cache", location="memory")
    folder = cache._folder
    assert folder.startswith("/dev/shm/") and sorted(os.listdir(folder)) == ["images.npy", "meta.json"]
    assert samples_equal(cache[2], dataset[2])
    copy = pickle.loads(pickle.dumps(cache))  # what a spawned worker gets: maps, never owns
    assert copy._folder == folder and samples_equal(copy[5], dataset[5])
    del copy
    gc.collect()
    assert os.path.isdir(folder)
    cache.verify()
    del cache
    gc.collect()
    assert not os.path.exists(folder)
    finished = multiprocessing.get_context("fork").Process(target=int)
    finished.start()
    finished.join()
    namespace = os.stat("/proc/self/ns/pid").st_ino if os.path.exists("/proc/self/ns/pid") else 0
    orphan = Path(f"/dev/shm/torchloom-cache-0123456789ab-{namespace}-{finished.pid}-abcdef")
    orphan.mkdir()  # what a killed process leaves behind (removed only when pids are comparable)
    with open_cache(dataset, tmp_path / "cache", location="memory") as again:
        folder = again._folder
        assert not again.report.built and os.path.isdir(folder)
        assert orphan.exists() == (namespace == 0)
    assert not os.path.exists(folder)
    if orphan.exists():
        orphan.rmdir()


def test_memory_location_checks_free_space_first(
    folders: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Usage:
        free = 1 << 20

    monkeypatch.setattr(memory_module.shutil, "disk_usage", lambda path: Usage())
    dataset = FolderDataset(folders, progress=False)
    with pytest.raises(
        CacheSpaceError, match=r"needs [\d.]+ KiB .* only 1\.0 MiB is free; use location='disk'"
    ):
        open_cache(dataset, tmp_path / "cache", location="memory")
    monkeypatch.setattr(memory_module, "SHM_ROOT", str(tmp_path / "no-shm"))
    with pytest.raises(CacheSpaceError, match="needs shared memory mounted at"):
        open_cache(dataset, tmp_path / "cache", location="memory")


# -- configuration and the command line ----------------------------------------------------------


def test_configuration_errors_say_what_works(folders: Path, png_manifest: Path, tmp_path: Path) -> None:
    dataset = FolderDataset(folders, progress=False)
    with pytest.raises(ValueError, match="max_side must be a positive int"):
        open_cache(dataset, tmp_path / "cache", max_side=0)
    with pytest.raises(ValueError, match="location="):
        open_cache(dataset, tmp_path / "cache", location="ram")
    with pytest.raises(ValueError, match=r"pass fields=\('photo',\)"):
        open_cache(manifest_dataset(png_manifest, image_name="photo"), tmp_path / "cache")
    with pytest.raises(ValueError, match=r"pass fields=\('image',\)"):
        open_cache(dataset, tmp_path / "cache", fields=("image", "label"))
    with pytest.raises(TypeError, match="FolderDataset or ManifestDataset"):
        open_cache([1, 2, 3], tmp_path / "cache")
    photos = manifest_dataset(png_manifest, image_name="photo")
    renamed = open_cache(photos, tmp_path / "m", fields=("photo",))
    assert renamed.fields == ("photo",) and renamed[0]["photo"].shape == (3, 40, 56)


def test_the_build_progress_names_the_cache_not_its_staging_folder(
    folders: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with DecodedCache(FolderDataset(folders, progress=False), tmp_path / "faces.cache", progress=True):
        pass
    bars = capsys.readouterr().err
    assert "decoding into faces.cache" in bars and "building" not in bars


def test_cli_builds_then_reuses(folders: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cache"
    assert cli_main(["cache", str(folders), "--out", str(out), "--max-side", "32", "--threads", "2"]) == 0
    printed = capsys.readouterr().out
    assert "cache built" in printed and "14 samples" in printed and "0 skipped" in printed
    assert "32x32x3" in printed
    assert cli_main(["cache", str(folders), "--out", str(out), "--max-side", "32"]) == 0
    assert "cache reused" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["cache", str(folders), "--out", str(out), "--max-side", "0"])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["cache", str(tmp_path / "missing"), "--out", str(out)])
    assert exit_info.value.code == 2
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "x.txt").write_text("x")
    assert cli_main(["cache", str(folders), "--out", str(tmp_path / "foreign")]) == 1
    assert "NotACacheError" in capsys.readouterr().err


# -- LRUCache ------------------------------------------------------------------------------------


def test_lru_evicts_the_least_recently_used_and_counts() -> None:
    cache = LRUCache(max_bytes=300)
    for key in "abc":
        cache.get(key, lambda: np.zeros(100, np.uint8))
    cache.get("a", lambda: None)  # a hit: "a" is now the most recent
    cache.get("d", lambda: np.zeros(100, np.uint8))  # evicts "b"
    assert "b" not in cache and "a" in cache and "c" in cache and "d" in cache
    stats = cache.stats
    assert (stats.hits, stats.misses, stats.evictions, stats.bytes, stats.entries) == (1, 4, 1, 300, 3)
    assert stats.hit_rate == pytest.approx(0.2)
    big = torch.zeros(400, dtype=torch.uint8)
    assert cache.get("big", lambda: big) is big
    assert "big" not in cache and cache.stats.oversized == 1 and cache.stats.entries == 3
    cache.get("e", lambda: {"image": torch.zeros(10, dtype=torch.int16), "path": "abcd"})  # 5+20 + 4+4
    assert cache.stats.bytes == 233 and cache.stats.evictions == 2  # "c" went
    cache.clear()
    assert len(cache) == 0 and cache.stats.bytes == 0 and cache.stats.hits == 1
    empty = pickle.loads(pickle.dumps(cache))
    assert empty.max_bytes == 300 and empty.stats.misses == 0


def test_lru_is_thread_safe() -> None:
    cache = LRUCache(max_bytes=50 * 8)
    errors: list[BaseException] = []

    def hammer(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for key in rng.integers(0, 100, 2000):
                value = cache.get(int(key), lambda k=int(key): np.full(1, k, np.int64))
                assert int(value[0]) == int(key)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stats = cache.stats
    assert not errors and stats.hits + stats.misses == 8000
    assert stats.bytes == stats.entries * 8 <= 400
    assert 0 < stats.evictions <= stats.misses - stats.entries  # two threads may compute one key


# --- a full disk, a damaged meta.json, left-over builds -------------------------------------------


def test_a_disk_without_room_for_the_images_is_refused_before_writing(
    folders: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchloom.cache import storage

    real = storage.shutil.disk_usage
    monkeypatch.setattr(storage.shutil, "disk_usage", lambda path: real(path)._replace(free=1000))
    with pytest.raises(CacheSpaceError, match=r"needs .* for its images, but only 1000 B is free"):
        open_cache(FolderDataset(folders, progress=False), tmp_path / "cache")
    assert sorted(os.listdir(tmp_path)) == ["cache.lock", "data"]  # no half-built folder left


@pytest.mark.parametrize("errno_name", ["ENOSPC", "EOPNOTSUPP"])
def test_a_disk_filling_up_while_the_files_are_laid_out_is_an_error_not_a_crash(
    folders: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, errno_name: str
) -> None:
    """A memory map written on a full disk kills the process (SIGBUS): blocks are allocated first."""
    import errno

    from torchloom.cache import storage

    def fallocate(descriptor: int, offset: int, length: int) -> None:
        raise OSError(getattr(errno, errno_name), os.strerror(getattr(errno, errno_name)))

    monkeypatch.setattr(storage.os, "posix_fallocate", fallocate)
    dataset = FolderDataset(folders, progress=False)
    if errno_name == "ENOSPC":
        with pytest.raises(CacheSpaceError, match="ran out of space"):
            open_cache(dataset, tmp_path / "cache")
    else:  # a filesystem that cannot allocate ahead: the free-space check alone
        assert samples_equal(open_cache(dataset, tmp_path / "cache")[3], dataset[3])


@pytest.mark.parametrize("damage", ["deleted", "emptied", "cut short"])
def test_a_cache_whose_meta_json_an_interrupted_copy_damaged_is_rebuilt(
    folders: Path, tmp_path: Path, damage: str
) -> None:
    dataset = FolderDataset(folders, progress=False)
    path = tmp_path / "cache"
    open_cache(dataset, path).close()
    meta = path / META_FILE
    if damage == "deleted":
        meta.unlink()
    else:
        meta.write_bytes(b"" if damage == "emptied" else meta.read_bytes()[:100])
    with pytest.warns(UserWarning, match=r"meta\.json is (missing|damaged).*rebuilding"):
        rebuilt = open_cache(dataset, path)
    assert rebuilt.report.built and samples_equal(rebuilt[2], dataset[2])


def test_a_folder_with_cache_file_names_and_files_of_its_own_is_never_overwritten(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    for name in ("inputs.npz", "images.npy", "notes.txt"):
        (folder / name).write_bytes(b"x")
    with pytest.raises(NotACacheError, match="never overwritten"):
        read_meta(str(folder))


def test_a_build_killed_before_it_finished_leaves_nothing_after_the_next_build(
    folders: Path, tmp_path: Path
) -> None:
    import socket
    import subprocess

    finished = subprocess.Popen(["true"])
    finished.wait()  # its pid names a process that has ended
    host = socket.gethostname()
    left_over = tmp_path / f"cache.building-{host}@{finished.pid}-x1y2z3"
    running = tmp_path / f"cache.building-{host}@{os.getpid()}-a1b2c3"  # another build of this process
    other_host = tmp_path / f"cache.building-{host}-9@{finished.pid}-d4e5f6"  # host "<host>-9"
    for folder in (left_over, running, other_host):
        folder.mkdir()
        (folder / "images.npy").write_bytes(bytes(1000))
    open_cache(FolderDataset(folders, progress=False), tmp_path / "cache").close()
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["cache", "cache.lock", running.name, other_host.name, "data"]
    )


def test_a_cache_path_where_nothing_can_be_written_names_the_folder(folders: Path, tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(CacheError, match=r"cannot write in .*a_file.* to build the cache there"):
        open_cache(FolderDataset(folders, progress=False), tmp_path / "a_file" / "cache")


def test_a_symlinked_cache_path_stays_a_link_to_the_rebuilt_cache(folders: Path, tmp_path: Path) -> None:
    dataset = FolderDataset(folders, progress=False)
    (tmp_path / "disk").mkdir()
    (tmp_path / "disk" / "cache").mkdir()
    link = tmp_path / "cache"
    link.symlink_to(tmp_path / "disk" / "cache")
    open_cache(dataset, link).close()
    with pytest.warns(UserWarning, match="rebuilding"):
        open_cache(dataset, link, max_side=16).close()
    assert link.is_symlink() and (link / META_FILE).exists()
    assert sorted(os.listdir(tmp_path / "disk")) == ["cache", "cache.lock"]  # nothing left beside it


def test_the_cli_refuses_a_cache_inside_the_data_folder(
    folders: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["cache", str(folders), "--out", str(folders / "cache")]) == 2
    assert "inside the data folder" in capsys.readouterr().err
    assert not (folders / "cache").exists()


def test_shared_memory_filled_by_another_process_meanwhile_is_a_space_error(
    folders: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    dataset = FolderDataset(folders, progress=False)
    open_cache(dataset, tmp_path / "cache").close()
    before = set(os.listdir(memory_module.SHM_ROOT))

    def full(source: str, target: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(memory_module.shutil, "copyfile", full)
    with pytest.raises(CacheSpaceError, match="filled up while cache"):
        open_cache(dataset, tmp_path / "cache", location="memory")
    assert set(os.listdir(memory_module.SHM_ROOT)) <= before  # its partial copy removed


def test_a_dataset_none_of_whose_images_decodes_is_an_error_not_an_empty_cache(tmp_path: Path) -> None:
    root = tmp_path / "data"
    write_class_folders(root, [0, 0], truncated=3, progress=False)
    dataset = FolderDataset(root, on_error="skip", progress=False)
    assert len(dataset) == 3  # truncated files pass the header check
    with pytest.raises(EmptyDatasetError, match=r"no sample of .* could be decoded"):
        open_cache(dataset, tmp_path / "cache")
    assert not (tmp_path / "cache").exists()
