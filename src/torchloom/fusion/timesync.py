"""TimeSync: align streams recorded at different rates to a reference clock.

For every reference timestamp, every other stream contributes one value chosen by ``policy``:

- ``"nearest"``: the record closest in time (on a tie, the earlier one), valid when
  ``|dt| <= tolerance``;
- ``"previous"``: the last record at or before the tick, valid when ``tick - t <= tolerance``;
- ``"interpolate"``: linear interpolation between the records around the tick (numeric values),
  valid when both are within ``tolerance`` of the tick and, with ``max_gap``, at most ``max_gap``
  apart; an exact match needs no neighbour.

Each output sample holds ``"t"`` (the tick), every stream's value under its name, its time offset
``<name>_dt`` (record time minus tick; for interpolation, the larger distance to the two records
used) and ``<name>_valid``. With ``on_gap="drop"`` ticks where a stream is invalid are dropped; with
``"mask"`` they are kept with a zero value and ``valid=False``. Nothing disappears silently:
:attr:`TimeSync.report` accounts for every input record as used, skipped (never chosen: between
ticks, beyond tolerance, or a duplicate timestamp) or dropped (chosen only for dropped ticks).

Duplicate timestamps: within a stream, the last record with a given timestamp is the one used;
the earlier ones are skipped. Timestamps must not decrease and must not be NaN: an error names the
stream and the position — unless ``reorder_window=k`` is given, which sorts records that arrive at
most ``k`` records late (through a bounded heap, in both modes).

Streams are ``(timestamps, values)`` pairs of arrays (offline: vectorised with ``searchsorted``;
the result is a map-style dataset) or iterators of ``(timestamp, value)`` records (online:
:meth:`TimeSync.stream` reads each iterator once through bounded buffers). Both give the same
samples.

Example:
    >>> import numpy as np
    >>> camera = (np.array([0.0, 0.1, 0.2]), np.array([10, 11, 12]))
    >>> imu = (np.array([0.0, 0.03, 0.07, 0.1, 0.13]), np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
    >>> sync = TimeSync({"camera": camera, "imu": imu}, reference="camera", tolerance=0.05)
    >>> [(s["camera"], s["imu"], s["imu_valid"]) for s in sync]
    [(10, 1.0, True), (11, 4.0, True)]
    >>> sync.report.dropped["camera"], sync.report.skipped["imu"], sync.report.dropped["imu"]
    (1, 2, 1)
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from torch.utils.data import Dataset

from torchloom.errors import TorchloomError

Policy = Literal["nearest", "previous", "interpolate"]
POLICIES = ("nearest", "previous", "interpolate")
GAP_RULES = ("drop", "mask")


class TimestampError(TorchloomError, ValueError):
    """A stream's timestamps are out of order or NaN; names the stream and the position."""


@dataclass
class SyncReport:
    """Per stream, how many input records were used, skipped or dropped (they sum to the total)."""

    total: dict[str, int] = field(default_factory=dict)
    used: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = ["SyncReport (records used / skipped / dropped of total):"]
        lines += [
            f"  {name}: {self.used[name]} / {self.skipped[name]} / {self.dropped[name]} of {self.total[name]}"
            for name in self.total
        ]
        return "\n".join(lines)


@dataclass(frozen=True)
class Choice:
    """What one stream gives one tick: record positions used, value, offset, validity."""

    positions: tuple[int, ...]
    value: Any
    dt: float
    valid: bool


def check_timestamps(name: str, timestamps: np.ndarray, start: int = 0) -> None:
    """Raise :class:`TimestampError` for NaN or decreasing timestamps (``start``: position offset)."""
    nan = np.flatnonzero(np.isnan(timestamps))
    if len(nan):
        raise TimestampError(f"stream {name!r}: timestamp at position {start + int(nan[0])} is NaN")
    backwards = np.flatnonzero(np.diff(timestamps) < 0)
    if len(backwards):
        position = start + int(backwards[0]) + 1
        raise TimestampError(
            f"stream {name!r}: timestamp at position {position} ({timestamps[backwards[0] + 1]}) is earlier "
            f"than the one before it ({timestamps[backwards[0]]}); sort the stream"
        )


def last_of_duplicates(timestamps: np.ndarray) -> np.ndarray:
    """Positions kept when equal timestamps keep only their last record."""
    if len(timestamps) == 0:
        return np.zeros(0, dtype=np.int64)
    keep = np.ones(len(timestamps), dtype=bool)
    keep[:-1] = timestamps[1:] != timestamps[:-1]
    return np.flatnonzero(keep)


@dataclass
class Picks:
    """Every tick's choice in one stream, as arrays (``positions``: one or two columns, -1 if none)."""

    positions: list[np.ndarray]
    values: np.ndarray | None
    dt: np.ndarray
    valid: np.ndarray


class _Rule:
    """The choice rule shared by the offline and the online modes (so both give the same output)."""

    def __init__(self, policy: Policy, tolerance: float, max_gap: float | None) -> None:
        self.policy, self.tolerance, self.max_gap = policy, tolerance, max_gap

    def choose_all(
        self, times: np.ndarray, values: np.ndarray, positions: np.ndarray, ticks: np.ndarray
    ) -> Picks:
        """:meth:`choose` for all ticks at once (same rules, same ties), with ``searchsorted``."""
        count, size = len(ticks), len(times)
        if size == 0:
            none = np.full(count, -1, dtype=np.int64)
            return Picks([none], None, np.full(count, np.nan), np.zeros(count, dtype=bool))
        right = np.searchsorted(times, ticks, side="left")  # first record at or after each tick
        if self.policy == "nearest":
            # Records are deduplicated, so an exact match is the record at `right`, at distance 0.
            before = right - 1
            has_after = right < size
            safe_after = np.minimum(right, size - 1)
            distance_before = np.where(before >= 0, ticks - times[np.maximum(before, 0)], np.inf)
            distance_after = np.where(has_after, times[safe_after] - ticks, np.inf)
            take_before = distance_before <= distance_after  # a tie goes to the earlier record
            chosen = np.where(take_before, before, np.where(has_after, right, -1))
            found = chosen >= 0
            safe = np.maximum(chosen, 0)
            dt = times[safe] - ticks
            valid = found & (np.abs(dt) <= self.tolerance)
            if not found.all():
                dt = np.where(found, dt, np.nan)
            return Picks([np.where(found, positions[safe], -1)], values[safe], dt, valid)
        inside = right < size
        exact = inside & (times[np.minimum(right, size - 1)] == ticks)
        before = np.where(exact, right, right - 1)
        after = np.where(inside, right, -1)
        safe_before, safe_after = np.maximum(before, 0), np.maximum(after, 0)
        has_before, has_after = before >= 0, after >= 0
        if self.policy == "previous":
            dt = np.where(has_before, times[safe_before] - ticks, np.nan)
            valid = has_before & (-dt <= self.tolerance)
            return Picks([np.where(has_before, positions[safe_before], -1)], values[safe_before], dt, valid)
        both = has_before & has_after & ~exact
        t0, t1 = times[safe_before], times[safe_after]
        span = np.where(both, t1 - t0, 1.0)
        weight = np.where(both, (ticks - t0) / span, 0.0)
        shape = (count,) + (1,) * (values.ndim - 1)
        low = values[safe_before].astype(np.float64)
        high = values[safe_after].astype(np.float64)
        mixed = low * (1 - weight.reshape(shape)) + high * weight.reshape(shape)
        interpolated = np.where(exact.reshape(shape), low, mixed)
        dt = np.where(exact, 0.0, np.where(both, np.maximum(ticks - t0, t1 - ticks), np.nan))
        valid = exact | (both & (dt <= self.tolerance))
        if self.max_gap is not None:
            valid &= exact | (span <= self.max_gap)
        first = np.where(exact | both, positions[safe_before], -1)
        second = np.where(both, positions[safe_after], -1)
        return Picks([first, second], interpolated, dt, valid)

    def choose(self, times: np.ndarray, values: Any, positions: np.ndarray, tick: float) -> Choice:
        """Choose among records ``times`` (deduplicated, sorted) whose input positions are ``positions``."""
        right = int(np.searchsorted(times, tick, side="left"))  # first record at or after the tick
        exact = right < len(times) and times[right] == tick
        before = right - 1 if not exact else right
        after = right if right < len(times) else -1
        if self.policy == "previous" or (self.policy == "interpolate" and exact):
            if before < 0:
                return Choice((), None, math.nan, False)
            dt = float(times[before] - tick)
            return Choice((int(positions[before]),), plain(values[before]), dt, -dt <= self.tolerance)
        if self.policy == "nearest":
            candidates = [i for i in (before, after) if i >= 0]
            if not candidates:
                return Choice((), None, math.nan, False)
            best = min(candidates, key=lambda i: (abs(float(times[i]) - tick), float(times[i])))
            dt = float(times[best] - tick)
            return Choice((int(positions[best]),), plain(values[best]), dt, abs(dt) <= self.tolerance)
        if before < 0 or after < 0:
            return Choice((), None, math.nan, False)
        t0, t1 = float(times[before]), float(times[after])
        span_ok = self.max_gap is None or t1 - t0 <= self.max_gap
        dt = max(tick - t0, t1 - tick)
        weight = (tick - t0) / (t1 - t0)
        value = (
            np.asarray(values[before], dtype=np.float64) * (1 - weight)
            + np.asarray(values[after], dtype=np.float64) * weight
        )
        valid = span_ok and dt <= self.tolerance
        return Choice((int(positions[before]), int(positions[after])), plain(value), dt, valid)


class TimeSync(Dataset[dict[str, Any]]):
    """Align ``streams`` to the ``reference`` stream's timestamps (see the module docstring).

    Args:
        streams: name -> ``(timestamps, values)`` arrays; or an iterable of ``(timestamp, value)``
            records, or a callable returning one (needed to iterate an online TimeSync again: a
            plain iterator is read once, and a second pass is an error saying so).
        reference: the name of the stream whose timestamps are the output clock.
        tolerance: the largest time offset at which a record still counts (same unit as timestamps).
        policy: ``"nearest"``, ``"previous"`` or ``"interpolate"``.
        on_gap: ``"drop"`` ticks where a stream has no valid value, or ``"mask"`` them.
        max_gap: with ``"interpolate"``, the longest span between the two records interpolated.

    With array streams, ``TimeSync`` is a map-style dataset of the aligned samples (computed
    once). With iterators, iterate :meth:`stream` (or the object itself) to align online.
    """

    def __init__(
        self,
        streams: Mapping[str, Any],
        *,
        reference: str,
        tolerance: float,
        policy: Policy = "nearest",
        on_gap: Literal["drop", "mask"] = "drop",
        max_gap: float | None = None,
        reorder_window: int | None = None,
    ) -> None:
        if reorder_window is not None and reorder_window < 0:
            raise ValueError(f"reorder_window must be >= 0, got {reorder_window}")
        self.reorder_window = reorder_window
        if policy not in POLICIES:
            raise ValueError(f"Invalid policy={policy!r}; must be one of {POLICIES}")
        if on_gap not in GAP_RULES:
            raise ValueError(f"Invalid on_gap={on_gap!r}; must be one of {GAP_RULES}")
        if reference not in streams:
            raise ValueError(f"reference={reference!r} is not one of the streams {list(streams)}")
        if not tolerance >= 0:
            raise ValueError(f"tolerance must be >= 0, got {tolerance}")
        self.reference, self.on_gap = reference, on_gap
        self.rule = _Rule(policy, float(tolerance), max_gap)
        self.names = [reference] + [name for name in streams if name != reference]
        self.report = SyncReport()
        self._sources = dict(streams)
        self.online = not all(isinstance(s, tuple) and len(s) == 2 for s in streams.values())
        self._passes = 0
        self._columns: dict[str, Any] = {}
        self._zeros: dict[str, Any] = {}
        self._length = 0
        if not self.online:
            self._align_offline()

    # --- offline -------------------------------------------------------------------------------

    def _align_offline(self) -> None:
        """Vectorised: every tick's choice in every stream at once with ``searchsorted``."""
        arrays: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for name in self.names:
            timestamps, values = self._sources[name]
            if self.reorder_window is not None:
                records = list(reordered(name, zip(timestamps, values, strict=True), self.reorder_window))
                timestamps = [t for t, _ in records]
                values = np.asarray([v for _, v in records]) if records else np.asarray(values)[:0]
            times = np.asarray(timestamps, dtype=np.float64)
            values = _as_values(name, values, len(times))
            check_timestamps(name, times)
            last = last_of_duplicates(times)
            arrays[name] = (times[last], values[last] if len(last) else values[:0], last)
            self.report.total[name] = len(times)
        ticks, tick_values, tick_positions = arrays[self.reference]
        picks = {name: self.rule.choose_all(*arrays[name], ticks) for name in self.names[1:]}
        keep = np.ones(len(ticks), dtype=bool)
        if self.on_gap == "drop":
            for pick in picks.values():
                keep &= pick.valid
        every = bool(keep.all())

        def kept(column: np.ndarray) -> np.ndarray:
            return column if every else column[keep]

        self._columns = {"t": kept(ticks), self.reference: kept(tick_values)}
        self._columns[f"{self.reference}_dt"] = np.zeros(int(keep.sum()))
        self._columns[f"{self.reference}_valid"] = np.ones(int(keep.sum()), dtype=bool)
        self._zeros = {name: _zero_value(arrays[name][1]) for name in self.names[1:]}
        for name, pick in picks.items():
            self._columns[name] = kept(pick.values) if pick.values is not None else None
            self._columns[f"{name}_dt"] = kept(pick.dt)
            self._columns[f"{name}_valid"] = kept(pick.valid)
        self._account(self.reference, tick_positions[keep], tick_positions[~keep])
        for name, pick in picks.items():
            used = [column[keep][column[keep] >= 0] for column in pick.positions]
            dropped = [column[~keep][column[~keep] >= 0] for column in pick.positions]
            self._account(
                name,
                np.concatenate(used) if used else np.zeros(0, np.int64),
                np.concatenate(dropped) if dropped else np.zeros(0, np.int64),
            )
        self._length = int(keep.sum())

    def _account(self, name: str, used: np.ndarray, dropped: np.ndarray) -> None:
        marks = np.zeros(self.report.total[name], dtype=np.int8)
        marks[dropped] = 1
        marks[used] = 2
        self.report.used[name] = int(np.count_nonzero(marks == 2))
        self.report.dropped[name] = int(np.count_nonzero(marks == 1))
        self.report.skipped[name] = int(np.count_nonzero(marks == 0))

    def _sample(
        self,
        tick: float,
        tick_value: Any,
        arrays: Mapping[str, tuple[np.ndarray, Any, np.ndarray]],
        zeros: Mapping[str, Any],
    ) -> tuple[dict[str, Any] | None, dict[str, Choice]]:
        sample: dict[str, Any] = {
            "t": tick,
            self.reference: tick_value,
            f"{self.reference}_dt": 0.0,
            f"{self.reference}_valid": True,
        }
        choices: dict[str, Choice] = {}
        all_valid = True
        for name in self.names[1:]:
            times, values, positions = arrays[name]
            choice = self.rule.choose(times, values, positions, tick)
            choices[name] = choice
            all_valid &= choice.valid
            sample[name] = choice.value if choice.valid else zeros[name]
            sample[f"{name}_dt"] = choice.dt
            sample[f"{name}_valid"] = choice.valid
        if not all_valid and self.on_gap == "drop":
            return None, choices
        return sample, choices

    def __len__(self) -> int:
        if self.online:
            raise TypeError("an online TimeSync (iterator streams) has no length; iterate it")
        return self._length

    def __getitem__(self, index: int) -> dict[str, Any]:
        if self.online:
            raise TypeError("an online TimeSync (iterator streams) cannot be indexed; iterate it")
        row = int(index)
        if row < 0:
            row += self._length
        if not 0 <= row < self._length:
            raise IndexError(f"index {int(index)} out of range for TimeSync of {self._length} samples")
        sample: dict[str, Any] = {}
        for key, column in self._columns.items():
            if column is None:  # a stream with no records: nothing to give
                sample[key] = None
            elif key in self._zeros and not self._columns[f"{key}_valid"][row]:
                sample[key] = self._zeros[key]
            else:
                value = column[row]
                sample[key] = (
                    plain(value)
                    if key not in ("t",) and not key.endswith(("_dt", "_valid"))
                    else (bool(value) if key.endswith("_valid") else float(value))
                )
        return sample

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self.online:
            return self.stream()
        return (self[i] for i in range(self._length))

    # --- online --------------------------------------------------------------------------------

    def stream(self) -> Iterator[dict[str, Any]]:
        """Align iterator streams online, reading each once; the report fills in as it goes."""

        single_use = [
            name for name, stream in self._sources.items() if not callable(stream) and iter(stream) is stream
        ]
        if self._passes and single_use:
            raise TypeError(
                f"this online TimeSync was already iterated, and its stream(s) {single_use} are "
                "iterators that the first pass consumed; pass a callable that opens the stream again (e.g. "
                "lambda: read_imu(path)) to iterate more than once"
            )
        self._passes += 1

        def source(name: str) -> Any:
            stream = self._sources[name]
            if callable(stream):
                stream = stream()
            if isinstance(stream, tuple):
                stream = zip(*stream, strict=True)
            return reordered(name, stream, self.reorder_window) if self.reorder_window is not None else stream

        readers = {name: _Reader(name, source(name)) for name in self.names}
        for name in self.names:
            for counts in (self.report.total, self.report.used, self.report.skipped, self.report.dropped):
                counts[name] = 0
        reference = readers[self.reference]
        for name in self.names[1:]:
            readers[name].fill_until(-math.inf, -math.inf, False)  # the first record gives the zero value
        zeros = {
            name: _zero_value([readers[name].first_value]) if readers[name].read else None
            for name in self.names[1:]
        }
        reach = self.rule.tolerance if self.rule.policy == "nearest" else 0.0
        for position, tick, tick_value in reference.deduplicated(self.report):
            for name in self.names[1:]:
                readers[name].fill_until(tick + reach, tick, self.rule.policy == "interpolate")
            arrays = {name: readers[name].arrays() for name in self.names[1:]}
            sample, choices = self._sample(tick, plain(tick_value), arrays, zeros)
            keep = sample is not None
            reference.settle(position, keep, self.report)
            for name, choice in choices.items():
                readers[name].mark(choice.positions, keep)
                readers[name].evict_before(tick - self.rule.tolerance, self.report)
            if sample is not None:
                yield sample
        for name in self.names[1:]:
            readers[name].drain(self.report)


class _Reader:
    """One online stream: a bounded buffer of (position, time, value, mark) records."""

    def __init__(self, name: str, source: Any) -> None:
        self.name = name
        self.iterator = iter(source if not isinstance(source, tuple) else zip(*source, strict=True))
        self.buffer: deque[list[Any]] = deque()
        self.pending: list[Any] | None = None
        self.read = 0
        self.last_time = -math.inf
        self.done = False
        self.first_value: Any = None

    def _next(self) -> tuple[int, float, Any] | None:
        try:
            timestamp, value = next(self.iterator)
        except StopIteration:
            self.done = True
            return None
        time = float(timestamp)
        check_timestamps(
            self.name,
            np.array([self.last_time, time]) if self.read else np.array([time]),
            start=self.read - 1 if self.read else 0,
        )
        self.last_time = time
        position = self.read
        self.read += 1
        if self.first_value is None:
            self.first_value = value
        return position, time, value

    def deduplicated(self, report: SyncReport) -> Iterable[tuple[int, float, Any]]:
        """Records with the last of equal timestamps (reference stream)."""
        pending = self._next()
        while pending is not None:
            following = self._next()
            report.total[self.name] += 1
            if following is not None and following[1] == pending[1]:
                report.skipped[self.name] += 1
            else:
                yield pending
            pending = following

    def settle(self, position: int, kept: bool, report: SyncReport) -> None:
        if kept:
            report.used[self.name] += 1
        else:
            report.dropped[self.name] += 1

    def _advance(self) -> bool:
        """Move one finished record into the buffer (the last of its timestamp); False at the end."""
        if self.pending is None:
            record = self._next()
            if record is None:
                return False
            self.pending = [*record, 0, None]
        while True:
            record = self._next()
            if record is not None and record[1] == self.pending[1]:
                self.pending = [*record, 0, self.pending]  # the earlier duplicate will count as skipped
                continue
            self.buffer.append(self.pending)
            self.pending = [*record, 0, None] if record is not None else None
            return True

    def fill_until(self, limit: float, tick: float, need_after: bool) -> None:
        """Buffer records until one lies beyond ``limit`` (and, to interpolate, one at/after the tick)."""
        while (
            not self.buffer or self.buffer[-1][1] <= limit or (need_after and self.buffer[-1][1] < tick)
        ) and (self._advance()):
            pass

    def arrays(self) -> tuple[np.ndarray, list[Any], np.ndarray]:
        times = np.array([r[1] for r in self.buffer], dtype=np.float64)
        values = [r[2] for r in self.buffer]
        positions = np.array([r[0] for r in self.buffer], dtype=np.int64)
        return times, values, positions

    def mark(self, positions: tuple[int, ...], kept: bool) -> None:
        for record in self.buffer:
            if record[0] in positions:
                record[3] = max(record[3], 2 if kept else 1)

    def evict_before(self, horizon: float, report: SyncReport) -> None:
        """Drop records no later tick can use: older than ``horizon``, keeping the last one before it."""
        while len(self.buffer) >= 2 and self.buffer[1][1] < horizon:
            self._count(self.buffer.popleft(), report)

    def drain(self, report: SyncReport) -> None:
        while self._advance():
            pass
        while self.buffer:
            self._count(self.buffer.popleft(), report)

    def _count(self, record: list[Any], report: SyncReport) -> None:
        mark, replaced = record[3], record[4]
        report.total[self.name] += 1
        key = {2: "used", 1: "dropped", 0: "skipped"}[mark]
        getattr(report, key)[self.name] += 1
        while replaced is not None:  # earlier records with the same timestamp: skipped duplicates
            report.total[self.name] += 1
            report.skipped[self.name] += 1
            replaced = replaced[4]


def _as_values(name: str, values: Any, count: int) -> np.ndarray:
    try:
        array = np.asarray(values)
    except ValueError as exc:
        raise ValueError(f"stream {name!r}: values have mismatched shapes ({exc})") from exc
    if array.dtype == object and count and isinstance(values, list) and any(np.ndim(v) for v in values):
        raise ValueError(f"stream {name!r}: values have mismatched shapes")
    if len(array) != count:
        raise ValueError(f"stream {name!r}: {count} timestamps but {len(array)} values")
    return array


def reordered(name: str, records: Iterable[tuple[Any, Any]], window: int) -> Iterator[tuple[float, Any]]:
    """Put records back in time order through a heap of ``window`` records; a record that arrives
    more than ``window`` records late is a :class:`TimestampError` naming its position.

    Example:
        >>> list(reordered("imu", [(0.0, "a"), (0.2, "c"), (0.1, "b")], window=1))
        [(0.0, 'a'), (0.1, 'b'), (0.2, 'c')]
    """
    heap: list[tuple[float, int, Any]] = []
    emitted = -math.inf

    def pop() -> tuple[float, Any]:
        nonlocal emitted
        time, position, value = heapq.heappop(heap)
        if time < emitted:
            raise TimestampError(
                f"stream {name!r}: the record at position {position} ({time}) arrived more than "
                f"reorder_window={window} records late"
            )
        emitted = time
        return time, value

    for position, (timestamp, value) in enumerate(records):
        time = float(timestamp)
        if math.isnan(time):
            raise TimestampError(f"stream {name!r}: timestamp at position {position} is NaN")
        heapq.heappush(heap, (time, position, value))
        if len(heap) > window:
            yield pop()
    while heap:
        yield pop()


def plain(value: Any) -> Any:
    """A record value as the samples hold it: Python scalars, numpy arrays otherwise."""
    array = np.asarray(value)
    if array.dtype == object:
        return value
    return array.item() if array.ndim == 0 else array


def _zero_value(values: Any) -> Any:
    if len(values) == 0:
        return None
    first = np.asarray(values[0])
    if first.dtype.kind in "biuf":
        zero = np.zeros_like(first, dtype=np.float64 if first.dtype.kind == "f" else first.dtype)
        return zero.item() if zero.ndim == 0 else zero
    return None
