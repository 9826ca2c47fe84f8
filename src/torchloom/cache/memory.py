"""``location="memory"``: a copy of a cache's files in ``/dev/shm`` that every worker maps.

The copy is made by the process that opens the cache, after checking that shared memory has room
for it, under a name holding the cache's build id, the process's pid namespace and pid. DataLoader
workers (forked or spawned) map the same files, so the pages are in memory once, counted once in
PSS. Lifetime: the creating process removes the copy when its :class:`SharedCopy` is closed or
garbage-collected, or at interpreter exit; workers never remove it. A copy left by a process that
was killed (``SIGKILL`` runs no clean-up) is removed the next time a copy is made in the same pid
namespace, once its process is gone.

Example:
    >>> format_bytes(3 * 2**30), format_bytes(1536)
    ('3.0 GiB', '1.5 KiB')
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
import weakref
from collections.abc import Sequence

from torchloom.errors import CacheSpaceError

SHM_ROOT = "/dev/shm"
SHM_PREFIX = "torchloom-cache-"
#: Shared memory left free beyond the copy: at least this many bytes, or this share of the copy.
SPARE_BYTES = 64 << 20
SPARE_FRACTION = 0.05


def format_bytes(count: float) -> str:
    """A byte count for people: ``"3.0 GiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.1f} {unit}" if unit != "B" else f"{int(count)} B"
        count /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


class SharedCopy:
    """The files of a cache folder copied into shared memory; removed by the process that made it.

    Args:
        source: the cache folder on disk.
        files: the names of the files to copy (``meta.json`` last, so a copy with it is complete).
        build_id: the cache's build id (part of the copy's name).
        root: where shared memory is mounted (default ``SHM_ROOT``).
    """

    def __init__(self, source: str, files: Sequence[str], build_id: str, *, root: str | None = None) -> None:
        root = root or SHM_ROOT
        if not os.path.isdir(root):
            raise CacheSpaceError(
                f"location='memory' needs shared memory mounted at {root!r}, which this system lacks; "
                "use location='disk' (workers still share its pages through the page cache)"
            )
        need = sum(os.path.getsize(os.path.join(source, name)) for name in files)
        spare = max(SPARE_BYTES, int(need * SPARE_FRACTION))
        free = shutil.disk_usage(root).free
        if need + spare > free:
            raise CacheSpaceError(
                f"location='memory' needs {format_bytes(need)} in {root} for cache {source!r} (plus "
                f"{format_bytes(spare)} kept spare), but only {format_bytes(free)} is free; use "
                "location='disk' (workers still share its pages through the page cache), a smaller "
                "max_side, or more shared memory (e.g. docker run --shm-size)"
            )
        namespace = _pid_namespace()
        if namespace is not None:
            _remove_orphans(root, namespace)
        name = f"{SHM_PREFIX}{build_id[:12]}-{namespace or 0}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.folder = os.path.join(root, name)
        self.nbytes = need
        os.mkdir(self.folder, 0o700)
        self._finalizer = weakref.finalize(self, _remove, self.folder, os.getpid())
        try:
            for file in files:
                shutil.copyfile(os.path.join(source, file), os.path.join(self.folder, file))
        except OSError as exc:
            self._finalizer()
            if exc.errno != errno.ENOSPC:
                raise
            # Another process (a DDP rank on this node) filled it since the check above.
            raise CacheSpaceError(
                f"shared memory in {root} filled up while cache {source!r} ({format_bytes(need)}) was "
                "copied there (another process opening a cache in memory at the same time?); each "
                "process opening a cache with location='memory' makes its own copy: open it in one "
                "process per node, or use location='disk' (its pages are shared through the page cache)"
            ) from exc
        except BaseException:
            self._finalizer()
            raise

    def close(self) -> None:
        """Remove the copy now (processes that mapped it keep reading their mapping)."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive


def _remove(folder: str, owner_pid: int) -> None:
    if os.getpid() == owner_pid:  # a forked worker inherits the finalizer but does not own the copy
        shutil.rmtree(folder, ignore_errors=True)


def _pid_namespace() -> int | None:
    """The inode of this process's pid namespace: pids are only comparable within one."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def _remove_orphans(root: str, namespace: int) -> None:
    """Remove copies whose creator (in this pid namespace) no longer runs."""
    for entry in os.scandir(root):
        parts = entry.name[len(SHM_PREFIX) :].split("-")
        if not entry.name.startswith(SHM_PREFIX) or len(parts) != 4 or parts[1] != str(namespace):
            continue
        try:
            os.kill(int(parts[2]), 0)
        except ProcessLookupError:
            shutil.rmtree(entry.path, ignore_errors=True)
        except (OSError, ValueError):  # alive under another user, or not our name
            continue
