"""Online alignment: streams read once, record by record, as iterators of ``(timestamp, value)``.

Each stream is held as two records: the last at or before the current tick and the first after
it — exactly the two candidates :meth:`Rule.choose` picks from (records no later tick can take are
counted into the report and let go). Reading is plain Python: no per-tick arrays, integers and
floats compared as they are, so the output equals the offline path's, types included.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from torchloom.errors import TimestampError
from torchloom.fusion.sync.clock import (
    DATETIME,
    FLOAT,
    INT,
    NAT,
    Clock,
    out_of_order,
    outside_unit,
    unusable_time,
)
from torchloom.fusion.sync.report import SyncReport
from torchloom.fusion.sync.rule import BEFORE, BOTH, NONE, Rule
from torchloom.fusion.sync.values import as_float, mix, plain

Convert = Callable[[Any, int], Any]
INF = math.inf
SKIPPED, DROPPED, USED, UNCOUNTED = 0, 1, 2, 3
# a record: [time, value, mark (SKIPPED / DROPPED / USED), earlier records it replaced (equal times)]
START = [-INF, None, UNCOUNTED, 0]
END = [INF, None, UNCOUNTED, 0]


def open_source(stream: Any) -> Iterator[Any]:
    """An iterator of ``(timestamp, value)`` records from an online stream: an iterable, a callable
    returning one, or a ``(timestamps, values)`` pair of arrays."""
    if callable(stream):
        stream = stream()
    if isinstance(stream, tuple) and len(stream) == 2:
        timestamps = np.asarray(stream[0])
        times = timestamps.tolist() if timestamps.dtype.kind in "fiu" else timestamps
        return iter(zip(times, stream[1], strict=True))
    return iter(stream)


def converter(name: str, clock: Clock) -> tuple[type, Convert]:
    """``(fast_type, convert)`` for one stream: timestamps of exactly ``fast_type`` are already
    working numbers; ``convert(timestamp, position)`` turns any other into one, or raises."""

    def mismatch(timestamp: Any, position: int) -> TimestampError:
        return TimestampError(
            f"stream {name!r}: timestamp at position {position} ({timestamp!r}) is a "
            f"{type(timestamp).__name__}, but the streams' timestamps are {clock.kind} values; give every "
            f"timestamp of every stream as the same kind"
        )

    if clock.kind == FLOAT:

        def to_float(timestamp: Any, position: int) -> float:
            if isinstance(timestamp, (float, int, np.floating, np.integer)) and not isinstance(
                timestamp, (bool, np.bool_)
            ):
                return float(timestamp)  # an int in a float stream, as numpy would promote it
            raise mismatch(timestamp, position)

        return float, to_float
    if clock.kind == INT:

        def to_int(timestamp: Any, position: int) -> int:
            if isinstance(timestamp, (int, np.integer)) and not isinstance(timestamp, (bool, np.bool_)):
                return int(timestamp)
            raise mismatch(timestamp, position)

        return int, to_int
    unit = np.dtype(f"M8[{clock.unit}]")
    int64 = np.dtype(np.int64)

    def to_count(timestamp: Any, position: int) -> int:
        if not isinstance(timestamp, np.datetime64):
            raise mismatch(timestamp, position)
        converted = timestamp if timestamp.dtype == unit else timestamp.astype(unit)
        count = int(converted.view(int64))
        if count == NAT:
            raise unusable_time(name, position, count, clock)
        if converted is not timestamp and converted.astype(timestamp.dtype) != timestamp:
            raise outside_unit(name, position, timestamp, clock)
        return count

    return _Never, to_count


class _Never:
    """No timestamp is of this type: every datetime64 goes through the conversion."""


def converted(records: Iterable[Any], fast: type, convert: Convert) -> Iterator[tuple[Any, Any]]:
    """Records with their timestamps as working numbers (before reordering them)."""
    for position, (timestamp, value) in enumerate(records):
        yield (timestamp if type(timestamp) is fast else convert(timestamp, position)), value


def reordered(
    name: str, records: Iterable[tuple[Any, Any]], window: int, describe: Callable[[Any], str] = str
) -> Iterator[tuple[Any, Any]]:
    """Put records back in time order through a heap of ``window`` records; a record that arrives
    more than ``window`` records late is a :class:`TimestampError` naming its position.

    Ties keep their arrival order. ``describe`` shows a time in messages.

    Example:
        >>> list(reordered("imu", [(0.0, "a"), (0.2, "c"), (0.1, "b")], window=1))
        [(0.0, 'a'), (0.1, 'b'), (0.2, 'c')]
    """
    heap: list[tuple[Any, int, Any]] = []
    emitted: Any = -INF

    def pop() -> tuple[Any, Any]:
        nonlocal emitted
        time, position, value = heapq.heappop(heap)
        if time < emitted:
            raise TimestampError(
                f"stream {name!r}: the record at position {position} ({describe(time)}) arrived more than "
                f"reorder_window={window} records late; pass a larger reorder_window"
            )
        emitted = time
        return time, value

    for position, (time, value) in enumerate(records):
        if time != time:  # NaN (and NaT)
            raise TimestampError(
                f"stream {name!r}: timestamp at position {position} is {time}; drop or repair it"
            )
        heapq.heappush(heap, (time, position, value))
        if len(heap) > window:
            yield pop()
    while heap:
        yield pop()


def deduplicated(
    name: str, records: Iterable[tuple[Any, Any]], fast: type, convert: Convert, clock: Clock
) -> Iterator[list[Any]]:
    """Records as ``[time, value, mark, replaced]``, checked (finite, in order) and with equal
    timestamps merged into their last record (``replaced`` counts the earlier ones). A record is
    yielded once the next, later one has been read."""
    last: Any = -INF
    pending: list[Any] | None = None
    time: Any
    for position, (timestamp, value) in enumerate(records):
        time = timestamp if type(timestamp) is fast else convert(timestamp, position)
        if last < time < INF:
            if pending is not None:
                yield pending
            pending = [time, value, SKIPPED, 0]
            last = time
        elif pending is not None and time == last:
            pending[1] = value
            pending[3] += 1
        elif time != time or time in (INF, -INF):
            raise unusable_time(name, position, time, clock)
        else:
            raise out_of_order(name, position, clock.describe(time), clock.describe(last))
    if pending is not None:
        yield pending


class Reader:
    """One stream online: the candidates around the current tick and the counts of the records
    let go (by mark: skipped, dropped, used).

    Example:
        >>> reader = Reader("imu", iter([[0.5, "a", SKIPPED, 0]]), zero=None)
        >>> reader.before[0], reader.after[:2]
        (-inf, [0.5, 'a'])
        >>> reader.drain(); reader.counts[SKIPPED]
        1
    """

    __slots__ = ("after", "before", "counts", "dt_key", "name", "records", "valid_key", "zero")

    def __init__(self, name: str, records: Iterator[list[Any]], zero: Any) -> None:
        self.name, self.records, self.zero = name, records, zero
        self.dt_key, self.valid_key = f"{name}_dt", f"{name}_valid"
        self.before: list[Any] = START
        self.after: list[Any] = next(records, END)
        self.counts = [0, 0, 0, 0]

    def drain(self) -> None:
        """Count the rest of the stream once the reference has ended."""
        for record in itertools.chain((self.before, self.after), self.records):
            self.counts[record[2]] += 1
            self.counts[SKIPPED] += record[3]
        self.before = self.after = END

    def report_to(self, report: SyncReport) -> None:
        skipped, dropped, used, _ = self.counts
        report.add(self.name, total=skipped + dropped + used, used=used, dropped=dropped)


def aligned(
    reference: Reader,
    readers: Sequence[Reader],
    rule: Rule,
    clock: Clock,
    *,
    drop: bool,
    interpolate: bool,
    report: SyncReport,
) -> Iterator[dict[str, Any]]:
    """The aligned samples, tick by tick; ``report`` is filled in when the pass ends (or stops)."""
    choose = rule.choose
    to_time = clock.time if clock.kind == DATETIME else None
    to_offset = clock.offset if clock.kind == DATETIME else None
    missing_dt, zero_dt = clock.missing_offset, clock.offset(clock.zero)
    name, dt_key, valid_key = reference.name, reference.dt_key, reference.valid_key
    counts = reference.counts
    chosen: list[list[Any]] = []  # with on_gap="drop": marked once the tick is kept or dropped
    end, none, both, before_taken, used = END, NONE, BOTH, BEFORE, USED  # locals: the loop is hot
    take_value = as_float if interpolate else plain
    following = next
    try:
        tick_record = reference.after
        while tick_record is not end:
            tick = tick_record[0]
            sample = {
                "t": tick if to_time is None else to_time(tick),
                name: plain(tick_record[1]),
                dt_key: zero_dt,
                valid_key: True,
            }
            keep = True
            for reader in readers:
                after = reader.after
                before = reader.before
                if after[0] <= tick:  # move on: records no later tick can take are let go
                    stream_counts, records = reader.counts, reader.records
                    while after[0] <= tick:
                        stream_counts[before[2]] += 1
                        stream_counts[0] += before[3]  # equal-time records it replaced: skipped
                        before = after
                        after = following(records, end)
                    reader.before, reader.after = before, after
                taken, dt, valid, weight = choose(before[0], after[0], tick)
                if taken == none:
                    sample[reader.name] = reader.zero
                    sample[reader.dt_key] = missing_dt
                    sample[reader.valid_key] = keep = False
                    continue
                if taken == both:
                    value = mix(before[1], after[1], weight) if valid else reader.zero
                    if drop:
                        chosen += (before, after)
                    else:
                        before[2] = after[2] = used
                else:
                    record = before if taken == before_taken else after
                    value = take_value(record[1]) if valid else reader.zero
                    if drop:
                        chosen.append(record)
                    else:
                        record[2] = used
                sample[reader.name] = value
                sample[reader.dt_key] = dt if to_offset is None else to_offset(dt)
                sample[reader.valid_key] = valid
                keep = keep and valid
            counts[0] += tick_record[3]
            if keep or not drop:
                for record in chosen:
                    record[2] = used
                counts[used] += 1
                chosen.clear()
                yield sample
            else:
                for record in chosen:
                    if record[2] == SKIPPED:
                        record[2] = DROPPED
                counts[DROPPED] += 1
                chosen.clear()
            tick_record = reference.after = following(reference.records, end)
        for reader in readers:
            reader.drain()
    finally:
        for reader in (reference, *readers):
            reader.report_to(report)
