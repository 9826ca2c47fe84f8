"""One resume helper for everything resumable: samplers, StreamDataset, SyncedRecordings (later the Loader).

A :class:`Subject` says how to build a fresh resumable object and read it through a DataLoader.
:func:`check_every_seam` then runs it through torchdata's ``StatefulDataLoader`` at every seam:
interrupted at 0, 1, k and len-1 batches; at the end of an epoch followed by the next epoch; a
resume of a resume, and a checkpoint right after a load; ``set_epoch`` before and after
``load_state_dict``; a checkpoint after ``set_epoch`` and before the first batch; epochs through
persistent workers. The reference is always one uninterrupted epoch read the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch.utils.data import DataLoader, Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

BATCH_SIZE = 2
EPOCH = 1


@dataclass
class Subject:
    """How to build and read one resumable thing.

    ``make`` returns the object that has ``set_epoch`` (a sampler or an iterable dataset);
    ``parts`` turns it into the DataLoader's ``(dataset, sampler)``; ``ids`` lists what a batch
    holds. ``finished_epoch_advances``: a state saved at the end of an epoch resumes into the next
    epoch without ``set_epoch`` (samplers; a stream consumer cannot know the other consumers are
    done). ``main_state_saved``: StatefulDataLoader saves this object's state even with workers
    (samplers live in the main process; a stream's state is saved per worker).
    """

    name: str
    make: Callable[[], Any]
    parts: Callable[[Any], tuple[Dataset[Any], Any]]
    ids: Callable[[Any], list[Any]]
    finished_epoch_advances: bool
    main_state_saved: bool


@dataclass
class Setup:
    """How batches are read: DataLoader workers (``num_workers``, ``persistent``) or, with
    ``threads``, torchloom's thread :class:`~torchloom.Loader` with that many threads; batches of
    ``batch_size``, the short last one dropped with ``drop_last``."""

    num_workers: int
    persistent: bool
    threads: int = 0
    batch_size: int = BATCH_SIZE
    drop_last: bool = False

    def loader(self, subject: Subject, obj: Any, stateful: bool = True) -> Any:
        dataset, sampler = subject.parts(obj)
        if self.threads:
            from torchloom import Loader

            return Loader(
                dataset,
                sampler=sampler,
                batch_size=self.batch_size,
                num_threads=self.threads,
                drop_last=self.drop_last,
            )
        kind = StatefulDataLoader if stateful else DataLoader
        return kind(
            dataset,
            sampler=sampler,
            batch_size=self.batch_size,
            drop_last=self.drop_last,
            num_workers=self.num_workers,
            persistent_workers=self.persistent and self.num_workers > 0,
        )


def read(subject: Subject, loader: Any, batches: int | None = None) -> list[Any]:
    """Read ``batches`` batches (all when None) from a new iterator of ``loader``."""
    seen: list[Any] = []
    for number, batch in enumerate(loader):
        seen.extend(subject.ids(batch))
        if batches is not None and number + 1 >= batches:
            break
    return seen


def epoch_ids(subject: Subject, setup: Setup, epoch: int) -> list[Any]:
    obj = subject.make()
    obj.set_epoch(epoch)
    return read(subject, setup.loader(subject, obj))


def resumed(
    subject: Subject, setup: Setup, state: Any, epoch: int | None, order: str, batches: int | None = None
) -> tuple[list[Any], Any]:
    """A fresh object and loader, resumed from ``state`` with ``set_epoch(epoch)`` before or after the
    load (or not at all); returns what it read and its state afterwards."""
    obj = subject.make()
    loader = setup.loader(subject, obj)
    if order == "before" and epoch is not None:
        obj.set_epoch(epoch)
    loader.load_state_dict(state)
    if order == "after" and epoch is not None:
        obj.set_epoch(epoch)
    seen = read(subject, loader, batches)
    return seen, loader.state_dict()


def interrupted(subject: Subject, setup: Setup, epoch: int, batches: int) -> tuple[list[Any], Any]:
    obj = subject.make()
    obj.set_epoch(epoch)
    loader = setup.loader(subject, obj)
    iterator = iter(loader)
    seen: list[Any] = []
    for _ in range(batches):
        seen.extend(subject.ids(next(iterator)))
    return seen, loader.state_dict()


def check_interrupts(subject: Subject, setup: Setup) -> None:
    full = epoch_ids(subject, setup, EPOCH)
    count = -(-len(full) // setup.batch_size)
    assert count >= 4, "a subject needs a few batches per epoch"
    for stop in sorted({0, 1, count // 2, count - 1}):
        for order in ("before", "after"):
            seen, state = interrupted(subject, setup, EPOCH, stop)
            rest, _ = resumed(subject, setup, state, EPOCH, order)
            assert seen + rest == full, f"{subject.name}: interrupted at batch {stop}, set_epoch {order} load"


def check_resume_of_resume(subject: Subject, setup: Setup) -> None:
    full = epoch_ids(subject, setup, EPOCH)
    count = -(-len(full) // setup.batch_size)
    first, second = count // 3, 2 * count // 3
    seen, state = interrupted(subject, setup, EPOCH, first)
    obj = subject.make()
    loader = setup.loader(subject, obj)
    loader.load_state_dict(state)
    right_after_load = loader.state_dict()  # a checkpoint before any batch of the resumed run
    middle = read(subject, loader, second - first)
    state_twice = loader.state_dict()
    rest, _ = resumed(subject, setup, state_twice, EPOCH, "after")
    assert seen + middle + rest == full, f"{subject.name}: resume of a resume"
    again, _ = resumed(subject, setup, right_after_load, EPOCH, "before")
    assert seen + again == full, f"{subject.name}: checkpoint right after a load"


def check_epoch_boundary(subject: Subject, setup: Setup) -> None:
    full = epoch_ids(subject, setup, EPOCH)
    following = epoch_ids(subject, setup, EPOCH + 1)
    obj = subject.make()
    obj.set_epoch(EPOCH)
    loader = setup.loader(subject, obj)
    assert read(subject, loader) == full
    at_end = loader.state_dict()
    orders = ["before", "after"] + (["none"] if subject.finished_epoch_advances else [])
    for order in orders:
        nxt, _ = resumed(subject, setup, at_end, EPOCH + 1, order)
        assert nxt == following, f"{subject.name}: end-of-epoch checkpoint, set_epoch {order} load"
    # A checkpoint after set_epoch(next) and before its first batch resumes into that whole epoch.
    obj.set_epoch(EPOCH + 1)
    before_first = loader.state_dict()
    order = "none" if subject.main_state_saved or setup.num_workers == 0 else "after"
    nxt, _ = resumed(subject, setup, before_first, EPOCH + 1, order)
    assert nxt == following, f"{subject.name}: checkpoint after set_epoch, before the first batch"
    # The epoch after a resumed one is whole too.
    obj = subject.make()
    loader = setup.loader(subject, obj)
    obj.set_epoch(EPOCH + 1)
    loader.load_state_dict(at_end)
    assert read(subject, loader) == following
    obj.set_epoch(EPOCH + 2)
    assert read(subject, loader) == epoch_ids(subject, setup, EPOCH + 2)


def check_epochs_reach_workers(subject: Subject, setup: Setup) -> None:
    """Each epoch through one loader (persistent workers: the same worker processes) equals the
    reference of that epoch, with the plain DataLoader and with StatefulDataLoader."""
    for stateful in (False, True):
        obj = subject.make()
        loader = setup.loader(subject, obj, stateful=stateful)
        epochs = []
        for epoch in range(3):
            obj.set_epoch(epoch)
            epochs.append(read(subject, loader))
            assert epochs[-1] == epoch_ids(subject, setup, epoch), f"{subject.name}: epoch {epoch}"


def check_every_seam(subject: Subject, setup: Setup) -> None:
    check_interrupts(subject, setup)
    check_resume_of_resume(subject, setup)
    check_epoch_boundary(subject, setup)
    check_epochs_reach_workers(subject, setup)
