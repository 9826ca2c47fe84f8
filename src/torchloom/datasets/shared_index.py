"""One rank indexes, every rank gets the index: listing and validation once per job, not per rank.

Under DDP every rank constructs the same dataset. Listing a bucket and validating its objects on
each of them costs W times the requests (and W progress bars) for the same answer, so when the
default process group is initialized with more than one rank, rank 0 builds the index (lists,
validates, fills the report) and broadcasts it with ``torch.distributed.broadcast_object_list``;
the other ranks make no listing or validation request and wait in the broadcast meanwhile.

It happens by itself for a root or manifest given as a URL; ``share_index=True`` does it for
local files too (every rank must then see the same paths: one node, or a shared filesystem),
``share_index=False`` lets every rank index for itself. Sharing is a collective call: every rank
must construct the dataset, in the same order, as with ``DistributedSampler``; a rank that does
not leaves the others waiting up to the process group's ``timeout``, which also bounds how long
rank 0 may take to index (10 minutes by default with NCCL, 30 with gloo). With NCCL the broadcast
goes through ``torch.cuda.current_device()``: call ``torch.cuda.set_device(local_rank)`` first,
as DDP needs anyway.

An error on rank 0 (a missing manifest, ``strict=True`` refusing files, an empty dataset) is
broadcast instead of the index and raised on every rank with its type and message, so no rank
waits on an index that will never come.
"""

from __future__ import annotations

import io
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch.distributed as dist

from torchloom.errors import DistributedSetupError
from torchloom.io.files import is_url
from torchloom.io.objects import ObjectStore

T = TypeVar("T")

#: The rank that indexes for every rank.
INDEXING_RANK = 0


def shares_index(share_index: bool | None, *sources: object) -> bool:
    """Whether this process takes its index from rank 0: a process group of two or more ranks is
    initialized, and ``share_index`` is True, or None and one of ``sources`` (roots, manifests;
    anything but a path or URL is left out) is a URL.

    Example:
        >>> shares_index(None, "s3://bucket/train")  # no process group here
        False
    """
    if share_index is False or not dist.is_available() or not dist.is_initialized():
        return False
    if dist.get_world_size() < 2:
        return False
    return share_index or any(
        isinstance(source, (str, os.PathLike)) and is_url(os.fspath(source)) for source in sources
    )


def built_once(build: Callable[[], T], *, share: bool, what: str, store: ObjectStore | None = None) -> T:
    """``build()``, run here when ``share`` is False, else on rank 0 only and broadcast to every
    rank of the default process group (which must all call this, in the same order).

    An exception ``build`` raises on rank 0 is raised on every rank: the same type and message,
    with a note saying it came from rank 0 (on rank 0, the original error and its traceback).

    Args:
        build: makes the index; its result must pickle.
        share: whether to share (see :func:`shares_index`).
        what: the dataset, as errors name it (``"FolderDataset 's3://b/train'"``), with what
            tells it from another: a rank whose ``what`` is not rank 0's raises instead of taking
            another dataset's index.
        store: this rank's :class:`~torchloom.io.ObjectStore`: the index travels without rank 0's
            store (its options and credentials may not pickle, and stay on rank 0), and reads
            on this rank through this one.

    Example:
        >>> built_once(lambda: ["a.jpg", "b.jpg"], share=False, what="a dataset")
        ['a.jpg', 'b.jpg']
    """
    if not share:
        return build()
    if dist.get_rank() == INDEXING_RANK:
        try:
            result = build()
            payload: bytes | _Failure = _packed(result)
        except Exception as error:
            dist.broadcast_object_list([(what, _Failure.of(error))], src=INDEXING_RANK)
            raise
        dist.broadcast_object_list([(what, payload)], src=INDEXING_RANK)
        return result
    box: list[tuple[str, bytes | _Failure] | None] = [None]
    dist.broadcast_object_list(box, src=INDEXING_RANK)
    sent = box[0]
    if not isinstance(sent, tuple) or len(sent) != 2:
        raise DistributedSetupError(
            f"{what}: rank {INDEXING_RANK} broadcast {type(sent).__name__}, not an index; "
            "every rank must construct the same datasets in the same order"
        )
    their_what, received = sent
    if their_what != what:
        raise DistributedSetupError(
            f"this rank built {what} while rank {INDEXING_RANK} built {their_what}: every rank must "
            "construct the same datasets, with the same arguments, in the same order (or pass "
            "share_index=False to index on each rank)"
        )
    if isinstance(received, _Failure):
        raise received.error(what)
    built: T = _Unpacker(io.BytesIO(received), store or ObjectStore()).load()
    return built


_STORE = "torchloom.ObjectStore"


def _packed(result: object) -> bytes:
    """``result`` pickled with every :class:`~torchloom.io.ObjectStore` in it left out."""
    buffer = io.BytesIO()
    _Packer(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(result)
    return buffer.getvalue()


class _Packer(pickle.Pickler):
    def persistent_id(self, obj: object) -> str | None:
        return _STORE if isinstance(obj, ObjectStore) else None


class _Unpacker(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, store: ObjectStore) -> None:
        super().__init__(file)
        self.store = store

    def persistent_load(self, pid: object) -> object:
        if pid != _STORE:
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        return self.store


@dataclass(frozen=True)
class _Failure:
    """What rank 0 raised, as it travels: the exception pickled when it survives the round trip,
    else its type's name and message."""

    pickled: bytes | None
    kind: str
    message: str

    @classmethod
    def of(cls, error: Exception) -> _Failure:
        pickled: bytes | None = None
        try:
            pickle.loads(packed := pickle.dumps(error, protocol=pickle.HIGHEST_PROTOCOL))
            pickled = packed
        except Exception:  # an exception of the user's own that does not survive pickling
            pass
        return cls(pickled, f"{type(error).__module__}.{type(error).__qualname__}", str(error))

    def error(self, what: str) -> Exception:
        """The exception to raise on this rank."""
        try:
            error = None if self.pickled is None else pickle.loads(self.pickled)
        except Exception:  # its type does not import on this rank
            error = None
        if isinstance(error, Exception):
            error.add_note(f"(raised on rank {INDEXING_RANK}, which indexed {what} for every rank)")
            return error
        why = f"{self.kind}: {self.message}"
        return DistributedSetupError(f"rank {INDEXING_RANK} failed to index {what}: {why}")
