"""The shared-memory copies of decoded caches on one node: who uses them, and making room for one more.

Every copy is a folder ``torchloom-cache-<content key>-<uid>`` in shared memory. A process using a
copy holds a shared ``flock`` on the folder itself for as long as it does; the kernel drops the
lock when the process exits, however it exits (``SIGKILL`` included), so a copy nobody holds a lock
on is unused, whoever made it. Copies are made, evicted and removed only under the node lock, an
exclusive ``flock`` on the shared-memory folder itself (no lock file to create or to leave
behind): under it, a ``.partial-`` folder is what a process killed while copying left, and a probe
that finds a copy unused cannot race with a process starting to use it.

Example:
    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> with node_lock(root):
    ...     copies = node_copies(root)
    >>> copies
    []
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows has no /dev/shm either
    fcntl = None  # type: ignore[assignment]

SHM_PREFIX = "torchloom-cache-"
PARTIAL_INFIX = ".partial-"


def copy_name(key: str) -> str:
    """The folder name of the copy of the cache whose content key is ``key``, for this user.

    Example:
        >>> copy_name("0123abcd").startswith("torchloom-cache-0123abcd-")
        True
    """
    return f"{SHM_PREFIX}{key}-{os.getuid()}"


@contextmanager
def node_lock(root: str) -> Iterator[None]:
    """Hold the exclusive lock of shared memory at ``root`` (every torchloom process on the node).

    Example:
        >>> import tempfile
        >>> with node_lock(tempfile.mkdtemp()):
        ...     pass  # copies made, evicted or removed here, one process at a time
    """
    descriptor = os.open(root, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        if fcntl is not None:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def hold_copy(folder: str) -> int:
    """Mark ``folder`` as used by this process until the returned descriptor is closed.

    Example:
        >>> import os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> held = hold_copy(folder)
        >>> in_use(folder)
        True
        >>> os.close(held)
        >>> in_use(folder)
        False
    """
    descriptor = os.open(folder, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    if fcntl is not None:
        fcntl.flock(descriptor, fcntl.LOCK_SH)
    return descriptor


def in_use(folder: str) -> bool:
    """Whether a process (this one included) holds ``folder``; call it under the node lock.

    Example:
        >>> import tempfile
        >>> in_use(tempfile.mkdtemp())
        False
    """
    try:
        descriptor = os.open(folder, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return True  # another user's, or gone: not ours to remove
    try:
        if fcntl is None:
            return True
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False
    finally:
        os.close(descriptor)


@dataclass(frozen=True)
class NodeCopy:
    """One complete copy in shared memory: its folder, bytes, last use (mtime, ns) and whether used.

    Example:
        >>> NodeCopy("/dev/shm/torchloom-cache-0a1b-1000", nbytes=4096, last_used_ns=0, used=False).nbytes
        4096
    """

    folder: str
    nbytes: int
    last_used_ns: int
    used: bool


def node_copies(root: str) -> list[NodeCopy]:
    """This user's complete copies at ``root``, least recently used first; removes what processes
    killed while copying left (``.partial-`` folders). Call it under the node lock."""
    own = f"-{os.getuid()}"
    copies = []
    for entry in os.scandir(root):
        if not entry.name.startswith(SHM_PREFIX) or not entry.is_dir(follow_symlinks=False):
            continue
        name, partial, _ = entry.name.partition(PARTIAL_INFIX)
        if not name.endswith(own) or name.count("-") != 3:
            continue  # another user's, or an older torchloom's per-process copy
        if partial:
            shutil.rmtree(entry.path, ignore_errors=True)
            continue
        try:
            stamp = entry.stat(follow_symlinks=False).st_mtime_ns
            nbytes = sum(item.stat().st_size for item in os.scandir(entry.path) if item.is_file())
        except OSError:
            continue
        copies.append(NodeCopy(entry.path, nbytes, stamp, in_use(entry.path)))
    return sorted(copies, key=lambda copy: copy.last_used_ns)


def evict(copies: list[NodeCopy], *, keep: str, budget: int | None, need: int, free: int) -> list[NodeCopy]:
    """Remove unused copies other than ``keep``, least recently used first: all of them when
    ``budget`` is ``None`` (nothing is kept), else until ``need`` more bytes fit in the budget and in
    the ``free`` bytes of shared memory. Returns the copies left.

    Example:
        >>> import tempfile
        >>> old, new = (NodeCopy(tempfile.mkdtemp(), 100, stamp, False) for stamp in (1, 2))
        >>> evict([old, new], keep="", budget=250, need=100, free=1000) == [new]
        True
    """
    total = sum(copy.nbytes for copy in copies)
    freed = 0
    left = []
    for copy in copies:
        fits = budget is not None and total - freed + need <= budget and need <= free + freed
        if copy.used or copy.folder == keep or fits:
            left.append(copy)
            continue
        shutil.rmtree(copy.folder, ignore_errors=True)
        freed += copy.nbytes
    return left


def remove_if_unused(folder: str) -> bool:
    """Remove ``folder`` when no process holds it (under the node lock); whether it was removed.

    Example:
        >>> import os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> remove_if_unused(folder), os.path.exists(folder)
        (True, False)
    """
    if in_use(folder):
        return False
    shutil.rmtree(folder, ignore_errors=True)
    return True


def remove_legacy_orphans(root: str, namespace: int) -> None:
    """Remove per-process copies (``torchloom-cache-<id>-<pid namespace>-<pid>-<hex>``, as made
    before copies were shared) whose creator in this pid namespace no longer runs.

    Example:
        >>> import tempfile
        >>> remove_legacy_orphans(tempfile.mkdtemp(), namespace=1)  # nothing there to remove
    """
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
