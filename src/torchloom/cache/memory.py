"""``location="memory"``: one copy of a cache's files in ``/dev/shm`` that every process on the node maps.

The copy is named by the cache's content key (the settings, the inputs' fingerprint and the
images' checksums) and the user, never by a process: every local rank of a job, and every other job
on the node opening a cache of the same content, maps the same files, so the pages are in memory
once and counted once in PSS, divided among the processes. The first process copies them (into a
``.partial-`` folder renamed onto the copy's name when complete) while the others wait on the node
lock; a process killed while copying leaves a partial folder, which the next one removes before it
copies again. DataLoader workers (forked or spawned) map the same files.

Lifetime: each process using a copy holds a shared ``flock`` on it (see
:mod:`torchloom.cache.node_copies`), dropped when its :class:`SharedCopy` is closed or
garbage-collected, or the process exits, however (``SIGKILL`` included). With no ``budget``, the
last process to close a copy removes it, and copies nobody uses (what killed jobs left) are removed
the next time a copy is opened. With a ``budget`` (bytes), unused copies are kept for the next job
(the next run of a sweep maps them without copying), the least recently used evicted first when a
copy needs room; copies in use are never evicted.

Example:
    >>> format_bytes(3 * 2**30), format_bytes(1536)
    ('3.0 GiB', '1.5 KiB')
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
import weakref
from collections.abc import Sequence

from torchloom.cache.node_copies import (
    PARTIAL_INFIX,
    copy_name,
    evict,
    hold_copy,
    node_copies,
    node_lock,
    remove_if_unused,
    remove_legacy_orphans,
)
from torchloom.errors import CacheSpaceError

SHM_ROOT = "/dev/shm"
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
    """The node's copy in shared memory of a cache folder's files, made by the first process to ask.

    Args:
        source: the cache folder on disk.
        files: the names of the files to copy.
        key: the cache's content key (the copy's name).
        budget: the most bytes this user's copies may take in shared memory together (unused ones
            are kept up to it); ``None``: nothing is kept once unused.
        root: where shared memory is mounted (default ``SHM_ROOT``).

    Attributes:
        folder: the copy's folder.
        made: whether this process made the copy (``False``: it maps another process's).

    Example:
        >>> import os, tempfile
        >>> source, shm = tempfile.mkdtemp(), tempfile.mkdtemp()
        >>> _ = open(os.path.join(source, "images.npy"), "wb").write(bytes(64))
        >>> first = SharedCopy(source, ["images.npy"], "0a1b2c", root=shm)
        >>> second = SharedCopy(source, ["images.npy"], "0a1b2c", root=shm)
        >>> first.made, second.made, first.folder == second.folder
        (True, False, True)
        >>> first.close(); second.close(); os.listdir(shm)  # the last to close removed it
        []
    """

    def __init__(
        self,
        source: str,
        files: Sequence[str],
        key: str,
        *,
        budget: int | None = None,
        root: str | None = None,
    ) -> None:
        root = root or SHM_ROOT
        if not os.path.isdir(root):
            raise CacheSpaceError(
                f"location='memory' needs shared memory mounted at {root!r}, which this system lacks; "
                "use location='disk' (workers still share its pages through the page cache)"
            )
        self.folder = os.path.join(root, copy_name(key))
        self.nbytes = sum(os.path.getsize(os.path.join(source, name)) for name in files)
        self.made = False
        with node_lock(root):
            namespace = _pid_namespace()
            if namespace is not None:
                remove_legacy_orphans(root, namespace)
            exists = _complete(self.folder, files)
            need = 0 if exists else self.nbytes
            spare = max(SPARE_BYTES, int(need * SPARE_FRACTION)) if need else 0
            free = shutil.disk_usage(root).free
            copies = node_copies(root)
            kept = evict(copies, keep=self.folder, budget=budget, need=need, free=free - spare)
            if not exists:
                freed = sum(copy.nbytes for copy in copies) - sum(copy.nbytes for copy in kept)
                held = sum(copy.nbytes for copy in kept)
                self._check_room(source, root, budget, held, free + freed, spare)
                self._copy(source, files, root)
                self.made = True
            descriptor = hold_copy(self.folder)
            os.utime(self.folder)  # the last use, which eviction goes by
        self._finalizer = weakref.finalize(
            self, _release, root, self.folder, descriptor, os.getpid(), budget is None
        )

    def _check_room(
        self, source: str, root: str, budget: int | None, held: int, free: int, spare: int
    ) -> None:
        """Refuse a copy over the budget (``held``: bytes of the copies kept) or the free space."""
        if budget is not None and held + self.nbytes > budget:
            raise CacheSpaceError(
                f"location='memory' needs {format_bytes(self.nbytes)} in {root} for cache {source!r}, "
                f"but this user's copies in use there already hold {format_bytes(held)} of the "
                f"memory_budget of {format_bytes(budget)}; raise memory_budget, close caches other "
                "jobs keep open, or use location='disk'"
            )
        if self.nbytes + spare > free:
            raise CacheSpaceError(
                f"location='memory' needs {format_bytes(self.nbytes)} in {root} for cache {source!r} (plus "
                f"{format_bytes(spare)} kept spare), but only {format_bytes(free)} is free; use "
                "location='disk' (workers still share its pages through the page cache), a smaller "
                "max_side, or more shared memory (e.g. docker run --shm-size)"
            )

    def _copy(self, source: str, files: Sequence[str], root: str) -> None:
        """Copy into a partial folder, renamed onto the copy's name once complete."""
        shutil.rmtree(self.folder, ignore_errors=True)  # files removed by hand: copied again
        partial = tempfile.mkdtemp(prefix=os.path.basename(self.folder) + PARTIAL_INFIX, dir=root)
        try:
            for file in files:
                shutil.copyfile(os.path.join(source, file), os.path.join(partial, file))
            os.rename(partial, self.folder)
        except OSError as exc:
            shutil.rmtree(partial, ignore_errors=True)
            if exc.errno != errno.ENOSPC:
                raise
            # Something other than torchloom (or another user) filled it since the check above.
            raise CacheSpaceError(
                f"shared memory in {root} filled up while cache {source!r} ({format_bytes(self.nbytes)}) "
                "was copied there; free some, or use location='disk' (its pages are shared through "
                "the page cache)"
            ) from exc
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise

    def close(self) -> None:
        """Stop using the copy (processes that mapped it keep reading their mapping); without a
        budget, the last process to close it removes it."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran."""
        return not self._finalizer.alive


def _release(root: str, folder: str, descriptor: int, owner_pid: int, remove: bool) -> None:
    if os.getpid() != owner_pid:  # a forked worker inherits the finalizer but does not own the hold
        return
    with contextlib.ExitStack() as stack:
        with contextlib.suppress(OSError):  # shared memory unmounted: release the hold anyway
            stack.enter_context(node_lock(root))
        os.close(descriptor)
        with contextlib.suppress(OSError):  # the copy removed by hand: nothing left to stamp
            if not (remove and remove_if_unused(folder)):
                os.utime(folder)


def _complete(folder: str, files: Sequence[str]) -> bool:
    """Whether ``folder`` holds every file in ``files`` (a copy is renamed into place complete; its
    ``meta.json`` may differ in size from another build's of the same content: its id and date)."""
    return all(os.path.isfile(os.path.join(folder, name)) for name in files)


def _pid_namespace() -> int | None:
    """The inode of this process's pid namespace: pids are only comparable within one."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
