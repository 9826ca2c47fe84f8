"""check_resume: prove that a pipeline resumes exactly, on the pipeline itself, before a long run.

The harness builds the user's loaders through ``make_loader(rank, world_size, num_workers)``, one
per rank, in this process (ranks read in lockstep, a batch each per step, as under DDP). It reads
an uninterrupted reference run, a ledger of sample ids per epoch and rank; reads it again taking a
checkpoint at every stop (which must not change what is delivered); then, for every stop and
every setting (world size × ``num_workers``), builds fresh loaders, loads the checkpoint, and reads
to the end of the run as a training loop does (``load_state_dict``, then ``set_epoch`` of the epoch
the stop resumes in and of every later one). A stop after an epoch's last batch resumes into the
next epoch. Each resumed run, with what the checkpointing run delivered before its stop, must be
every epoch of the reference exactly once (see :mod:`torchloom.resume.check_report`).

The reference runs let every error through (a bug in the pipeline shows there as it would in
training). An error while resuming (a state the loader refuses for another setting, such as a
``StatefulDataLoader`` checkpoint of ``num_workers=0`` loaded with workers) fails that case, named
with its stop and setting, and the other cases still run.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from torchloom.errors import ConfigError
from torchloom.resume.check_access import CheckedLoader, SampleIds, batch_index
from torchloom.resume.check_report import (
    Mismatch,
    ResumeCase,
    ResumeReport,
    compare_all_ranks,
    compare_rank,
)
from torchloom.resume.check_stops import Stop, describe, plan_stops

#: ``make_loader(rank, world_size, num_workers)`` returns one rank's loader, freshly built.
MakeLoader = Callable[[int, int, int], Iterable[Any]]


@dataclass
class Pass:
    """What one pass over the loaders of a setting delivered: ids per epoch and rank, the checkpoints
    taken (with the samples each rank had delivered in the epoch by then), the steps each epoch took,
    the padding the samplers reported per epoch."""

    world_size: int
    first_epoch: int = 0
    ledger: dict[int, list[list[Hashable]]] = field(default_factory=dict)
    states: dict[Stop, list[dict[str, Any]]] = field(default_factory=dict)
    steps: dict[int, int] = field(default_factory=dict)
    padded: dict[int, int] = field(default_factory=dict)
    delivered_at: dict[Stop, list[int]] = field(default_factory=dict)

    def checkpoint(self, stop: Stop, loaders: list[CheckedLoader], delivered: list[list[Hashable]]) -> None:
        """Take every rank's state at ``stop``, with how many samples each had delivered in its epoch."""
        # A copy, as torch.save would write it: a live state's nested dicts may change as reading goes on.
        self.states[stop] = [copy.deepcopy(loader.state()) for loader in loaders]
        self.delivered_at[stop] = [len(ids) for ids in delivered]


@dataclass(frozen=True)
class _Setting:
    """How the resumed runs of a case are built and compared."""

    make_loader: MakeLoader
    ids: SampleIds
    world_size: int
    workers: int
    ordered: bool


def check_resume(
    make_loader: MakeLoader,
    *,
    epochs: int = 2,
    world_sizes: Sequence[int] = (1,),
    num_workers: Sequence[int] = (0,),
    stops: Sequence[int] = (),
    random_stops: int = 2,
    seed: int = 0,
    sample_id: SampleIds | None = None,
    ordered: bool = True,
) -> ResumeReport:
    """Interrupt and resume a pipeline at every seam and report whether each epoch came out exactly once.

    Stops: before and after the first batch, mid-epoch, before and after the last batch and at the
    end of epoch 0; ``stops`` (steps counted from the start of the run, over all epochs) and
    ``random_stops`` steps drawn from ``seed``; and two chains from mid-epoch: a checkpoint taken
    right after a load, and a resume of a resume. Every stop is resumed with every setting in
    ``world_sizes`` × ``num_workers``; the first of each is the reference's.

    Args:
        make_loader: ``make_loader(rank, world_size, num_workers)`` builds one rank's loader: a
            :class:`~torchloom.Loader`, a torchdata ``StatefulDataLoader``, or a ``DataLoader`` with a
            torchloom sampler. Pass ``rank`` and ``world_size`` on to the samplers or streams (they
            are not read from ``torch.distributed`` here) and ``num_workers`` to the loader (a
            Loader's threads, for instance). Build the same pipeline as your training script.
        epochs: epochs of the reference run (2 shows that the epoch after a resumed one is whole).
        world_sizes: ranks to resume with (a sampler's elastic resume re-splits the rest).
        num_workers: worker settings to resume with.
        stops: further steps to stop at, counted over the whole run (0 to its total steps).
        random_stops: further steps drawn at random from ``seed``.
        seed: seeds the random stops.
        sample_id: a function of a batch returning its samples' ids (default: the batch's
            ``"index"`` field, which every torchloom dataset puts in each sample).
        ordered: with the reference's world size, each rank must deliver its samples in the
            reference's order (``False``: each exactly once, in any order; DataLoader workers of a
            stream may resume their round-robin at another worker).

    Returns:
        a :class:`ResumeReport`, ``ok`` when every case delivered every epoch as the reference.

    Example:
        >>> import pyarrow as pa
        >>> from torchloom import IndexSampler, Loader, TableDataset, check_resume
        >>> data = TableDataset(pa.table({"x": list(range(40))}))
        >>> def make_loader(rank, world_size, num_workers):
        ...     sampler = IndexSampler(len(data), seed=1, rank=rank, world_size=world_size)
        ...     return Loader(data, batch_size=4, sampler=sampler, num_threads=num_workers + 1)
        >>> report = check_resume(make_loader, world_sizes=(1, 2), sample_id=lambda batch: batch["x"])
        >>> report.ok, len(report.cases)
        (True, 21)
    """
    _validate(make_loader, epochs, world_sizes, num_workers, stops, random_stops, sample_id)
    ids = sample_id or batch_index
    world, workers = world_sizes[0], num_workers[0]
    reference = _run(make_loader, ids, world, workers, range(epochs))
    if not reference.steps[0]:
        raise ConfigError(
            "check_resume: the reference run delivered no batch in epoch 0; make_loader must build a "
            "loader with data"
        )
    plan = plan_stops(reference.steps, epochs, stops, random_stops, seed)
    steps = reference.steps[0]
    chains = (
        (Stop(0, steps // 2), 0, "checkpointed again right after the load"),
        (Stop(0, steps // 4), max(1, (steps - steps // 4) // 2), "a resume of a resume"),
    )
    save = {stop for stop, _ in plan} | {stop for stop, _, _ in chains}
    checkpointed = _run(make_loader, ids, world, workers, range(epochs), save=save)
    cases = [
        ResumeCase(
            "uninterrupted, a checkpoint taken at every stop",
            world,
            workers,
            _compare(reference, [checkpointed], epochs, ordered),
        )
    ]
    for world_size, workers_now in itertools.product(world_sizes, num_workers):
        setting = _Setting(make_loader, ids, world_size, workers_now, ordered)
        for stop, label in plan:
            cases.append(_case(setting, reference, checkpointed, stop, label, epochs))
        for stop, more, label in chains:
            # The same share of what is left: more ranks take fewer steps for it.
            more = more and max(1, more * world // world_size)
            cases.append(_case(setting, reference, checkpointed, stop, "", epochs, more, label))
    return ResumeReport(tuple(cases), tuple(_samples(reference, epochs)), world, workers)


def _case(
    setting: _Setting,
    reference: Pass,
    checkpointed: Pass,
    stop: Stop,
    label: str,
    epochs: int,
    more: int | None = None,
    chain: str = "",
) -> ResumeCase:
    make_loader, ids, world_size, workers = (
        setting.make_loader,
        setting.ids,
        setting.world_size,
        setting.workers,
    )
    where = describe(stop, checkpointed.steps[stop.epoch], label)
    if more is not None:
        where += f", {chain}" if not more else f", stopped again {more} batches after the resume ({chain})"
    passes = [_prefix(checkpointed, stop)]
    epochs_left = _epochs_after(checkpointed, stop, epochs)
    again = Stop(epochs_left.start, more) if more is not None else None
    try:
        resumed = _run(
            make_loader, ids, world_size, workers, epochs_left, states=checkpointed.states[stop], save={again}
        )
        if again is None:
            passes.append(resumed)
        else:
            # The resumed pass read on to its end, so that where its own stop lies is known.
            passes.append(_prefix(resumed, again))
            rest = _epochs_after(resumed, again, epochs)
            passes.append(_run(make_loader, ids, world_size, workers, rest, states=resumed.states[again]))
    except Exception as error:  # the report names it, with the case it happened in
        failed = Mismatch("error", None, None, None, f"{type(error).__name__}: {error}")
        return ResumeCase(where, world_size, workers, failed)
    return ResumeCase(where, world_size, workers, _compare(reference, passes, epochs, setting.ordered))


def _run(
    make_loader: MakeLoader,
    ids: SampleIds,
    world_size: int,
    workers: int,
    epochs: range,
    *,
    states: list[dict[str, Any]] | None = None,
    save: Collection[Stop | None] = (),
) -> Pass:
    """One pass of fresh loaders over ``epochs`` (resumed from ``states``, one per old rank, when
    given), checkpointing at ``save``."""
    loaders = [CheckedLoader(make_loader(rank, world_size, workers), ids) for rank in range(world_size)]
    try:
        if states is not None:
            for rank, loader in enumerate(loaders):
                loader.load(states[rank % len(states)])
        return _read(loaders, epochs, save=save)
    finally:
        for loader in loaders:
            loader.close()


def _read(loaders: list[CheckedLoader], epochs: range, *, save: Collection[Stop | None]) -> Pass:
    done = Pass(len(loaders), epochs.start)
    wanted = set(save)
    for epoch in epochs:
        for loader in loaders:
            loader.set_epoch(epoch)
        done.padded[epoch] = loaders[0].padded
        delivered: list[list[Hashable]] = [[] for _ in loaders]
        done.ledger[epoch] = delivered
        iterators = [loader.batches() for loader in loaders]
        running = list(range(len(loaders)))
        step = 0
        while True:
            stop = Stop(epoch, step)
            if stop in wanted:
                done.checkpoint(stop, loaders, delivered)
            for rank in list(running):
                batch = next(iterators[rank], None)
                if batch is None:
                    running.remove(rank)
                else:
                    delivered[rank].extend(batch)
            if not running:
                break
            step += 1
        done.steps[epoch] = step
        end = Stop(epoch, step, exhausted=True)
        if end in wanted:
            done.checkpoint(end, loaders, delivered)
    return done


def _epochs_after(done: Pass, stop: Stop, epochs: int) -> range:
    """The epochs a pass resumed from ``stop`` of ``done`` reads: from the stop's epoch, or the next
    when every batch of it had been delivered."""
    finished = stop.exhausted or stop.batch >= done.steps[stop.epoch]
    return range(stop.epoch + int(finished), epochs)


def _prefix(checkpointed: Pass, stop: Stop) -> Pass:
    """What the checkpointing run had delivered at ``stop``: its earlier epochs and the samples of
    each rank before the stop in its epoch."""
    prefix = Pass(checkpointed.world_size, checkpointed.first_epoch, padded=checkpointed.padded)
    for epoch in range(checkpointed.first_epoch, stop.epoch):
        prefix.ledger[epoch] = checkpointed.ledger[epoch]
    counts = checkpointed.delivered_at[stop]
    prefix.ledger[stop.epoch] = [
        ids[:count] for ids, count in zip(checkpointed.ledger[stop.epoch], counts, strict=True)
    ]
    return prefix


def _compare(reference: Pass, passes: list[Pass], epochs: int, ordered: bool) -> Mismatch | None:
    """The first difference of ``passes`` put together from the reference, epoch by epoch."""
    for epoch in range(epochs):
        parts = [part for part in passes if epoch in part.ledger]
        if all(part.world_size == reference.world_size for part in parts):
            for rank, want in enumerate(reference.ledger[epoch]):
                got = [sample for part in parts for sample in part.ledger[epoch][rank]]
                found = compare_rank(epoch, rank, want, got, ordered=ordered)
                if found is not None:
                    return found
            continue
        want_all = [sample for ids in reference.ledger[epoch] for sample in ids]
        got_all = [sample for part in parts for ids in part.ledger[epoch] for sample in ids]
        padded = max(part.padded.get(epoch, 0) for part in parts if part.world_size != reference.world_size)
        found = compare_all_ranks(epoch, want_all, got_all, padded=padded)
        if found is not None:
            return found
    return None


def _samples(reference: Pass, epochs: int) -> list[int]:
    return [sum(len(ids) for ids in reference.ledger[epoch]) for epoch in range(epochs)]


def _validate(
    make_loader: MakeLoader,
    epochs: int,
    world_sizes: Sequence[int],
    num_workers: Sequence[int],
    stops: Sequence[int],
    random_stops: int,
    sample_id: SampleIds | None,
) -> None:
    if not callable(make_loader):
        raise ConfigError(
            f"make_loader must be a function make_loader(rank, world_size, num_workers) -> loader, got "
            f"{type(make_loader).__name__}"
        )
    if sample_id is not None and not callable(sample_id):
        raise ConfigError(f"sample_id must be a function of a batch, got {type(sample_id).__name__}")
    for name, values, least in (
        ("world_sizes", world_sizes, 1),
        ("num_workers", num_workers, 0),
        ("stops", stops, 0),
    ):
        if not all(isinstance(value, int) and value >= least for value in values):
            raise ConfigError(f"{name} must be integers >= {least}, got {list(values)}")
        if not values and name != "stops":
            raise ConfigError(f"{name} needs at least one value, got none")
    for name, value, least in (("epochs", epochs, 1), ("random_stops", random_stops, 0)):
        if not isinstance(value, int) or value < least:
            raise ConfigError(f"{name} must be an integer >= {least}, got {value!r}")
