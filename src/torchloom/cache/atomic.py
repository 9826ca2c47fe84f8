"""Building a cache folder atomically, one builder at a time.

A cache is written into a temporary folder beside its target and renamed onto it when complete,
so a reader never sees half a cache and a crash leaves at most a ``.building-*`` folder behind.
Builders (and readers, while they check and map a cache) hold ``<cache>.lock`` through
``flock``: exclusive to build, shared to read. A second builder that waited for the lock finds the
first one's cache and uses it instead of building again. Processes that already mapped an older
cache keep reading it: a replaced file lives on while it is mapped.

Example:
    >>> import os, tempfile
    >>> target = os.path.join(tempfile.mkdtemp(), "cache")
    >>> with cache_lock(target, exclusive=True):
    ...     staging = new_staging_folder(target)
    ...     _ = open(os.path.join(staging, "meta.json"), "w").write("{}")
    ...     replace_folder(staging, target)
    >>> os.listdir(target)
    ['meta.json']
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from torchloom.cache.storage import fsync_path
from torchloom.errors import CacheError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: builders are not serialised
    fcntl = None  # type: ignore[assignment]

LOCK_SUFFIX = ".lock"
STAGING_INFIX = ".building-"
# Errors meaning the lock file cannot be made here (a read-only cache): readers go on unlocked.
_NO_LOCK_FILE = (errno.EROFS, errno.EACCES, errno.EPERM)


@contextmanager
def cache_lock(target: str, *, exclusive: bool) -> Iterator[None]:
    """Hold ``<target>.lock``: exclusively to build, shared to check and map the cache."""
    if fcntl is None:
        yield
        return
    parent = os.path.dirname(target) or "."
    try:
        os.makedirs(parent, exist_ok=True)
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        descriptor = os.open(target + LOCK_SUFFIX, flags, 0o666)
    except OSError as exc:
        if exclusive or exc.errno not in _NO_LOCK_FILE:
            raise _unwritable(parent, exc) from exc
        yield  # a cache on a read-only file system cannot be rebuilt under the reader either
        return
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def new_staging_folder(target: str) -> str:
    """A fresh temporary folder beside ``target`` (same file system, so the rename is atomic).

    Its name carries this host and process (``<cache>.building-<host>@<pid>-*``; a host name has
    no ``@``): folders that builds on this host left behind when they were killed before they
    finished (up to a whole cache's size each) are removed first, once their process is gone.
    """
    parent = os.path.dirname(target) or "."
    own = f"{os.path.basename(target)}{STAGING_INFIX}{socket.gethostname()}@"
    for name in os.listdir(parent):
        pid = name[len(own) :].split("-", 1)[0]
        if name.startswith(own) and pid.isdigit() and not _running(pid):
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
    try:
        return tempfile.mkdtemp(prefix=f"{own}{os.getpid()}-", dir=parent)
    except OSError as exc:
        raise _unwritable(parent, exc) from exc


def _unwritable(parent: str, exc: OSError) -> CacheError:
    return CacheError(
        f"cannot write in {parent!r} to build the cache there ({exc.strerror or exc}); pass a cache "
        "path on a disk you can write to"
    )


def _running(pid: str) -> bool:
    """Whether process ``pid`` (a number, as written in a staging folder's name) runs on this host."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (OSError, ValueError):  # alive under another user, or not a name this module wrote
        return True
    return True


def replace_folder(staging: str, target: str) -> None:
    """Move the complete ``staging`` folder onto ``target``, replacing the old cache there.

    The old folder is renamed aside first (a folder cannot be renamed onto a non-empty one), then
    removed; the caller holds the exclusive lock, so readers never look in between.
    """
    fsync_path(staging)
    old = None
    if os.path.lexists(target):
        old = f"{target}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        os.rename(target, old)
    os.rename(staging, target)
    fsync_path(os.path.dirname(target) or ".")
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
