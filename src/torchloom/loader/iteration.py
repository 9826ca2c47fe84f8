"""One pass of the thread :class:`~torchloom.Loader` over its sampler: the threads and the order.

The Loader says, through a :class:`PassPlan`, where a pass starts (a :class:`PassStart`: the epoch,
the batches before it and the sampler's keys from there), what the position is after each batch and
at the end of the epoch, and how a batch is loaded; the pass draws keys ahead, keeps the fetches in
flight on a thread pool, delivers batches in order and tells the Loader each delivered batch's
position.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from torchloom.errors import UsageError

#: A position of the Loader: what its ``state_dict`` returns after a batch.
Position = dict[str, Any]


class Deliver(Protocol):
    """Where a pass sends each delivered batch's position (``finished``: the epoch's last)."""

    def __call__(self, position: Position, *, finished: bool) -> None: ...


@dataclass(frozen=True)
class PassStart:
    """Where a pass starts, as the Loader settled it when the pass began."""

    #: The sampler's keys from the pass's first batch on (those a resume skips left out).
    keys: Iterator[Any]
    #: Batches of the epoch delivered before the pass's first (a resumed position).
    batches: int
    epoch: int


@dataclass(frozen=True)
class PassPlan:
    """What the Loader tells each pass: its settings, where the pass starts, the position after a
    number of batches (and after the whole epoch), how a batch is fetched, and where each delivered
    batch's position goes (``finished``: the epoch's last)."""

    batch_size: int
    drop_last: bool
    num_threads: int
    prefetch: int
    #: Called at the first ``next``; the Loader's position is then the pass's start.
    begin: Callable[[], PassStart]
    position: Callable[[int, int], Position]
    end_of_epoch: Callable[[int, int], Position]
    fetch: Callable[[Sequence[Any]], Any]
    deliver: Deliver


class LoaderIteration:
    """One pass of a :class:`~torchloom.Loader` over its sampler: batches fetched ahead on a thread pool and
    delivered in order, the loader's state set to each delivered batch's position.

    Nothing is drawn before the first ``next``. An error raised while loading a batch reaches the
    caller when that batch is due, and the threads stop (nothing runs while the error is handled); a
    further ``next`` starts them again and goes on with the following batch, as a DataLoader does.
    When a newer iteration or a ``load_state_dict`` stops this one, its ``next`` raises
    :class:`UsageError` saying so (its remaining batches were not delivered).
    """

    def __init__(self, plan: PassPlan) -> None:
        self._executor: ThreadPoolExecutor | None = None
        # Batches drawn and not yet delivered: each one's fetch, position once delivered, and keys.
        self._pending: deque[tuple[Future[Any], Position, list[Any]]] = deque()
        self._started = False
        self._done = False
        self._stopped: str | None = None  # why a newer iteration or a load stopped this one
        self._sampler_error: Exception | None = None
        self._plan = plan
        self._depth = plan.num_threads + plan.prefetch
        self._exhausted = False
        self._finished: Position | None = None  # the position once the epoch is drawn to its end
        self._keys: Iterator[Any] = iter(())
        self._drawn = 0  # batches of the epoch drawn so far, those before a resumed position included
        self._epoch = 0

    def _start(self) -> None:
        """Begin the epoch at the first ``next``: draw keys, start the threads, fetch ahead."""
        self._started = True
        start = self._plan.begin()
        self._keys, self._drawn, self._epoch = start.keys, start.batches, start.epoch
        self._start_threads()
        try:
            self._fill()
        except BaseException:
            self.stop(None)
            raise

    def __iter__(self) -> LoaderIteration:
        return self

    def __next__(self) -> Any:
        if self._stopped is not None:
            raise UsageError(
                f"this Loader iteration was stopped: {self._stopped}, so its remaining batches were not "
                "delivered. A Loader runs one iteration at a time (for two at once, make two Loaders)"
            )
        if self._done:
            raise StopIteration
        if self._sampler_error is not None:  # the sampler failed while drawing ahead
            error, self._sampler_error = self._sampler_error, None
            self.stop(None)
            raise error
        if not self._started:
            self._start()
        elif self._executor is None:  # paused by an error in an earlier batch: go on
            self._start_threads()
            self._fill()  # in place of the failed batch
        if not self._pending:
            self.stop(None)
            raise StopIteration
        future, position, keys = self._pending.popleft()
        try:
            batch = future.result()
        except BaseException:
            if not (future.done() and not future.cancelled() and future.exception() is not None):
                self._pending.appendleft((future, position, keys))  # interrupted while waiting (Ctrl-C)
                raise
            self._pause()  # the batch failed
            self._deliver(position)  # it is behind: a resume goes on after it
            raise
        # Draw ahead before delivering, so that the last batch of the epoch is known as such. A
        # sampler error here is raised by the next call: this batch is delivered first.
        try:
            self._fill()
        except Exception as error:
            self._sampler_error = error
        self._deliver(position)
        return batch

    def _deliver(self, position: Position) -> None:
        """Set the loader's position to ``position``, after a batch; after the epoch's last batch, the
        end of the epoch (which resumes into the whole next one)."""
        if self._exhausted and not self._pending and self._finished is not None:
            self._plan.deliver(self._finished, finished=True)
        else:
            self._plan.deliver(position, finished=False)

    def _fill(self) -> None:
        plan = self._plan
        while not self._exhausted and len(self._pending) < self._depth:
            batch_keys = list(itertools.islice(self._keys, plan.batch_size))
            if not batch_keys or (plan.drop_last and len(batch_keys) < plan.batch_size):
                self._exhausted = True
                self._finished = plan.end_of_epoch(self._drawn, self._epoch)
                if not self._pending:  # nothing more to deliver: the position is the end already
                    self._deliver(self._finished)
                return
            self._drawn += 1
            position = plan.position(self._drawn, self._epoch)
            self._pending.append((self._submit(batch_keys), position, batch_keys))

    def _submit(self, keys: list[Any]) -> Future[Any]:
        assert self._executor is not None
        return self._executor.submit(self._plan.fetch, keys)

    def _start_threads(self) -> None:
        """Start the thread pool; batches whose fetch a pause cancelled are submitted again."""
        self._executor = ThreadPoolExecutor(self._plan.num_threads, thread_name_prefix="torchloom-loader")
        self._pending = deque(
            (self._submit(keys) if future.cancelled() else future, position, keys)
            for future, position, keys in self._pending
        )

    def _pause(self, *, wait: bool = True) -> None:
        """Cancel the fetches not yet started and join the threads (finished ones are kept)."""
        executor, self._executor = self._executor, None
        for future, _, _ in self._pending:
            future.cancel()
        if executor is not None:
            executor.shutdown(wait=wait, cancel_futures=True)

    def stop(self, reason: str | None, *, wait: bool = True) -> None:
        """End the iteration: cancel pending batches, join the threads (``wait``); with a
        ``reason`` (a newer iteration, a load), a later ``next`` raises instead of ending quietly."""
        if reason is not None and not self._done:
            self._stopped = reason
        self._done = True
        self._pause(wait=wait)
        self._pending.clear()

    def __del__(self) -> None:
        # Not joined: a garbage collection may run this on one of the pool's own threads, or at
        # interpreter exit; the threads end after the batch each one is building.
        self.stop(None, wait=False)
