"""How many threads torchloom starts when it is not told: one rule for file work, one for batches.

Both count the cores this process may run on (its CPU affinity, as ``taskset``, a container's
cpuset or a job scheduler sets it), not the machine's: a job given 4 cores of a 64-core node
starts 4 threads, not 64.

- **File work** (checking files while a dataset indexes them, building a decoded cache and taking
  its inputs' fingerprint, ``doctor`` examining and ``prepare`` hashing files, writing synthetic
  images): :func:`file_threads`, one thread per usable core, at most :data:`MAX_FILE_THREADS`.
  Decoding and hashing hold a core each; on local storage more threads than cores gained nothing
  (measured on 2 cores, 1,200 JPEGs: header checks and the cache build took the same time with 2
  and 8 threads, doctor's examination 27% longer with 8) and would hold one more decoded image each.
- **Batches**: the thread :class:`~torchloom.Loader` builds whole batches beside the training step,
  which needs cores too: :func:`batch_threads`, one per usable core, at most
  :data:`MAX_BATCH_THREADS`.

``num_threads=`` (``--threads`` on the command line) overrides either, e.g. more threads than
cores for files on network storage, where each read waits on the network.

Example:
    >>> 1 <= batch_threads() <= file_threads() <= usable_cores() or usable_cores() > MAX_FILE_THREADS
    True
"""

from __future__ import annotations

import os

from torchloom.errors import ConfigError

#: The most threads file work starts by default.
MAX_FILE_THREADS = 32
#: The most threads the thread Loader starts by default.
MAX_BATCH_THREADS = 8


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def file_threads(num_threads: int | None = None) -> int:
    """Threads for file work: ``num_threads`` when given (an int of at least 1: 0 would mean none,
    not the default, so it is refused), else one per usable core, at most :data:`MAX_FILE_THREADS`.

    Example:
        >>> file_threads(3)
        3
        >>> try:
        ...     file_threads(0)
        ... except ConfigError as error:
        ...     print(error)
        num_threads must be an integer >= 1 or None (one thread per usable core), got 0
    """
    if num_threads is None:
        return min(usable_cores(), MAX_FILE_THREADS)
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
        raise ConfigError(
            f"num_threads must be an integer >= 1 or None (one thread per usable core), got {num_threads!r}"
        )
    return num_threads


def batch_threads() -> int:
    """Threads of the thread Loader when ``num_threads`` is not given: one per usable core, at most
    :data:`MAX_BATCH_THREADS`."""
    return min(usable_cores(), MAX_BATCH_THREADS)
