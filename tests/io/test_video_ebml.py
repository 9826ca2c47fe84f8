"""The Matroska projection parser on hostile files: huge declared sizes, deep nesting, cut
elements and floods of elements are a typed error or end the search, each read bounded."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from torchloom.errors import DecodeError, UnsafeFileError
from torchloom.io import video_ebml
from torchloom.io.video_ebml import MAX_ELEMENTS, MAX_TRACKS_BYTES, pose_matrix, projection_matrix

EBML, SEGMENT, TRACKS, CLUSTER = (
    b"\x1a\x45\xdf\xa3",
    b"\x18\x53\x80\x67",
    b"\x16\x54\xae\x6b",
    b"\x1f\x43\xb6\x75",
)
ENTRY, TRACK_TYPE, VIDEO, PROJECTION = b"\xae", b"\x83", b"\xe0", b"\x76\x70"
TYPE, YAW, PITCH, ROLL, VOID = b"\x76\x71", b"\x76\x73", b"\x76\x74", b"\x76\x75", b"\xec"
UNKNOWN = b"\x01\xff\xff\xff\xff\xff\xff\xff"  # an 8-byte size with every value bit set
ONE = 1 << 16


def size(count: int) -> bytes:
    return bytes([0x01]) + count.to_bytes(7, "big")  # the 8-byte form, as muxers reserve sizes


def element(kind: bytes, *children: bytes) -> bytes:
    payload = b"".join(children)
    return kind + size(len(payload)) + payload


def pose(yaw: float = 0.0, pitch: float = 0.0, roll: float = 0.0) -> bytes:
    return (
        element(YAW, struct.pack(">d", yaw))
        + element(PITCH, struct.pack(">d", pitch))
        + element(ROLL, struct.pack(">f", roll))
    )


def video_track(*video: bytes) -> bytes:
    return element(ENTRY, element(TRACK_TYPE, b"\x01"), element(VIDEO, *video))


def mkv(tmp_path: Path, *segment: bytes, segment_size: bytes | None = None, name: str = "x.mkv") -> Path:
    body = b"".join(segment)
    path = tmp_path / name
    head = element(EBML, element(b"\x42\x82", b"matroska"))
    path.write_bytes(head + SEGMENT + (segment_size or size(len(body))) + body)
    return path


def test_the_first_video_track_s_pose_is_read_audio_and_unknown_elements_skipped(tmp_path: Path) -> None:
    audio = element(ENTRY, element(TRACK_TYPE, b"\x02"), element(VIDEO, element(PROJECTION, pose(yaw=180))))
    path = mkv(
        tmp_path,
        element(VOID, bytes(100)),
        element(TRACKS, audio, video_track(element(b"\xb0", b"\x40"), element(PROJECTION, pose(roll=-90)))),
    )
    assert projection_matrix(path) == pose_matrix(yaw=0.0, pitch=0.0, roll=-90.0) == (0, ONE, -ONE, 0)


@pytest.mark.parametrize(
    ("projection", "why"),
    [
        (pose(), "a pose of zeros"),
        (pose(pitch=30), "a pitch"),
        (pose(yaw=90), "a yaw no flat frame shows"),
        (element(TYPE, b"\x01") + pose(yaw=180), "a 360° projection"),
    ],
)
def test_poses_ffmpeg_builds_no_matrix_from_give_none(tmp_path: Path, projection: bytes, why: str) -> None:
    path = mkv(tmp_path, element(TRACKS, video_track(element(PROJECTION, projection))))
    assert projection_matrix(path) is None, why


def test_an_unknown_size_segment_is_read_to_the_end_of_the_file(tmp_path: Path) -> None:
    path = mkv(
        tmp_path, element(TRACKS, video_track(element(PROJECTION, pose(yaw=180)))), segment_size=UNKNOWN
    )
    assert projection_matrix(path) == (-ONE, 0, 0, ONE)


def test_a_cluster_before_the_tracks_or_a_flood_of_elements_ends_the_search(tmp_path: Path) -> None:
    tracks = element(TRACKS, video_track(element(PROJECTION, pose(yaw=180))))
    live = mkv(tmp_path, CLUSTER + UNKNOWN + bytes(64), tracks, name="live.mkv")
    assert projection_matrix(live) is None
    flood = mkv(tmp_path, b"\xec\x80" * (MAX_ELEMENTS + 1), tracks, name="flood.mkv")  # empty Voids
    assert projection_matrix(flood) is None


def test_deep_nesting_is_skipped_by_size_never_descended(tmp_path: Path) -> None:
    nested = b""
    for _ in range(20_000):
        nested = element(b"\x55\xb0", nested)  # Colour inside Colour inside ..., 180 kB deep
    path = mkv(tmp_path, element(TRACKS, video_track(nested, element(PROJECTION, pose(roll=180)))))
    assert projection_matrix(path) == (-ONE, 0, 0, -ONE)


def test_a_huge_declared_tracks_size_is_refused_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[int] = []
    real = video_ebml.read_range

    def counted(path: str, offset: int, length: int, *, inside: str | None) -> bytes:
        reads.append(length)
        return real(path, offset, length, inside=inside)

    monkeypatch.setattr(video_ebml, "read_range", counted)
    path = mkv(tmp_path, TRACKS + b"\x01\x00\xff\xff\xff\xff\xff\xff" + video_track())
    with pytest.raises(
        DecodeError,
        match=r"x\.mkv.*Tracks element declares 281,474,976,710,655 bytes.*display_rotation=False",
    ):
        projection_matrix(path)
    assert max(reads) <= max(MAX_TRACKS_BYTES, video_ebml.FIRST_READ)


@pytest.mark.parametrize(
    ("segment", "message"),
    [
        (
            TRACKS + size(500) + video_track(),
            r"Tracks element \(content from byte 54\) is cut short: the file is truncated",
        ),
        (TRACKS[:3], r"element header at offset \d+ is cut short: the file is truncated"),
        (
            TRACKS + UNKNOWN + video_track(),
            r"Tracks element \(content from byte 54\) declares an unknown size",
        ),
        (element(TRACKS, ENTRY + size(999) + bytes(8)), r"ID 0xAE\) that declares 999 bytes.*corrupt"),
        (element(TRACKS, ENTRY + UNKNOWN), r"ID 0xAE\) that declares an unknown size.*corrupt"),
        (element(TRACKS, b"\x00\x81\x00"), r"element header at offset \d+ is malformed"),
        (
            element(TRACKS, video_track(element(PROJECTION, element(YAW, b"\x43\x34\x00")))),
            "3 bytes.*no float",
        ),
    ],
    ids=[
        "tracks cut",
        "header cut",
        "unknown tracks",
        "entry too big",
        "unknown entry",
        "bad id",
        "bad float",
    ],
)
def test_malformed_tracks_are_a_decode_error_naming_the_file(
    tmp_path: Path, segment: bytes, message: str
) -> None:
    path = mkv(tmp_path, segment)
    with pytest.raises(DecodeError, match=rf"x\.mkv.*{message}"):
        projection_matrix(path)


def test_a_file_that_is_no_ebml_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "text.mkv"
    path.write_bytes(b"not a matroska file at all")
    with pytest.raises(DecodeError, match="no Matroska or WebM file"):
        projection_matrix(path)


def test_reads_stay_inside_the_root(tmp_path: Path) -> None:
    outside = mkv(tmp_path, element(TRACKS, video_track(element(PROJECTION, pose(yaw=180)))))
    root = tmp_path / "root"
    root.mkdir()
    os.symlink(outside, root / "link.mkv")
    assert projection_matrix(root / "link.mkv") == (-ONE, 0, 0, ONE)
    with pytest.raises(UnsafeFileError, match="outside"):
        projection_matrix(root / "link.mkv", inside=os.path.realpath(root))
