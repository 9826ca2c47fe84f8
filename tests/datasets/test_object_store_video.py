"""VideoClipDataset on a real S3 server (SeaweedFS on loopback, behind the counting proxy): videos
as cameras and phones write them (an MP4's ``moov`` at the end), a faststart MP4, a mirrored
Matroska file and a variable-rate MP4, probed from their headers and read in few ranged GETs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from torch.utils.data import DataLoader

from s3proxy import FaultProxy
from s3server import S3Bucket, S3Server
from torchloom import FaultReport, SampleKey, collate
from torchloom.datasets import Manifest, VideoClipDataset
from torchloom.errors import ObjectChangedError
from torchloom.faults import Skipped
from torchloom.io import ObjectRoot, ObjectStore, probe_video, read_frames
from torchloom.io.ranged_file import BLOCK_BYTES
from video_files import decode_everything, encode

FRAMES, RATE = 250, 25  # 10 s of 128×96 noise, a keyframe a second: about 7 KB a frame
HFLIP = (-65536, 0, 0, 65536)
# A front camera's turn and mirror: rows and columns swapped, which a decoded frame's rotation
# cannot say (only the track header's matrix does).
TRANSPOSE = (0, 65536, 65536, 0)
# Each file as its key below the dataset root, and how it is written.
VIDEOS = {
    "phone/camera.mp4": {"matrix": TRANSPOSE},  # moov at the end, as a camera writes it
    "phone/vfr.mp4": {"times": "vfr"},  # a phone's variable frame rate, moov at the end
    "web/faststart.mp4": {"options": {"movflags": "faststart"}},
    "web/mirrored.mkv": {"matrix": HFLIP},
}


def vfr_times() -> np.ndarray:
    gaps = np.random.default_rng(1).choice([0.033, 0.04, 0.05], FRAMES - 1)
    return np.concatenate([[0.0], np.cumsum(gaps)]).round(3)


@pytest.fixture(scope="module")
def local_videos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The videos of :data:`VIDEOS`, written once below a local folder."""
    root = tmp_path_factory.mktemp("videos")
    noise = np.random.default_rng(0).integers(0, 256, (FRAMES, 96, 128, 3), dtype=np.uint8)
    for key, how in VIDEOS.items():
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        settings = dict(how)
        if settings.pop("times", None):
            settings["times"] = vfr_times()
        encode(path, FRAMES, rate=RATE, images=noise, **settings)  # type: ignore[arg-type]
    return root


def upload(s3_server: S3Server, bucket: S3Bucket, local: Path) -> str:
    """The local videos put below ``clips/`` of ``bucket``; the root URL."""
    fs = s3_server.filesystem()
    for key in VIDEOS:
        fs.put_file(str(local / key), bucket.path(f"clips/{key}"))
    return bucket.url_of("clips")


def store_for(proxy: FaultProxy) -> ObjectStore:
    return ObjectStore(proxy.storage_options, backoff=0.01)


def test_a_probe_reads_the_header_of_an_mp4_not_its_media(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, local_videos: Path
) -> None:
    url = upload(s3_server, s3_bucket, local_videos)
    root = ObjectRoot(url, store_for(s3_proxy))
    # A faststart MP4: its moov and first packets lie in its first block, one ranged GET.
    # A camera's (moov at the end): the first block, then one GET of the end; the first packets
    # come from the first block, still held.
    for key, gets in (("web/faststart.mp4", 1), ("phone/camera.mp4", 2)):
        s3_proxy.reset_counts()
        before = root.store.stats.bytes
        header = probe_video(f"{url}/{key}", inside=root)
        assert header == probe_video(local_videos / key)
        counts = s3_proxy.requests
        assert (counts.total, counts.ranged_gets) == (gets, gets), key
        assert root.store.stats.bytes - before <= gets * BLOCK_BYTES
    assert (local_videos / "phone/camera.mp4").stat().st_size > 20 * BLOCK_BYTES


def test_a_variable_rate_or_matroska_probe_reads_the_file_once_in_few_gets(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, local_videos: Path
) -> None:
    url = upload(s3_server, s3_bucket, local_videos)
    root = ObjectRoot(url, store_for(s3_proxy))
    for key in ("phone/vfr.mp4", "web/mirrored.mkv"):
        # Their frames are counted from every packet: each read continues the last and fetches
        # twice as much, so the file's ~1.7 MB is a handful of GETs, not one per 64 KiB.
        s3_proxy.reset_counts()
        before = root.store.stats.bytes
        header = probe_video(f"{url}/{key}", inside=root)
        local = probe_video(local_videos / key)
        assert header == local and np.array_equal(header.frame_ticks, local.frame_ticks)
        size = (local_videos / key).stat().st_size
        assert s3_proxy.requests.total == s3_proxy.requests.ranged_gets <= 8, key
        assert root.store.stats.bytes - before <= size + 3 * BLOCK_BYTES
    assert not probe_video(local_videos / "phone/vfr.mp4").on_grid


def test_a_url_dataset_reads_the_frames_a_local_read_does_in_few_gets_per_clip(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, local_videos: Path
) -> None:
    url = upload(s3_server, s3_bucket, local_videos)
    store = store_for(s3_proxy)
    options = {"frames": 32, "sampling": "random_segment", "stride": 4, "seed": 3, "progress": False}
    remote = VideoClipDataset(url, storage_options=store, **options)  # type: ignore[arg-type]
    local = VideoClipDataset(str(local_videos), **options)  # type: ignore[arg-type]
    assert remote.classes == local.classes == ["phone", "web"]
    assert (s3_proxy.requests.heads, s3_proxy.requests.gets) == (0, 0)
    for index, key in enumerate(sorted(VIDEOS)):
        s3_proxy.reset_counts()
        before = store.stats.bytes
        key_of = SampleKey(index, epoch=1)
        sample, expected = remote[key_of], local[key_of]
        gets, fetched = s3_proxy.requests.ranged_gets, store.stats.bytes - before
        assert sample["path"] == f"{url}/{key}"
        assert np.array_equal(sample["video"].numpy(), expected["video"].numpy()), key
        assert np.array_equal(sample["timestamps"].numpy(), expected["timestamps"].numpy()), key
        # 32 frames 4 apart (5 s, ~900 KB from the keyframe before): the open, a seek and a
        # readahead that doubles, not ~14 GETs of 64 KiB; a held header serves the orientation.
        assert s3_proxy.requests.total == gets <= 8, (key, gets)
        assert fetched < (local_videos / key).stat().st_size, key


def test_a_manifest_url_names_its_videos_without_a_listing(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, local_videos: Path
) -> None:
    url = upload(s3_server, s3_bucket, local_videos)
    rows = "file,action\nweb/faststart.mp4,wave\nphone/camera.mp4,walk\nweb/gone.mkv,wave\n"
    s3_server.filesystem().pipe(s3_bucket.path("clips/list.csv"), rows.encode())
    source = Manifest(f"{url}/list.csv", path_column="file", label_column="action")
    clips = VideoClipDataset(source, frames=4, storage_options=store_for(s3_proxy), progress=False)
    counts = s3_proxy.requests
    # The manifest (one GET), then each video's header: no listing, no HEAD.
    assert (counts.lists, counts.heads, counts.gets) == (0, 0, 1)
    assert clips.classes == ["walk", "wave"] and len(clips) == 2
    assert [path for path, _ in clips.report.invalid] == [f"{url}/web/gone.mkv"]
    sample = clips[1]
    assert sample["path"] == f"{url}/phone/camera.mp4" and sample["label"] == 0
    expected = VideoClipDataset([str(local_videos / "phone/camera.mp4")], frames=4)[0]
    assert np.array_equal(sample["video"].numpy(), expected["video"].numpy())


@pytest.mark.parametrize("key", sorted(VIDEOS))
def test_frames_read_from_a_url_are_those_a_decode_from_the_start_gives(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, local_videos: Path, key: str
) -> None:
    url = upload(s3_server, s3_bucket, local_videos)
    clips = VideoClipDataset(
        [f"{url}/{key}"], frames=12, storage_options=store_for(s3_proxy), display_rotation=False
    )
    stored, stamps = decode_everything(local_videos / key)
    slots = clips.slots(0, np.random.default_rng(0))
    sample = clips[0]
    assert np.array_equal(sample["video"].permute(0, 2, 3, 1).numpy(), stored[slots])
    assert np.allclose(sample["timestamps"].numpy(), stamps[slots])


def test_a_mirroring_display_matrix_is_read_from_the_object_headers(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, local_videos: Path
) -> None:
    url = upload(s3_server, s3_bucket, local_videos)
    root = ObjectRoot(url, store_for(s3_proxy))
    # The MP4's tkhd (in its moov, at the end) and the Matroska projection are read through the
    # open object: its header blocks, held since the open, serve them without another GET (the
    # first frame's packets lie in the first block).
    for key, turn, gets in (
        ("phone/camera.mp4", lambda f: f.transpose(1, 0, 2), 2),
        ("web/mirrored.mkv", lambda f: f[:, ::-1], 1),
    ):
        stored, _ = decode_everything(local_videos / key)
        s3_proxy.reset_counts()
        shown = read_frames(f"{url}/{key}", [0.0], inside=root).frames
        assert (s3_proxy.requests.total, s3_proxy.requests.ranged_gets) == (gets, gets), key
        assert np.array_equal(shown, read_frames(local_videos / key, [0.0]).frames), key
        assert np.array_equal(shown[0], turn(stored[0])), key


def test_a_video_deleted_after_indexing_is_skipped_and_reported_by_url(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, local_videos: Path
) -> None:
    url = upload(s3_server, s3_bucket, local_videos)
    s3_server.filesystem().pipe(s3_bucket.path("clips/web/empty.mp4"), b"")
    clips = VideoClipDataset(
        url,
        frames=4,
        storage_options=store_for(s3_proxy),
        on_error="skip",
        display_rotation=False,
        progress=False,
    )
    assert clips.report.invalid == [(f"{url}/web/empty.mp4", "file is empty (0 bytes)")]
    s3_server.filesystem().rm(s3_bucket.path("clips/phone/vfr.mp4"))
    report = FaultReport()
    batches = list(report.watch([collate(clips.__getitems__(list(range(len(clips)))))]))
    assert batches[0]["video"].shape[0] == len(VIDEOS) - 1
    (skipped,) = report.skipped
    assert skipped.path == f"{url}/phone/vfr.mp4" and skipped.error == "MissingFileError"
    assert "not in the store" in skipped.reason


def test_a_video_rewritten_after_indexing_is_named_never_mixed_in(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, local_videos: Path
) -> None:
    url = upload(s3_server, s3_bucket, local_videos)
    clips = VideoClipDataset(url, frames=4, storage_options=store_for(s3_proxy), progress=False)
    fs = s3_server.filesystem()
    original = (local_videos / "web/faststart.mp4").read_bytes()
    fs.pipe(s3_bucket.path("clips/web/faststart.mp4"), original[:-1] + bytes([original[-1] ^ 1]))
    with pytest.raises(Exception, match=r"faststart\.mp4") as rewritten:
        clips[2]
    assert isinstance(rewritten.value.__cause__, ObjectChangedError)
    assert "ETag" in str(rewritten.value.__cause__)
    skipping = VideoClipDataset(
        url, frames=4, storage_options=store_for(s3_proxy), on_error="skip", progress=False
    )
    fs.pipe(s3_bucket.path("clips/web/faststart.mp4"), original[: len(original) // 2])
    cut = skipping[2]
    assert isinstance(cut, Skipped) and cut.error == "ObjectChangedError"


def test_dataloader_workers_read_the_clips_of_a_url_dataset(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, local_videos: Path
) -> None:
    url = upload(s3_server, s3_bucket, local_videos)
    clips = VideoClipDataset(
        url, frames=4, storage_options=store_for(s3_proxy), display_rotation=False, progress=False
    )
    loader = DataLoader(clips, batch_size=2, num_workers=2, collate_fn=collate)
    paths = [path for batch in loader for path in batch["path"]]
    assert sorted(paths) == [f"{url}/{key}" for key in sorted(VIDEOS)]
