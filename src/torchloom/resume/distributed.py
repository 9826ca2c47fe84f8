"""Who is reading: rank, world size, DataLoader worker, and how work is split between consumers.

The one low module that samplers, streams and fusion all use. Rank and world size resolve when
asked (at the start of an iteration), not when an object is built: a sampler made in a Lightning
DataModule's ``__init__``, before the process group exists, still splits correctly once it does.

Example:
    >>> resolve_rank_world(None, None)
    (0, 1)
    >>> Consumer(rank=1, world_size=2, worker=0, num_workers=3).index
    3
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch.distributed as dist
from torch.utils.data import get_worker_info

from torchloom._compat import accelerate_shard_processes
from torchloom.errors import ConfigError

# Frames looked at above a sampler's first step to find a wrapper that splits batches across ranks.
_WRAPPER_SEARCH_DEPTH = 8


def resolve_rank_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """``rank`` and ``world_size`` as given; else torch.distributed's when it is initialised now; else
    the ``RANK`` and ``WORLD_SIZE`` environment variables that torchrun sets; else 0 of 1."""
    if rank is None or world_size is None:
        found_rank, found_world = _ambient_rank_world()
        rank = found_rank if rank is None else rank
        world_size = found_world if world_size is None else world_size
    if world_size < 1 or not 0 <= rank < world_size:
        raise ConfigError(
            f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}; pass both or neither "
            "(neither: taken from torch.distributed when iteration starts)"
        )
    return rank, world_size


def _ambient_rank_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return environment_rank_world() or (0, 1)


def environment_rank_world() -> tuple[int, int] | None:
    """``(RANK, WORLD_SIZE)`` from the environment (torchrun, Accelerate), if both are set."""
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is None or world is None:
        return None
    try:
        return int(rank), int(world)
    except ValueError:
        message = f"environment variables RANK={rank!r}, WORLD_SIZE={world!r} are not integers"
        raise ConfigError(message) from None


def in_worker() -> bool:
    """True inside a DataLoader worker process."""
    return get_worker_info() is not None


@dataclass(frozen=True)
class Consumer:
    """One reader of a stream: a (rank, DataLoader worker) pair, numbered rank-major."""

    rank: int
    world_size: int
    worker: int
    num_workers: int

    @property
    def index(self) -> int:
        return self.rank * self.num_workers + self.worker

    @property
    def count(self) -> int:
        return self.world_size * self.num_workers

    def describe(self) -> str:
        return (
            f"consumer {self.index} of {self.count} (rank {self.rank} of {self.world_size} × "
            f"worker {self.worker} of {self.num_workers})"
        )


def current_consumer(rank: int, world_size: int) -> Consumer:
    """The consumer this DataLoader worker (or the main process) is, on the given rank."""
    info = get_worker_info()
    num_workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
    return Consumer(rank, world_size, worker, num_workers)


def assignment(items: int, consumers: int, consumer: int) -> list[tuple[int, int, int]]:
    """The (item, group size, position in group) a consumer reads.

    With at least as many items (shards, recordings) as consumers, consumer ``c`` reads items
    ``c, c + n, ...`` whole. With fewer, every item is read by a group of consumers, each taking
    every ``group size``-th record from its position, so no record is read twice.

    Example:
        >>> assignment(5, 2, 1), assignment(2, 5, 3)
        ([(1, 1, 0), (3, 1, 0)], [(1, 2, 1)])
    """
    if items >= consumers:
        return [(item, 1, 0) for item in range(consumer, items, consumers)]
    item = consumer % items
    group = len(range(item, consumers, items))
    return [(item, group, consumer // items)]


def outer_batch_splitter() -> int | None:
    """The number of processes of a wrapper above the caller that splits batches across ranks, if any.

    Hugging Face Accelerate's ``accelerator.prepare(loader)`` wraps the loader's batch sampler in a
    ``BatchSamplerShard`` that gives each process every ``num_processes``-th batch of what the
    sampler yields. A torchloom sampler that also split by rank would be split twice (each rank
    training on half its share). Accelerate offers no setting to turn its split off, nor a public
    way to see it, so the sampler asks here, at its first step, and yields the global order when
    such a wrapper is found. (A sampler built with ``rank=0, world_size=1`` yields the global order
    whatever is found.) Called from inside a sampler's iterator; looks a few frames up.
    """
    return accelerate_shard_processes(frames=_WRAPPER_SEARCH_DEPTH + 1)  # + 1: this function's frame
