"""Where a :class:`~torchloom.Loader` is in its sampler's epochs, for every kind of sampler.

:class:`SamplerPosition` applies the epoch rules of :mod:`torchloom.resume.epochs` to the Loader's
position: what ``set_epoch``, ``load_state_dict``, the sampler's own ``set_epoch`` (Lightning calls
``loader.sampler.set_epoch``) and each pass do to it. Who holds the position depends on the sampler:

- torchloom's samplers (:class:`~torchloom.resume.state.Resumable`) hold it and apply the same rules
  to it themselves: ``set_epoch`` and the sampler's part of a state are passed on to the sampler, and
  the sampler's state is recorded with each batch as its keys are drawn.
- A sampler with a state of its own from elsewhere (torchdata's ``StatefulDistributedSampler``): the
  Loader applies the rules, and hands the sampler its saved state only when the pass that resumes it
  begins, so that a ``set_epoch`` of a later epoch can still win (the sampler cannot be told to drop a
  state it was given). At the start of an epoch (the end of the one before included) nothing is
  recorded for the sampler: such a sampler has no state meaning "the start of epoch e", and its
  state after an epoch's end would resume into nothing. What the Loader cannot do for it: check the
  settings inside that state (the sampler's ``load_state_dict`` does or does not), or re-split it for
  another world size.
- A sampler without a state (``DistributedSampler``, ``SequentialSampler``, a user's): the Loader
  applies the rules and skips the batches already delivered, which is exact when the sampler gives
  the same order for the same epoch. A sampler drawing a new order every pass (``RandomSampler``,
  :class:`~torchloom.samplers.contract.RandomOrder`) is replayed from its ``torch.Generator``
  (:mod:`torchloom.loader.replay`): the sampler's part of a position is the generator's state as
  the pass began (at an epoch's end, its state then), and a resume restores it before skipping.
  One whose generator is out of reach (``RandomSampler(generator=None)``) cannot be resumed inside
  an epoch: ``load_state_dict`` refuses such a position (typed error with the fix) and the first
  ``state_dict`` that writes one warns.

The state: ``sampler``, the sampler's own state (``{}`` where there is none); ``batches``, the batches
of ``epoch`` delivered before the position; ``epoch``, the epoch the position is in, which the next
iteration reads (after an epoch's last batch, the next epoch, 0 batches in); and, for samplers
torchloom does not hold the position of, ``settings``: what the position must match (``samples``,
the sampler's length; ``world_size``, ``seed`` and ``shuffle`` where the sampler has them;
``batch_size`` when batches are skipped). A mismatch is a :class:`StateMismatchError` naming the
field. States of version 1 (an epoch's end written as that epoch's last position; no ``settings``) and
states without ``epoch`` load as they meant.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable
from typing import Any

from torch.utils.data import Dataset, Sampler

from torchloom._compat import user_stacklevel
from torchloom.errors import StateMismatchError
from torchloom.loader.iteration import PassStart, Position
from torchloom.loader.replay import GeneratorReplay
from torchloom.resume.epochs import Epochs, SetsEpoch, reported_epoch
from torchloom.resume.state import Resumable, Stateful
from torchloom.samplers.contract import RandomOrder, SeededShuffle, SplitSampler

KEY_SAMPLER = "sampler"
KEY_BATCHES = "batches"
KEY_EPOCH = "epoch"
KEY_SETTINGS = "settings"
SETTING_WORLD = "world_size"

_REPLAYING_SAMPLERS = (
    "give the sampler a generator of its own (generator=torch.Generator().manual_seed(seed)), or use "
    "torchloom.IndexSampler(len(dataset), shuffle=True, seed=...) or Loader(shuffle=True, seed=...)"
)


def order_settings(sampler: Sampler[Any], *, batch_size: int | None) -> dict[str, int | bool]:
    """What a position in ``sampler``'s order must match to resume by count: its length, its world
    size and shuffle settings where it has them (as torch's DistributedSampler does), and
    ``batch_size`` when batches are skipped.

    Example:
        >>> from torch.utils.data import DistributedSampler
        >>> order_settings(DistributedSampler(range(10), num_replicas=2, rank=0, seed=3), batch_size=4)
        {'samples': 5, 'batch_size': 4, 'world_size': 2, 'seed': 3, 'shuffle': True}
    """
    settings: dict[str, int | bool] = {"samples": len(sampler)}  # type: ignore[arg-type]
    if batch_size is not None:
        settings["batch_size"] = batch_size
    found: dict[str, object] = {}
    if isinstance(sampler, SplitSampler):
        found[SETTING_WORLD] = sampler.num_replicas
    if isinstance(sampler, SeededShuffle):
        found.update(seed=sampler.seed, shuffle=sampler.shuffle)
    settings.update((key, value) for key, value in found.items() if isinstance(value, int))
    return settings


class SamplerPosition:
    """The position of a Loader in its sampler's epochs (the rules: :mod:`torchloom.loader.position`).

    Args:
        sampler: the Loader's sampler.
        dataset: the Loader's dataset; told the epoch each pass reads when it takes one (``set_epoch``).
        owner: the Loader's name, for warnings and errors.
        batch_size: the Loader's batch size (batches are skipped in whole batches).
        owns_sampler: the Loader made the sampler: a new iteration after a finished epoch starts the
            next one, as ``DataLoader(shuffle=True)`` reshuffles.
        epoch_batches: the Loader's batches per epoch, now (to read version 1 states).
    """

    def __init__(
        self,
        sampler: Sampler[Any],
        dataset: Dataset[Any],
        *,
        owner: str,
        batch_size: int,
        owns_sampler: bool,
        epoch_batches: Callable[[], int],
    ) -> None:
        self.sampler = sampler
        self._owner = owner
        self._batch_size = batch_size
        self._owns_sampler = owns_sampler
        self._epoch_batches = epoch_batches
        # What the sampler and the dataset offer, resolved once.
        self._keeper = sampler if isinstance(sampler, Resumable) else None
        self._foreign = sampler if self._keeper is None and isinstance(sampler, Stateful) else None
        self._counted = self._keeper is None and self._foreign is None  # resumed by skipping batches
        random = self._counted and isinstance(sampler, RandomOrder)
        # A random order is replayed from its generator where that is reachable, else refused.
        self._replay = GeneratorReplay.of(sampler) if random else None
        self._random = random and self._replay is None
        self._takes_epochs = sampler if isinstance(sampler, SetsEpoch) else None
        self._dataset = dataset if isinstance(dataset, SetsEpoch) else None
        # The rules of this Loader's position (torchloom's samplers apply the same to their own).
        self._epochs = Epochs(owner)
        self._delivered: Position | None = None  # after the last delivered batch, or a loaded position
        self._loaded: Position | None = None  # a loaded position the next pass resumes, while it stands
        self._dataset_epoch: int | None = None
        # A torchloom sampler's state as this Loader last saw it: another one means that the sampler's
        # own set_epoch or load moved it (Lightning calls loader.sampler.set_epoch).
        self._seen: dict[str, Any] | None = None
        self._pass_settings: dict[str, int | bool] = {}  # the settings, as the current pass began
        self._warned_random = False

    # --- epochs ------------------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The epoch of the position (the next iteration reads it)."""
        self._follow_sampler()
        return int(self._delivered[KEY_EPOCH]) if self._delivered is not None else self._epochs.epoch

    def set_epoch(self, epoch: int) -> None:
        """``set_epoch`` of the Loader: the rules decide; the dataset is told the epoch that is read."""
        self._follow_sampler()
        if self._keeper is not None:
            if self._takes_epochs is not None:
                self._takes_epochs.set_epoch(epoch)  # the sampler applies the rules (and warns)
            self._follow_sampler()
            self._epochs.follow(self._keeper_epoch())  # nothing is finished after a set_epoch
        elif self._epochs.set_epoch(epoch):
            if not self._epochs.resuming:
                self._moved()
            elif self._loaded is not None and self._loaded[KEY_EPOCH] != self._epochs.epoch:
                # A position saved without its epoch belongs to the epoch set around the load.
                self._delivered = self._loaded = {**self._loaded, KEY_EPOCH: self._epochs.epoch}
            if self._takes_epochs is not None:
                self._takes_epochs.set_epoch(self._epochs.epoch)
        self._tell_dataset(self._epochs.epoch, always=True)

    def _keeper_epoch(self) -> int:
        epoch = reported_epoch(self._keeper)
        return self._epochs.epoch if epoch is None else epoch

    def _follow_sampler(self) -> None:
        """Take the sampler's position when it moved since this Loader last looked: the start of the
        epoch its own ``set_epoch`` asked for (Lightning calls ``loader.sampler.set_epoch``). A
        torchloom sampler says so in its state, also for the epoch it is in; another sampler only by
        a change of its ``epoch`` (``set_epoch`` of the epoch it is in cannot be seen)."""
        if self._keeper is not None:
            state = self._keeper.state_dict()
            if state != self._seen:
                self._seen = state
                self._epochs.follow(self._keeper_epoch())
                self._moved()
            return
        epoch = reported_epoch(self.sampler)
        if epoch is not None and epoch != self._epochs.epoch:
            self._epochs.follow(epoch)
            self._moved()

    def _moved(self) -> None:
        """The position left what was delivered or loaded: it is the start of the current epoch."""
        self._delivered = self._loaded = None

    def _tell_dataset(self, epoch: int, *, always: bool = False) -> None:
        if self._dataset is not None and (always or epoch != self._dataset_epoch):
            self._dataset.set_epoch(epoch)
            self._dataset_epoch = epoch

    # --- passes ------------------------------------------------------------------------------------

    def begin(self) -> PassStart:
        """A pass begins: the epoch it reads, where in it, and the sampler's keys from there."""
        self._follow_sampler()
        if self._epochs.repeats():
            self._read_again()
        epoch, loaded = self._epochs.epoch, self._loaded
        batches = 0 if loaded is None else int(loaded[KEY_BATCHES])
        if self._foreign is not None and loaded is not None and loaded[KEY_SAMPLER]:
            self._foreign.load_state_dict(loaded[KEY_SAMPLER])
        if self._replay is not None:
            if loaded is not None and loaded[KEY_SAMPLER]:
                self._replay.restore(loaded[KEY_SAMPLER], owner=self._owner)
            self._replay.mark()  # before iter: torchdata's RandomSampler draws its order there
        keys = iter(self.sampler)
        self._seen = self._sampler_state() if self._keeper is not None else None
        if self._counted and batches:
            keys = itertools.islice(keys, batches * self._batch_size, None)  # fast-forward
        self._epochs.begin()
        self._tell_dataset(epoch)
        if self._keeper is None:
            self._pass_settings = self._settings()  # once a pass: the positions of its batches carry them
        self._delivered = loaded if loaded is not None else self._start_of(epoch)
        self._loaded = None
        return PassStart(keys=keys, batches=batches, epoch=epoch)

    def _read_again(self) -> None:
        """A new pass after one read to its end, with no ``set_epoch`` or load since (rule 6)."""
        epoch = self._epochs.epoch
        if self._owns_sampler:
            self.set_epoch(epoch + 1)  # as DataLoader(shuffle=True) reshuffles every iteration
            return
        if self._takes_epochs is None and reported_epoch(self.sampler) is None:
            epoch += 1  # a sampler without epochs: each pass is the next epoch of this Loader's count
        self._epochs.follow(epoch)  # else the sampler reads its epoch again (torchloom's warn)
        self._moved()

    def position(self, batches: int, epoch: int) -> Position:
        """The position after ``batches`` batches of ``epoch``, drawn now."""
        return self._record(self._sampler_state(), batches, epoch, self._pass_settings)

    def end_of_epoch(self, batches: int, epoch: int) -> Position:
        """The position after the whole of ``epoch``: the start of the next (a torchloom sampler's own
        state once it is drawn to its end, a short last batch dropped included, resumes there)."""
        return self._record(self._state_at_start(), 0, epoch + 1, self._pass_settings)

    def deliver(self, position: Position, *, finished: bool) -> None:
        """The position after the batch just delivered (``finished``: the epoch's last)."""
        self._delivered = position
        if finished:
            self._epochs.finish(self._epochs.epoch)

    def _start_of(self, epoch: int) -> Position:
        return self._record(self._state_at_start(), 0, epoch)

    def _state_at_start(self) -> dict[str, Any]:
        """The sampler's state at the start of an epoch: a torchloom sampler's own, a replayed one's
        generator now (the next pass draws from it); none for others (see the module docstring)."""
        if self._replay is not None:
            return self._replay.state(now=True)
        return self._sampler_state() if self._keeper is not None else {}

    def _sampler_state(self) -> dict[str, Any]:
        """The sampler's state now (``{}`` for a sampler without one); a torchloom sampler's is what
        this Loader has seen of it."""
        if self._keeper is not None:
            self._seen = self._keeper.state_dict()
            return self._seen
        if self._replay is not None:
            return self._replay.state()
        return {} if self._foreign is None else self._foreign.state_dict()

    def _record(
        self, sampler_state: dict[str, Any], batches: int, epoch: int, settings: dict[str, Any] | None = None
    ) -> Position:
        position: Position = {KEY_SAMPLER: sampler_state, KEY_BATCHES: batches, KEY_EPOCH: epoch}
        if self._keeper is None:
            position[KEY_SETTINGS] = dict(self._settings() if settings is None else settings)
        return position

    def _settings(self) -> dict[str, int | bool]:
        return order_settings(self.sampler, batch_size=self._batch_size if self._counted else None)

    # --- state -------------------------------------------------------------------------------------

    def state(self) -> Position:
        """The position after the last batch delivered (the loaded one right after a load)."""
        self._follow_sampler()
        state = dict(self._delivered) if self._delivered is not None else self._start_of(self._epochs.epoch)
        if self._random and state[KEY_BATCHES] and not self._warned_random:
            self._warned_random = True
            warnings.warn(
                f"{self._owner}.state_dict(): {type(self.sampler).__name__} draws a new order every pass, "
                f"so this position, {state[KEY_BATCHES]} batches into epoch {state[KEY_EPOCH]}, cannot be "
                f"resumed (load_state_dict refuses it; a checkpoint at an epoch's end loads). For exact "
                f"resume, {_REPLAYING_SAMPLERS}.",
                stacklevel=user_stacklevel(),
            )
        return state

    def upgrade(self, state: dict[str, Any], version: int) -> dict[str, Any]:
        """A version 1 state at an epoch's end (its batch count at the epoch's length; a sampler state
        from elsewhere then drawn to its end) as the start of the next epoch."""
        if version >= 2 or self._keeper is not None or KEY_BATCHES not in state:
            return state
        if 0 < self._epoch_batches() <= int(state[KEY_BATCHES]):
            epoch = state.get(KEY_EPOCH)
            following = None if epoch is None else int(epoch) + 1
            state = {**state, KEY_SAMPLER: {}, KEY_BATCHES: 0, KEY_EPOCH: following}
        return state

    def load(self, state: dict[str, Any]) -> None:
        """Resume from a Loader state (the rules decide whether it applies, and warn when it does not)."""
        self._follow_sampler()
        if self._keeper is not None:
            self._load_into_keeper(self._keeper, state)
            return
        saved = state[KEY_SAMPLER]
        if saved and self._replay is not None:
            self._replay.check(saved, owner=self._owner)
        elif saved and self._foreign is None:
            raise StateMismatchError(
                f"{self._owner}.load_state_dict: the checkpoint holds a sampler state of its own "
                f"({saved.get('kind', 'from elsewhere')}), but this Loader's {type(self.sampler).__name__} "
                "has none; build the Loader with the sampler the checkpoint was written with"
            )
        self._check_settings(state.get(KEY_SETTINGS, {}))
        epoch = None if state.get(KEY_EPOCH) is None else int(state[KEY_EPOCH])
        batches = int(state[KEY_BATCHES])
        unreplayable = self._random or (self._replay is not None and not saved)
        if unreplayable and batches and self._epochs.admits(epoch):
            raise StateMismatchError(
                f"{self._owner}.load_state_dict: the checkpoint is {batches} batches into epoch {epoch}, but "
                f"{type(self.sampler).__name__} draws a new order every pass and the checkpoint holds no "
                f"generator state to draw it again, so skipping {batches} batches would repeat some samples "
                f"and never deliver others. To resume exactly, {_REPLAYING_SAMPLERS} "
                "(a checkpoint at an epoch's end loads with any sampler)"
            )
        where = f"{batches} batches in"
        left = batches < self._epoch_batches()
        resumed = self._epochs.load(epoch, finished=False, at_start=not batches, left=left, position=where)
        if resumed is None:
            return  # set_epoch asked for a later epoch before this load: the later epoch wins
        self._delivered = self._loaded = {
            KEY_SAMPLER: dict(saved) if self._foreign is not None or self._replay is not None else {},
            KEY_BATCHES: batches,
            KEY_EPOCH: resumed,
            KEY_SETTINGS: self._settings(),
        }
        if self._takes_epochs is not None:
            self._takes_epochs.set_epoch(resumed)
        self._tell_dataset(resumed, always=True)

    def _load_into_keeper(self, keeper: Resumable, state: dict[str, Any]) -> None:
        if not state[KEY_SAMPLER]:
            raise StateMismatchError(
                f"{self._owner}.load_state_dict: the checkpoint was written with a sampler without a state "
                f"of its own, but this Loader's {type(keeper).__name__} resumes from its own state; "
                "build the Loader with the sampler the checkpoint was written with"
            )
        keeper.load_state_dict(state[KEY_SAMPLER])  # it applies the rules (and warns when it loses)
        self._follow_sampler()
        epoch = self._epochs.epoch
        saved_epoch = state.get(KEY_EPOCH)
        # The saved batch count holds where the sampler resumed the saved epoch (not after its end).
        batches = int(state[KEY_BATCHES]) if saved_epoch is not None and int(saved_epoch) == epoch else 0
        self._delivered = self._loaded = self._record(self._sampler_state(), batches, epoch)
        self._tell_dataset(epoch, always=True)

    def _check_settings(self, saved: dict[str, Any]) -> None:
        settings = self._settings()
        world = settings.get(SETTING_WORLD)
        if SETTING_WORLD in saved and world is not None and saved[SETTING_WORLD] != world:
            raise StateMismatchError(
                f"checkpoint field '{KEY_SETTINGS}.{SETTING_WORLD}' is {saved[SETTING_WORLD]!r} but this "
                f"Loader's {type(self.sampler).__name__} has num_replicas={world}: a sampler that is not "
                "torchloom's resumes from what this rank delivered (a count), which is exact only on the "
                f"same world size. Resume on {saved[SETTING_WORLD]} ranks, or use torchloom's "
                "samplers (IndexSampler(shuffle=True), BalancedSampler, ...), which re-split the rest of "
                "an epoch exactly for another world size"
            )
        for key, value in settings.items():
            if key in saved and saved[key] != value:
                raise StateMismatchError(
                    f"checkpoint field '{KEY_SETTINGS}.{key}' is {saved[key]!r} but this Loader's sampler "
                    f"has {key}={value!r}; build the Loader and its sampler as they were when the "
                    "checkpoint was written"
                )
