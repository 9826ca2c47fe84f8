"""The epoch rules every resumable torchloom object keeps, in one place.

A sampler, a consumer stream and the thread Loader each hold an :class:`Epochs`: the epoch their
position is in, a ``set_epoch`` or a loaded checkpoint waiting for the next iteration, and the epoch
the last iteration read to its end. Its owner keeps the position itself (a sampler reads it from
its key iterator, a stream counts records, the Loader records each delivered batch) and asks
:class:`Epochs` what ``set_epoch``, a load and an iteration do to it:

1. ``set_epoch(e)`` starts epoch ``e``: the position is its start, and a state says so. The current
   epoch again keeps the position (a resumed epoch continues).
2. Right after ``load_state_dict`` the position is the loaded one.
3. ``set_epoch`` and ``load_state_dict`` may come in either order before the next iteration
   (torchdata's ``StatefulDataLoader`` applies a loaded state lazily, when the next iterator starts):
   the later epoch wins; the loaded position when both are the same. A ``set_epoch`` that loses warns.
4. A position at the end of its epoch resumes into the whole next epoch (samplers, the Loader), or
   into nothing more of it (``finished_moves_on=False``: one consumer of a stream, which cannot know
   that the others are done).
5. An iteration settles rule 3: once it has begun, ``set_epoch`` moves to any epoch and a load applies
   whatever epoch was asked for before.
6. An iteration read to its end finishes its epoch; a new iteration with no ``set_epoch`` or load
   between would read it again (:meth:`Epochs.repeats`). The owner decides what that means: a sampler
   warns (it repeats its order, as DistributedSampler does); the Loader with its own sampler moves on,
   as a shuffled DataLoader reshuffles.

Example:
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
    >>> str(caught[0].message)[:62]
    'Sampler.set_epoch(0) after loading a checkpoint of epoch 1: th'
"""

from __future__ import annotations

import warnings
from typing import Protocol, runtime_checkable


@runtime_checkable
class SetsEpoch(Protocol):
    """Takes the epoch to read next: torchloom's samplers and streams, torch's DistributedSampler, a
    dataset whose samples change with the epoch."""

    def set_epoch(self, epoch: int) -> None: ...


@runtime_checkable
class HasEpoch(SetsEpoch, Protocol):
    """Takes the epoch to read next and says which one it is in (``epoch``), as DistributedSampler does."""

    epoch: int


def loaded_epoch_wins(loaded: int, requested: int | None) -> bool:
    """Rule 3: whether a position loaded from a checkpoint of epoch ``loaded`` applies against a
    ``set_epoch(requested)`` made before the next iteration, in either order (``None``: none made).

    Example:
        >>> loaded_epoch_wins(2, None), loaded_epoch_wins(2, 2), loaded_epoch_wins(2, 3)
        (True, True, False)
    """
    return requested is None or loaded >= requested


class Epochs:
    """The epoch of one resumable object and the rules that move it (see the module docstring).

    Args:
        owner: the owner's name, for the warning of a ``set_epoch`` that loses to a loaded epoch.
        finished_moves_on: a loaded position at the end of its epoch resumes into the next epoch
            (else it stays in its epoch, with nothing more to read).

    Attributes:
        epoch: the epoch the position is in (the epoch the next iteration reads).
        requested: the epoch ``set_epoch`` asked for since the last iteration began, else None.
        loaded: the epoch a checkpoint loaded since the last iteration began resumes in, else None.
        finished: the epoch the last iteration read to its end, until ``set_epoch`` or a load.
    """

    def __init__(self, owner: str, *, finished_moves_on: bool = True) -> None:
        self.owner = owner
        self.finished_moves_on = finished_moves_on
        self.epoch = 0
        self.requested: int | None = None
        self.loaded: int | None = None
        self.finished: int | None = None

    def set_epoch(self, epoch: int) -> bool:
        """Apply ``set_epoch(epoch)`` (rules 1 and 3): True when ``epoch`` is now the epoch (its start
        when it is another one); False when a loaded later epoch wins, with a warning."""
        if self.loaded is not None and epoch < self.epoch:
            warnings.warn(
                f"{self.owner}.set_epoch({epoch}) after loading a checkpoint of epoch {self.epoch}: the "
                f"later epoch wins, so epoch {self.epoch} continues. Start your epoch loop at the "
                "checkpoint's epoch to silence this.",
                stacklevel=3,
            )
            return False
        self.requested = self.epoch = epoch
        self.finished = None
        return True

    def follow(self, epoch: int) -> None:
        """Take ``epoch``, which was set elsewhere, as a request that nothing refuses, since it has
        happened: a Loader sees its sampler's own ``set_epoch`` (as Lightning calls it) or
        ``load_state_dict``; a stream's DataLoader worker sees the main process's ``set_epoch`` when
        it begins to read."""
        self.requested = self.epoch = epoch
        self.finished = None

    def admits(self, epoch: int) -> bool:
        """Whether a position loaded from a checkpoint of ``epoch`` applies (rule 3)."""
        return loaded_epoch_wins(epoch, self.requested)

    def load(self, epoch: int, *, finished: bool) -> int:
        """Record a position loaded from a checkpoint of ``epoch`` (``finished``: at its end); returns
        the epoch it resumes in, which is now the epoch: the next one, whole, for a finished epoch
        that moves on (rule 4)."""
        self.epoch = self.loaded = epoch + 1 if finished and self.finished_moves_on else epoch
        self.finished = None
        return self.epoch

    def begin(self) -> None:
        """An iteration begins: a ``set_epoch`` or load before it no longer competes (rule 5)."""
        self.requested = self.loaded = None

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
