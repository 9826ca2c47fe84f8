"""A fault-injecting HTTP/1.1 reverse proxy for an S3 endpoint, for tests and benchmarks.

It forwards every request unchanged (Host header included, so SigV4 signatures still hold) and
streams the response back with its status, headers and body as the server sent them. At runtime a
test can add latency to every request, answer the next requests with an S3 error, reset their
connections or hold them past a client timeout, and read how many requests of each kind arrived.
"""

from __future__ import annotations

import contextlib
import fnmatch
import http.client
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from s3client import filesystem_for, storage_options_for

__all__ = ["FaultProxy", "RequestCounts", "request_kind"]

KINDS = ("gets", "ranged_gets", "heads", "lists", "puts", "others")
LIST_QUERY_KEYS = frozenset({"list-type", "prefix", "delimiter", "marker", "continuation-token"})
UPSTREAM_TIMEOUT_S = 120.0
COPY_CHUNK = 1 << 16
LISTEN_BACKLOG = 256
# Headers a proxy must not pass on: Expect is answered here (the handler sends 100 Continue).
NOT_FORWARDED = frozenset({"expect"})
ERROR_MESSAGES = {
    "SlowDown": "Please reduce your request rate.",
    "InternalError": "We encountered an internal error. Please try again.",
    "ServiceUnavailable": "Service is unable to handle request.",
}


@dataclass(frozen=True)
class RequestCounts:
    """Requests seen by kind: object GETs without and with ``Range``, object HEADs, LISTs (a GET
    on a bucket listing it), PUTs (objects, parts, buckets) and everything else."""

    gets: int = 0
    ranged_gets: int = 0
    heads: int = 0
    lists: int = 0
    puts: int = 0
    others: int = 0

    @property
    def object_gets(self) -> int:
        """Object GETs with or without a ``Range``."""
        return self.gets + self.ranged_gets

    @property
    def total(self) -> int:
        return sum(getattr(self, field.name) for field in fields(self))


def request_kind(method: str, target: str, headers: Any) -> str:
    """Which :class:`RequestCounts` field a request counts in (path-style addressing)."""
    parts = urlsplit(target)
    bucket, _, key = parts.path.lstrip("/").partition("/")
    if method == "PUT":
        return "puts"
    if method == "HEAD" and key:
        return "heads"
    if method != "GET" or not bucket:
        return "others"
    if key:
        return "ranged_gets" if headers.get("Range") else "gets"
    query = parse_qs(parts.query, keep_blank_values=True)
    return "lists" if not query or LIST_QUERY_KEYS & query.keys() else "others"


@dataclass
class _Fault:
    """``remaining`` requests (matching ``path_glob`` when given) get ``action``."""

    action: str  # "fail", "drop" or "stall"
    remaining: int
    path_glob: str | None
    status: int = 503
    code: str = "SlowDown"
    seconds: float = 0.0

    def hits(self, method: str, path: str) -> bool:
        if self.path_glob is None:
            return True
        return method == "GET" and "/" in path and fnmatch.fnmatchcase(path, self.path_glob)


class FaultProxy:
    """A reverse proxy on 127.0.0.1 in front of ``upstream`` (``http://host:port``).

    Args:
        upstream: the S3 endpoint to forward to.

    Settings change at runtime from any thread: :attr:`latency`, :meth:`fail_next`,
    :meth:`drop_next`, :meth:`stall_next`, :meth:`clear_faults`. Queued faults are served in the
    order they were queued, each to the requests its ``path_glob`` matches (a glob on
    ``bucket/key`` of object GETs; ``None`` matches every request).

    Example::

        with FaultProxy(server.endpoint) as proxy:
            proxy.latency = 0.020
            proxy.fail_next(2, path_glob="images/train/*")
            fs = proxy.filesystem(attempts=1)
            ...
            assert proxy.requests.heads == 0
    """

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or parts.hostname is None or parts.port is None:
            raise ValueError(f"upstream={upstream!r} must look like http://127.0.0.1:PORT")
        self.upstream_address = (parts.hostname, parts.port)
        self._lock = threading.Lock()
        self._latency = 0.0
        self._faults: list[_Fault] = []
        self._counts = dict.fromkeys(KINDS, 0)
        self._in_flight = 0
        self._peak_in_flight = 0
        self._injected = 0
        self._closing = threading.Event()
        self._connections: set[socket.socket] = set()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- settings ------------------------------------------------------------------------------

    @property
    def latency(self) -> float:
        """Seconds each request waits before it is forwarded (each on its own thread)."""
        with self._lock:
            return self._latency

    @latency.setter
    def latency(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"latency={seconds} must be zero or more seconds")
        with self._lock:
            self._latency = float(seconds)

    def fail_next(
        self, n: int, status: int = 503, code: str = "SlowDown", *, path_glob: str | None = None
    ) -> None:
        """Answer the next ``n`` matching requests with ``status`` and an S3 XML error ``code``."""
        self._queue(_Fault("fail", n, path_glob, status=status, code=code))

    def drop_next(self, n: int, *, path_glob: str | None = None) -> None:
        """Reset the connection of the next ``n`` matching requests without answering them.

        aiohttp (under s3fs) sends an idempotent request once more after a reset, below botocore's
        retries: ``drop_next(1)`` goes unseen by s3fs, ``drop_next(2)`` reaches it.
        """
        self._queue(_Fault("drop", n, path_glob))

    def stall_next(self, n: int, seconds: float, *, path_glob: str | None = None) -> None:
        """Hold the next ``n`` matching requests ``seconds`` before forwarding them (longer than a
        client's read timeout, the client gives up first)."""
        self._queue(_Fault("stall", n, path_glob, seconds=seconds))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def reset(self) -> None:
        """No faults, no latency, zero counts: the proxy as a test finds it."""
        self.clear_faults()
        self.latency = 0.0
        self.reset_counts()

    # -- counters ------------------------------------------------------------------------------

    @property
    def requests(self) -> RequestCounts:
        """Requests received since the last :meth:`reset_counts`, by kind (faulted ones too)."""
        with self._lock:
            return RequestCounts(**self._counts)

    @property
    def peak_in_flight(self) -> int:
        """The most requests the proxy held at once since the last :meth:`reset_counts`."""
        with self._lock:
            return self._peak_in_flight

    @property
    def injected(self) -> int:
        """Faults served (failed, dropped or stalled requests) since the last reset."""
        with self._lock:
            return self._injected

    def reset_counts(self) -> None:
        with self._lock:
            self._counts = dict.fromkeys(KINDS, 0)
            self._peak_in_flight = self._in_flight
            self._injected = 0

    # -- addresses and lifecycle ---------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        if self._server is None:
            raise RuntimeError("the FaultProxy is not running; use it as a context manager or start()")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def storage_options(self) -> dict[str, Any]:
        return storage_options_for(self.endpoint)

    def filesystem(self, *, attempts: int | None = None, **options: Any) -> Any:
        """A fresh ``s3fs.S3FileSystem`` through the proxy; arguments as :func:`filesystem_for`."""
        return filesystem_for(self.storage_options, attempts=attempts, **options)

    def start(self) -> FaultProxy:
        if self._server is not None:
            raise RuntimeError(f"this FaultProxy already listens at {self.endpoint}")
        self._closing.clear()
        server = _ProxyServer(("127.0.0.1", 0), _ProxyHandler)
        server.proxy = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="FaultProxy", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop listening, wake stalled requests and close every client connection."""
        if self._server is None:
            return
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            open_connections = list(self._connections)
        for connection in open_connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join()
        self._server = None
        self._thread = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    # -- used by the handler -------------------------------------------------------------------

    def _queue(self, fault: _Fault) -> None:
        if fault.remaining < 0:
            raise ValueError(f"n={fault.remaining} must be zero or more requests")
        with self._lock:
            self._faults.append(fault)

    def _arrive(self, kind: str, method: str, path: str) -> tuple[float, _Fault | None]:
        """Count a request in and take the fault it gets, if any."""
        with self._lock:
            self._counts[kind] += 1
            self._in_flight += 1
            self._peak_in_flight = max(self._peak_in_flight, self._in_flight)
            for fault in self._faults:
                if fault.remaining > 0 and fault.hits(method, path):
                    fault.remaining -= 1
                    self._injected += 1
                    self._faults = [f for f in self._faults if f.remaining > 0]
                    return self._latency, fault
            return self._latency, None

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _track(self, connection: socket.socket, opened: bool) -> None:
        with self._lock:
            if opened:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def _pause(self, seconds: float) -> None:
        """Sleep, but wake when the proxy closes."""
        if seconds > 0:
            self._closing.wait(seconds)


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = LISTEN_BACKLOG
    proxy: FaultProxy

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (a timeout, a reset it was sent) is not an error of the proxy."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _ProxyHandler(BaseHTTPRequestHandler):
    """One client connection: its requests in turn, over one upstream connection."""

    protocol_version = "HTTP/1.1"
    server: _ProxyServer

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.upstream: http.client.HTTPConnection | None = None
        self.server.proxy._track(self.connection, opened=True)

    def finish(self) -> None:
        self.server.proxy._track(self.connection, opened=False)
        if self.upstream is not None:
            self.upstream.close()
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read counters, not access logs."""

    def _forward(self) -> None:
        proxy = self.server.proxy
        kind = request_kind(self.command, self.path, self.headers)
        path = unquote(urlsplit(self.path).path.lstrip("/"))
        latency, fault = proxy._arrive(kind, self.command, path)
        try:
            body = self._read_body()
            proxy._pause(latency)
            if fault is not None and fault.action == "drop":
                self._reset_connection()
                return
            if fault is not None and fault.action == "fail":
                self._answer_error(fault.status, fault.code, "/" + path)
                return
            if fault is not None and fault.action == "stall":
                proxy._pause(fault.seconds)
            self._relay(body)
        finally:
            proxy._leave()

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_OPTIONS = do_PATCH = _forward

    def _read_body(self) -> bytes:
        """The request body as raw bytes (chunked framing kept, since the headers say chunked)."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raw = bytearray()
            while True:
                size_line = self.rfile.readline()
                raw += size_line
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while True:  # trailers up to the blank line
                        line = self.rfile.readline()
                        raw += line
                        if line in (b"\r\n", b"\n", b""):
                            return bytes(raw)
                raw += self.rfile.read(size + 2)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _reset_connection(self) -> None:
        """Close with SO_LINGER 0, so the client gets a TCP reset, not a clean end of stream."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    def _answer_error(self, status: int, code: str, resource: str) -> None:
        message = ERROR_MESSAGES.get(code, "Injected by the test FaultProxy.")
        request_id = f"faultproxy-{time.monotonic_ns()}"
        xml = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{message}</Message><Resource>{resource}</Resource>"
            f"<RequestId>{request_id}</RequestId></Error>"
        ).encode()
        reason = http.client.responses.get(status, "Error")
        head = (
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n"
            f"Content-Length: {len(xml)}\r\nx-amz-request-id: {request_id}\r\n\r\n"
        ).encode("latin-1")
        self.wfile.write(head if self.command == "HEAD" else head + xml)

    def _connect_upstream(self) -> http.client.HTTPConnection:
        host, port = self.server.proxy.upstream_address
        upstream = http.client.HTTPConnection(host, port, timeout=UPSTREAM_TIMEOUT_S)
        upstream.connect()
        if upstream.sock is not None:
            upstream.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return upstream

    def _send_upstream(self, body: bytes) -> http.client.HTTPResponse:
        """Send the request as received; once more on a fresh connection if the kept-alive one
        had been closed by the server (nothing was answered, so repeating it is safe)."""
        for attempt in range(2):
            if self.upstream is None:
                self.upstream = self._connect_upstream()
            try:
                self.upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for name, value in self.headers.items():
                    if name.lower() not in NOT_FORWARDED:
                        self.upstream.putheader(name, value)
                self.upstream.endheaders(body or None)
                return self.upstream.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.upstream.close()
                self.upstream = None
                if attempt == 1:
                    raise
        raise RuntimeError("unreachable: the loop returns or raises")

    def _relay(self, body: bytes) -> None:
        try:
            response = self._send_upstream(body)
        except OSError:
            # The server is down (a killed SeaweedFS, say): the client sees its connection reset.
            self._reset_connection()
            return
        head = f"HTTP/1.1 {response.status} {response.reason}\r\n"
        head += "".join(f"{name}: {value}\r\n" for name, value in response.getheaders()) + "\r\n"
        self.wfile.write(head.encode("latin-1"))
        if response.chunked:
            while piece := response.read1(COPY_CHUNK):
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        else:
            while piece := response.read(COPY_CHUNK):
                self.wfile.write(piece)
        if response.will_close:
            self.close_connection = True
            if self.upstream is not None:
                self.upstream.close()
                self.upstream = None
