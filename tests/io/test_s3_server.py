"""The object-store test infrastructure itself: a real SeaweedFS S3 server and the FaultProxy.

These pin what the object-store tests build on: bytes and headers pass the proxy unchanged, the
counters count what s3fs sends, each fault reaches botocore as the error it stands for, latency
overlaps across requests, and the volume server can be killed and started again.
"""

from __future__ import annotations

import http.client
import os
import threading
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from s3server import FaultProxy, RequestCounts, S3Bucket, S3Server, request_kind

boto_errors = pytest.importorskip("botocore.exceptions", reason="the S3 tests need s3fs (torchloom[s3])")

BLOB = os.urandom(300_000)  # several TCP segments, below the 4 MiB chunks SeaweedFS splits at


def raw_get(endpoint: str, target: str, headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
    """One unsigned request on a fresh connection, its response body read into ``.data``."""
    parts = urlsplit(endpoint)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    connection.request("GET", target, headers=headers or {})
    response = connection.getresponse()
    response.data = response.read()  # type: ignore[attr-defined]
    connection.close()
    return response


def test_objects_round_trip_byte_exact_through_server_and_proxy(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    direct, proxied = s3_server.filesystem(), s3_proxy.filesystem()
    direct.pipe(s3_bucket.path("in/direct.bin"), BLOB)
    proxied.pipe(s3_bucket.path("in/proxied.bin"), BLOB)
    for key in ("in/direct.bin", "in/proxied.bin"):
        for filesystem in (direct, proxied):
            path = s3_bucket.path(key)
            assert filesystem.cat_file(path) == BLOB
            assert filesystem.cat_file(path, start=1000, end=70_001) == BLOB[1000:70_001]
            assert filesystem.cat_file(path, start=len(BLOB) - 7) == BLOB[-7:]
        assert direct.info(s3_bucket.path(key))["ETag"] == proxied.info(s3_bucket.path(key))["ETag"]


def test_range_etag_and_content_range_headers_pass_unchanged(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    s3_server.filesystem().pipe(s3_bucket.path("headers.bin"), BLOB)
    target = f"/{s3_bucket.name}/headers.bin"
    direct = raw_get(s3_server.endpoint, target, {"Range": "bytes=10-4009"})
    proxied = raw_get(s3_proxy.endpoint, target, {"Range": "bytes=10-4009"})
    assert proxied.status == direct.status == 206
    assert proxied.data == direct.data == BLOB[10:4010]  # type: ignore[attr-defined]
    for header in ("ETag", "Content-Range", "Content-Length", "Last-Modified", "Accept-Ranges"):
        assert proxied.headers[header] == direct.headers[header], header
    assert proxied.headers["Content-Range"] == f"bytes 10-4009/{len(BLOB)}"
    etag = direct.headers["ETag"]
    assert raw_get(s3_proxy.endpoint, target, {"If-None-Match": etag}).status == 304
    assert raw_get(s3_proxy.endpoint, target, {"If-Match": '"not-the-etag"'}).status == 412


def test_counts_what_s3fs_sends(s3_proxy: FaultProxy, s3_bucket: S3Bucket) -> None:
    filesystem = s3_proxy.filesystem()
    filesystem.pipe(s3_bucket.path("a/one.bin"), b"x" * 100)
    assert s3_proxy.requests == RequestCounts(puts=1)
    s3_proxy.reset_counts()
    assert filesystem.cat_file(s3_bucket.path("a/one.bin"), start=0, end=10) == b"x" * 10
    assert s3_proxy.requests == RequestCounts(ranged_gets=1)  # one GET, no HEAD
    s3_proxy.reset_counts()
    assert filesystem.cat(s3_bucket.path("a/one.bin")) == b"x" * 100
    assert s3_proxy.requests == RequestCounts(heads=1, gets=1)  # s3fs's cat asks for the size first
    s3_proxy.reset_counts()
    assert filesystem.ls(s3_bucket.path("a"), detail=False) == [s3_bucket.path("a/one.bin")]
    assert s3_proxy.requests == RequestCounts(lists=1)


@pytest.mark.parametrize(
    ("method", "target", "headers", "kind"),
    [
        ("GET", "/bkt/key.jpg", {}, "gets"),
        ("GET", "/bkt/dir/key.jpg", {"Range": "bytes=0-9"}, "ranged_gets"),
        ("HEAD", "/bkt/key.jpg", {}, "heads"),
        ("HEAD", "/bkt", {}, "others"),
        ("GET", "/bkt?list-type=2&prefix=&delimiter=%2F", {}, "lists"),
        ("GET", "/bkt/?prefix=a%2F", {}, "lists"),
        ("GET", "/bkt", {}, "lists"),
        ("GET", "/bkt?location", {}, "others"),
        ("GET", "/", {}, "others"),
        ("PUT", "/bkt/key.jpg", {}, "puts"),
        ("PUT", "/bkt", {}, "puts"),
        ("DELETE", "/bkt/key.jpg", {}, "others"),
        ("POST", "/bkt/key.jpg?uploads", {}, "others"),
    ],
)
def test_request_kinds(method: str, target: str, headers: dict[str, str], kind: str) -> None:
    message = Message()
    for name, value in headers.items():
        message[name] = value
    assert request_kind(method, target, message) == kind


def test_fail_next_answers_an_s3_slowdown_botocore_sees(s3_proxy: FaultProxy, s3_bucket: S3Bucket) -> None:
    filesystem = s3_proxy.filesystem(attempts=1)
    filesystem.pipe(s3_bucket.path("busy.bin"), b"data")
    s3_proxy.fail_next(1)
    with pytest.raises(OSError) as caught:
        filesystem.cat_file(s3_bucket.path("busy.bin"), start=0, end=4)
    cause = caught.value.__cause__ or caught.value.__context__
    assert isinstance(cause, boto_errors.ClientError)
    assert cause.response["Error"]["Code"] == "SlowDown"
    assert cause.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert filesystem.cat_file(s3_bucket.path("busy.bin"), start=0, end=4) == b"data"
    assert s3_proxy.injected == 1


def test_faults_hit_only_the_object_gets_path_glob_matches(s3_proxy: FaultProxy, s3_bucket: S3Bucket) -> None:
    filesystem = s3_proxy.filesystem(attempts=1)
    filesystem.pipe({s3_bucket.path("keep/a.bin"): b"a", s3_bucket.path("hit/b.bin"): b"b"})
    s3_proxy.fail_next(2, status=500, code="InternalError", path_glob=f"{s3_bucket.name}/hit/*")
    assert filesystem.ls(s3_bucket.path("hit"), detail=False) == [s3_bucket.path("hit/b.bin")]
    assert filesystem.cat_file(s3_bucket.path("keep/a.bin"), start=0, end=1) == b"a"
    with pytest.raises(OSError):
        filesystem.cat_file(s3_bucket.path("hit/b.bin"), start=0, end=1)
    with pytest.raises(OSError):
        filesystem.cat_file(s3_bucket.path("hit/b.bin"), start=0, end=1)
    assert filesystem.cat_file(s3_bucket.path("hit/b.bin"), start=0, end=1) == b"b"
    assert s3_proxy.injected == 2


def test_drop_next_resets_the_connection(s3_proxy: FaultProxy, s3_bucket: S3Bucket) -> None:
    filesystem = s3_proxy.filesystem(attempts=1)
    filesystem.pipe(s3_bucket.path("drop.bin"), b"data")
    s3_proxy.reset_counts()
    s3_proxy.drop_next(1)
    # aiohttp itself sends an idempotent request again once after a reset, below botocore's retries
    assert filesystem.cat_file(s3_bucket.path("drop.bin"), start=0, end=4) == b"data"
    assert (s3_proxy.requests.ranged_gets, s3_proxy.injected) == (2, 1)
    s3_proxy.drop_next(2)
    with pytest.raises(boto_errors.EndpointConnectionError):  # what botocore makes of a reset
        filesystem.cat_file(s3_bucket.path("drop.bin"), start=0, end=4)
    assert s3_proxy.injected == 3
    assert filesystem.cat_file(s3_bucket.path("drop.bin"), start=0, end=4) == b"data"


def test_stall_next_outlasts_a_client_read_timeout(s3_proxy: FaultProxy, s3_bucket: S3Bucket) -> None:
    filesystem = s3_proxy.filesystem(attempts=1, config_kwargs={"read_timeout": 0.5})
    filesystem.pipe(s3_bucket.path("slow.bin"), b"data")
    s3_proxy.stall_next(1, 30.0)
    with pytest.raises(boto_errors.ReadTimeoutError):
        filesystem.cat_file(s3_bucket.path("slow.bin"), start=0, end=4)
    assert s3_proxy.injected == 1
    assert filesystem.cat_file(s3_bucket.path("slow.bin"), start=0, end=4) == b"data"


def test_latency_is_per_request_so_concurrent_requests_overlap(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    s3_server.filesystem().pipe(s3_bucket.path("many.bin"), BLOB[:1000])
    s3_proxy.latency = 0.5
    start = threading.Barrier(16)
    bodies: list[bytes] = []

    def read() -> None:
        start.wait()
        bodies.append(raw_get(s3_proxy.endpoint, f"/{s3_bucket.name}/many.bin").data)  # type: ignore[attr-defined]

    threads = [threading.Thread(target=read) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert bodies == [BLOB[:1000]] * 16
    assert s3_proxy.requests == RequestCounts(gets=16)
    assert s3_proxy.peak_in_flight >= 4


def test_killing_the_volume_server_fails_reads_until_it_starts_again(
    s3_server: S3Server, s3_bucket: S3Bucket
) -> None:
    writer = s3_server.filesystem()
    writer.pipe(s3_bucket.path("kept.bin"), BLOB)
    # A filer that holds the dead server's address retries it ~13 s before it answers 500, so the
    # client times out sooner; one that does not answers 500 at once (s3fs: an OSError, as is the
    # timeout).
    reader = s3_server.filesystem(attempts=1, config_kwargs={"read_timeout": 2})
    s3_server.kill_volume()
    try:
        assert not s3_server.volume_running
        with pytest.raises(OSError):
            reader.cat_file(s3_bucket.path("kept.bin"), start=0, end=100)
    finally:
        s3_server.start_volume()
    assert s3_server.volume_running
    assert s3_server.filesystem().cat_file(s3_bucket.path("kept.bin")) == BLOB


def write_fake_weed(folder: Path, body: str) -> Path:
    """An executable standing in for ``weed``: a shell script running ``body``."""
    script = folder / "weed"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return script


def test_a_server_whose_weed_exits_says_so_with_its_log_and_leaves_nothing(tmp_path: Path) -> None:
    weed = write_fake_weed(tmp_path, 'echo "cannot bind: port taken" >&2; exit 1')
    (tmp_path / "servers").mkdir()
    server = S3Server(weed=weed, parent=tmp_path / "servers", startup_timeout=10)
    with pytest.raises(RuntimeError, match=r"(?s)exited while waiting.*cannot bind: port taken"):
        server.start()
    assert server.root is None
    assert list((tmp_path / "servers").iterdir()) == []


def test_stopping_kills_each_process_group_and_reaps_it(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    weed = write_fake_weed(tmp_path, f'sleep 300 & echo "$$ $!" >> {pids}; wait')
    (tmp_path / "servers").mkdir()
    server = S3Server(weed=weed, parent=tmp_path / "servers", startup_timeout=1)
    with pytest.raises(RuntimeError, match="did not come up within 1 s"):
        server.start()
    started = [int(pid) for line in pids.read_text().splitlines() for pid in line.split()]
    assert len(started) == 6  # master, volume and filer, each a shell and its sleep
    for pid in started:
        assert not process_runs(pid), pid
    assert list((tmp_path / "servers").iterdir()) == []


def process_runs(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, reaped by no one yet, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


class ChunkedUpstream(BaseHTTPRequestHandler):
    """Answers every GET with a chunked body in three chunks and a header of its own."""

    protocol_version = "HTTP/1.1"
    pieces = (b"first ", b"second ", b"third")

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("X-Upstream", "kept")
        self.end_headers()
        for piece in self.pieces:
            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


def test_chunked_responses_pass_through_on_a_kept_alive_connection() -> None:
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), ChunkedUpstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    try:
        with FaultProxy(f"http://127.0.0.1:{upstream.server_address[1]}") as proxy:
            connection = http.client.HTTPConnection("127.0.0.1", int(proxy.endpoint.rsplit(":", 1)[1]))
            for _ in range(2):  # the second request reuses the client's connection
                connection.request("GET", "/bkt/streamed")
                response = connection.getresponse()
                assert response.headers["Transfer-Encoding"] == "chunked"
                assert response.headers["X-Upstream"] == "kept"
                assert response.read() == b"".join(ChunkedUpstream.pieces)
            connection.close()
            assert proxy.requests == RequestCounts(gets=2)
    finally:
        upstream.shutdown()
        upstream.server_close()
