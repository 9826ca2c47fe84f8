"""How :func:`~torchloom.resume.check_resume` reaches a loader's epochs, state and sample ids.

A loader with ``state_dict`` / ``load_state_dict`` of its own (torchloom's
:class:`~torchloom.Loader`, torchdata's ``StatefulDataLoader``) is checkpointed through them. A
plain ``DataLoader`` is checkpointed through its torchloom sampler (``sampler=`` or a
:class:`~torchloom.samplers.BatchKeySampler` as ``batch_sampler=``), as its users do: the sampler
runs ahead of the batches delivered (workers prefetch), so the state's ``yielded`` is set to the
samples actually delivered. ``set_epoch`` goes to the loader when it has one, else to its batch
sampler, sampler and dataset, each that has one.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from torchloom.errors import UsageError
from torchloom.resume.state import Stateful

#: A function of one batch returning the ids of its samples, in order.
SampleIds = Callable[[Any], Sequence[Any]]

KEY_YIELDED = "yielded"
INDEX_FIELD = "index"


def batch_index(batch: Any) -> Sequence[Any]:
    """The ``"index"`` field of a batch: every torchloom dataset puts it in each sample.

    Example:
        >>> import torch
        >>> batch_index({"index": torch.tensor([4, 7])})
        tensor([4, 7])
    """
    if not isinstance(batch, Mapping) or INDEX_FIELD not in batch:
        found = sorted(map(str, batch)) if isinstance(batch, Mapping) else type(batch).__name__
        raise UsageError(
            f"check_resume reads each sample's id from the batch's 'index' field, but the batch has "
            f"none (it is {found}); pass sample_id=, a function of a batch returning its samples' ids"
        )
    ids: Sequence[Any] = batch[INDEX_FIELD]
    return ids


def hashable_ids(ids: Any) -> list[Hashable]:
    """``ids`` (a tensor, an array or a sequence) as a list of hashable values, one per sample.

    Example:
        >>> import torch
        >>> hashable_ids(torch.tensor([[0, 1], [2, 3]]))
        [(0, 1), (2, 3)]
    """
    if isinstance(ids, (torch.Tensor, np.ndarray)):
        ids = ids.tolist()
    return [_hashable(value) for value in ids]


def _hashable(value: Any) -> Hashable:
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(item) for item in value)
    if isinstance(value, (torch.Tensor, np.ndarray, np.generic)):
        return _hashable(value.tolist())
    if not isinstance(value, Hashable):
        raise UsageError(f"a sample id must be hashable (a number, a string, a tuple), got {value!r}")
    return value


class CheckedLoader:
    """One rank's loader, seen by the harness: epochs, batches as sample ids, a checkpoint.

    Example:
        >>> from torchloom import Loader, TableDataset
        >>> import pyarrow as pa
        >>> loader = Loader(TableDataset(pa.table({"x": [5, 6, 7]})), batch_size=2)
        >>> checked = CheckedLoader(loader, lambda batch: batch["x"])
        >>> checked.set_epoch(0)
        >>> [ids for ids in checked.batches()]
        [[5, 6], [7]]
    """

    def __init__(self, loader: Iterable[Any], sample_id: SampleIds) -> None:
        self.loader = loader
        self._sample_id = sample_id
        self._sampler: Stateful | None = None
        if not isinstance(loader, Stateful):
            self._sampler = _sampler_state_of(loader)
        self._base = 0
        self._delivered = 0

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` as a training loop does before reading it."""
        setter = getattr(self.loader, "set_epoch", None)
        if callable(setter):
            setter(epoch)
            return
        seen: set[int] = set()
        for part in (getattr(self.loader, name, None) for name in ("batch_sampler", "sampler", "dataset")):
            setter = getattr(part, "set_epoch", None)
            if callable(setter) and id(part) not in seen:
                seen.add(id(part))
                setter(epoch)
        self._restart_count()

    def _restart_count(self) -> None:
        """Count delivered samples from the sampler's position now (a start, or a loaded one)."""
        if self._sampler is not None:
            self._base = int(self._sampler.state_dict()[KEY_YIELDED])
            self._delivered = 0

    def batches(self) -> Iterator[list[Hashable]]:
        """A new pass over the loader: each batch's sample ids."""
        self._restart_count()
        for batch in self.loader:
            ids = hashable_ids(self._sample_id(batch))
            self._delivered += len(ids)
            yield ids

    def state(self) -> dict[str, Any]:
        """The checkpoint of what was delivered."""
        if self._sampler is None:
            return self.loader.state_dict()  # type: ignore[attr-defined]
        state = self._sampler.state_dict()
        state[KEY_YIELDED] = self._base + self._delivered
        return state

    def load(self, state: dict[str, Any]) -> None:
        """Resume from ``state``."""
        target = self._sampler if self._sampler is not None else self.loader
        target.load_state_dict(state)  # type: ignore[union-attr]
        self._restart_count()

    @property
    def padded(self) -> int:
        """Samples the sampler repeats this epoch so that every rank has the same length (0 if unknown)."""
        sampler = getattr(self.loader, "sampler", None)
        sampler = getattr(getattr(self.loader, "batch_sampler", None), "sampler", sampler)
        count = getattr(sampler, "padded", 0)
        return count if isinstance(count, int) else 0

    def close(self) -> None:
        """Stop what the loader still runs (the Loader's threads)."""
        close = getattr(self.loader, "close", None)
        if callable(close):
            close()


def _sampler_state_of(loader: Iterable[Any]) -> Stateful:
    for name in ("batch_sampler", "sampler"):
        part = getattr(loader, name, None)
        if isinstance(part, Stateful) and KEY_YIELDED in part.state_dict():
            return part
    raise UsageError(
        f"check_resume cannot checkpoint a {type(loader).__name__}: it has no state_dict, nor a "
        "torchloom sampler to save; use torchdata's StatefulDataLoader or torchloom.Loader, or give "
        "the DataLoader a torchloom sampler (sampler= or batch_sampler=BatchKeySampler(...))"
    )
