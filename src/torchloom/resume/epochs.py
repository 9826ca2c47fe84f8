"""The epoch rules every resumable torchloom object keeps, in one place.

A sampler, a consumer stream and the thread Loader each hold an :class:`Epochs`: the epoch their
position is in, a ``set_epoch`` or a loaded checkpoint waiting for the next iteration, and the epoch
the last iteration read to its end. Its owner keeps the position itself (a sampler reads it from
its key iterator, a stream counts records, the Loader records each delivered batch) and asks
:class:`Epochs` what ``set_epoch``, a load and an iteration do to it:

1. ``set_epoch(e)`` starts epoch ``e``: the position is its start, and a state says so. That holds
   for the current epoch too once an iteration of it has begun: after a ``break``, or after the
   epoch was read to its end, ``set_epoch(e)`` reads ``e`` again from its start (as Lightning's
   validation loop relies on). Only a loaded position keeps itself against ``set_epoch`` of its own
   epoch, until the next iteration begins (a resumed epoch continues): :attr:`Epochs.resuming`.
2. Right after ``load_state_dict`` the position is the loaded one.
3. ``set_epoch`` and ``load_state_dict`` may come in either order before the next iteration
   (torchdata's ``StatefulDataLoader`` applies a loaded state lazily, when the next iterator starts):
   the later epoch wins; the loaded position when both are the same. The one that loses warns, at the
   user's line, saying what is read instead and how to resume what was meant. A position saved
   without its epoch (a Loader state of torchloom before epochs were recorded) belongs to the epoch
   set around the load.
4. A position at the end of its epoch resumes into the whole next epoch (samplers, the Loader), or
   into nothing more of it (``finished_moves_on=False``: one consumer of a stream, which cannot know
   that the others are done). A position with nothing left to read (that consumer; a rank with
   nothing to read) loses to a later ``set_epoch`` quietly: it costs nothing.
5. An iteration settles rule 3: once it has begun, ``set_epoch`` moves to any epoch and a load applies
   whatever epoch was asked for before. (A stream's reading process cannot tell a ``set_epoch`` made
   before its last iteration from a new one; see :mod:`torchloom.resume.streams`.)
6. An iteration read to its end finishes its epoch; a new iteration with no ``set_epoch`` or load
   between would read it again (:meth:`Epochs.repeats`). The owner decides what that means: a sampler
   warns (it repeats its order, as DistributedSampler does); the Loader with its own sampler moves on,
   as a shuffled DataLoader reshuffles.

An epoch loop one behind a loaded checkpoint (``for e in range(saved, n)`` after a checkpoint at the
end of epoch ``saved``) reads the next epoch for its first ``set_epoch`` (which loses, and says so),
and then that epoch again for its second: that ``set_epoch`` warns too, naming the repeat.

Example:
    >>> from torchloom.resume import Epochs
    >>> epochs = Epochs("Sampler")
    >>> epochs.set_epoch(1), epochs.epoch
    (True, 1)
    >>> epochs.admits(0)  # a checkpoint of epoch 0 loaded after set_epoch(1): the later epoch wins
    False
    >>> epochs.begin()  # an iteration settles it: now a checkpoint of epoch 0 applies
    >>> epochs.load(0, finished=True)  # the end of epoch 0: the whole of epoch 1 comes next
    1
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     epochs.set_epoch(0), epochs.epoch  # an earlier epoch after that load loses (and warns)
    (False, 1)
    >>> str(caught[0].message)[:78]
    'Sampler.set_epoch(0) after loading a checkpoint at the end of epoch 0: the lat'
"""

from __future__ import annotations

import warnings
from typing import Protocol, runtime_checkable

from torchloom._compat import user_stacklevel


@runtime_checkable
class SetsEpoch(Protocol):
    """Takes the epoch to read next: torchloom's samplers and streams, torch's DistributedSampler, a
    dataset whose samples change with the epoch.

    Example:
        >>> from torch.utils.data import DistributedSampler
        >>> from torchloom.resume import SetsEpoch
        >>> from torchloom.samplers import IndexSampler
        >>> isinstance(IndexSampler(8), SetsEpoch), isinstance(range(8), SetsEpoch)
        (True, False)
        >>> def start_epoch(parts: list[object], epoch: int) -> int:
        ...     started = [part for part in parts if isinstance(part, SetsEpoch)]
        ...     for part in started:
        ...         part.set_epoch(epoch)
        ...     return len(started)
        >>> start_epoch([IndexSampler(8), DistributedSampler(range(8), num_replicas=1, rank=0), range(3)], 2)
        2
    """

    def set_epoch(self, epoch: int) -> None: ...


@runtime_checkable
class HasEpoch(SetsEpoch, Protocol):
    """Takes the epoch to read next and says which one it is in (``epoch``), as DistributedSampler does.

    The attribute may hold something else than an int (None before a first ``set_epoch``): readers
    check its value, not only that it is there.

    Example:
        >>> from torch.utils.data import DistributedSampler
        >>> from torchloom.resume import HasEpoch
        >>> sampler = DistributedSampler(range(8), num_replicas=1, rank=0)
        >>> sampler.set_epoch(3)
        >>> isinstance(sampler, HasEpoch), sampler.epoch
        (True, 3)
    """

    epoch: int


def reported_epoch(holder: object) -> int | None:
    """The epoch ``holder`` says it is in, when it says one (an int ``epoch`` attribute), else None.

    Example:
        >>> from torch.utils.data import DistributedSampler
        >>> reported_epoch(DistributedSampler(range(4), num_replicas=1, rank=0)), reported_epoch(object())
        (0, None)
    """
    if not isinstance(holder, HasEpoch):
        return None
    epoch = holder.epoch
    return epoch if isinstance(epoch, int) else None


def loaded_epoch_wins(loaded: int, requested: int | None) -> bool:
    """Rule 3: whether a position loaded from a checkpoint resuming in epoch ``loaded`` applies against
    a ``set_epoch(requested)`` made before the next iteration, in either order (``None``: none made).

    Example:
        >>> loaded_epoch_wins(2, None), loaded_epoch_wins(2, 2), loaded_epoch_wins(2, 3)
        (True, True, False)
    """
    return requested is None or loaded >= requested


class Epochs:
    """The epoch of one resumable object and the rules that move it: ``set_epoch`` and a loaded
    checkpoint may come in either order before an iteration, and the later epoch wins; a position
    at the end of its epoch resumes into the next one (the rules in full:
    :mod:`torchloom.resume.epochs`'s notes).

    Args:
        owner: the owner's name, for the warnings of a ``set_epoch`` or a load that loses.
        finished_moves_on: a loaded position at the end of its epoch resumes into the next epoch
            (else it stays in its epoch, with nothing more to read).

    Attributes:
        epoch: the epoch the position is in (the epoch the next iteration reads).
        requested: the epoch ``set_epoch`` asked for since the last iteration began, else None.
        loaded: the epoch a checkpoint loaded since the last iteration began resumes in, else None.
        finished: the epoch the last iteration read to its end, until ``set_epoch`` or a load.

    Example:
        >>> from torchloom.resume import Epochs
        >>> epochs = Epochs("MySampler")
        >>> epochs.set_epoch(2), epochs.epoch
        (True, 2)
        >>> epochs.begin()  # the iteration of epoch 2 starts
        >>> epochs.load(2, finished=True)  # a checkpoint at the end of epoch 2: epoch 3 comes next
        3
    """

    def __init__(self, owner: str, *, finished_moves_on: bool = True) -> None:
        self.owner = owner
        self.finished_moves_on = finished_moves_on
        self.epoch = 0
        self.requested: int | None = None
        self.loaded: int | None = None
        self.finished: int | None = None
        self._checkpoint = ""  # the loaded position, in words, while it stands
        self._whole = False  # it resumes into a whole epoch (it was the end of the one before)
        self._left = True  # something is left to read from it (losing it then loses that)
        self._floating = False  # the loaded position has no epoch of its own: the next set_epoch's
        self._overruled: int | None = None  # the epoch that won against a set_epoch, until it is read

    @property
    def resuming(self) -> bool:
        """Whether a loaded position stands (nothing has moved it since the load, and no iteration
        has begun since)."""
        return self.loaded is not None

    def set_epoch(self, epoch: int) -> bool:
        """Apply ``set_epoch(epoch)`` (rules 1 and 3): True when ``epoch`` is now the epoch: its start,
        unless a loaded position of that epoch keeps itself (then :attr:`resuming` stays True); False
        when a loaded later epoch wins. Whichever loses warns."""
        if self.loaded is not None:
            if self._floating or epoch == self.epoch:
                self.requested = self.epoch = self.loaded = epoch
                self._floating = False
                return True
            if epoch < self.epoch:
                self._overruled = self.epoch
                warnings.warn(self._losing_set_epoch(epoch), stacklevel=user_stacklevel())
                return False
            if self._left:
                message = self._losing_load(self._checkpoint, self.epoch, epoch)
                warnings.warn(message, stacklevel=user_stacklevel())
            self.loaded = None
        if self._overruled == epoch and self.finished == epoch:
            warnings.warn(
                f"{self.owner}.set_epoch({epoch}): epoch {epoch} was read to its end already, after an "
                f"earlier set_epoch lost to the loaded checkpoint; it is read again now, from its start. "
                f"Your epoch loop is one epoch behind the checkpoint: start it at the epoch the "
                "checkpoint resumes in (the `epoch` right after load_state_dict).",
                stacklevel=user_stacklevel(),
            )
        self._overruled = None
        self.requested = self.epoch = epoch
        self.finished = None
        return True

    def follow(self, epoch: int) -> None:
        """Take ``epoch``, which was set elsewhere, as a request that nothing refuses, since it has
        happened: a Loader sees its sampler's own ``set_epoch`` (as Lightning calls it); a stream's
        DataLoader worker sees the main process's ``set_epoch`` when it begins to read."""
        self.requested = self.epoch = epoch
        self.finished = self.loaded = None
        self._floating = False

    def admits(self, epoch: int | None) -> bool:
        """Whether a position loaded from a checkpoint resuming in ``epoch`` applies (rule 3); one
        without an epoch of its own always does."""
        return epoch is None or loaded_epoch_wins(epoch, self.requested)

    def resumes_in(self, epoch: int, *, finished: bool) -> int:
        """The epoch a position of ``epoch`` resumes in: the next one after its end (rule 4)."""
        return epoch + 1 if finished and self.finished_moves_on else epoch

    def load(
        self,
        epoch: int | None,
        *,
        finished: bool,
        at_start: bool = False,
        left: bool = True,
        position: str = "",
    ) -> int | None:
        """Record a position loaded from a checkpoint of ``epoch`` (``finished``: at its end;
        ``at_start``: at its start, as the Loader records the end of the epoch before; None: a
        checkpoint that did not record its epoch) and return the epoch it resumes in, which is now the
        epoch (rule 4); or None when a ``set_epoch`` of a later epoch wins (rule 3). The position that
        loses, then or to a later ``set_epoch``, warns, unless nothing was ``left`` to read from it
        (an exhausted stream consumer, a rank with nothing to read). ``position`` says where in its
        epoch it is, for the warnings (``"3 batches in"``)."""
        if epoch is None:
            self._floating = self.requested is None
            self.epoch = self.loaded = self.epoch if self.requested is None else self.requested
            self._checkpoint, self._whole = "a checkpoint that did not record its epoch", False
        else:
            resume = self.resumes_in(epoch, finished=finished)
            if finished or at_start:
                checkpoint = f"a checkpoint at the {'end' if finished else 'start'} of epoch {epoch}"
            else:
                checkpoint = f"a checkpoint of epoch {epoch}" + (f" ({position})" if position else "")
            if not self.admits(resume):
                if left:
                    message = self._losing_load(checkpoint, resume, self.requested)
                    warnings.warn(message, stacklevel=user_stacklevel())
                return None
            self.epoch = self.loaded = resume
            self._checkpoint, self._whole = checkpoint, resume != epoch or at_start
            self._floating = False
        self._left = left
        self.finished = self._overruled = None
        return self.epoch

    def _losing_set_epoch(self, epoch: int) -> str:
        read = f"epoch {self.epoch} whole" if self._whole else f"the rest of epoch {self.epoch}"
        return (
            f"{self.owner}.set_epoch({epoch}) after loading {self._checkpoint}: the later epoch wins, so "
            f"the next iteration reads {read}, not epoch {epoch}, and a set_epoch({self.epoch}) after it "
            f"would read epoch {self.epoch} again. Start your epoch loop at epoch {self.epoch}, where "
            "the checkpoint resumes (the `epoch` right after load_state_dict), to silence this."
        )

    def _losing_load(self, checkpoint: str, resume: int, requested: int | None) -> str:
        return (
            f"{self.owner}: {checkpoint} was loaded but is not resumed: set_epoch({requested}) asks for "
            f"a later epoch, and the later epoch wins, so the next iteration reads epoch {requested} "
            f"whole, and nothing of epoch {resume} from the checkpoint on. To resume the checkpoint, "
            f"call set_epoch({resume}), the epoch it resumes in, instead."
        )

    def begin(self) -> None:
        """An iteration begins: a ``set_epoch`` or load before it no longer competes (rule 5)."""
        self.requested = self.loaded = None
        self._floating = False

    def finish(self, epoch: int) -> None:
        """The iteration of ``epoch`` was read to its end (rule 6)."""
        self.finished = epoch

    def repeats(self, epoch: int | None = None) -> bool:
        """Whether an iteration of ``epoch`` (default: the current one) would read a finished epoch
        again, with no ``set_epoch`` or load since (rule 6)."""
        return self.finished is not None and self.finished == (self.epoch if epoch is None else epoch)

    def __repr__(self) -> str:
        return (
            f"Epochs({self.owner}: epoch={self.epoch}, requested={self.requested}, loaded={self.loaded}, "
            f"finished={self.finished})"
        )
