"""The kind of time a TimeSync's streams share, kept exact from input to output.

Timestamps are floats, integers (any integer dtype; e.g. nanoseconds since the epoch) or numpy
``datetime64`` (any unit). Alignment works on exact numbers of the same kind — float64 for float
timestamps; int64 (Python ints online) for integers, and for ``datetime64`` counts of the finest unit
among the streams — so no integer time is ever rounded through float64 (which holds integers
exactly only up to 2**53: nanosecond epochs near 1.7e18 would fall on 256 ns steps). Offsets
``dt`` come out in the input's kind: a float, an int, or a ``numpy.timedelta64`` of that unit.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from torchloom.errors import ConfigError, TimestampError, UsageError

FLOAT, INT, DATETIME = "float", "int", "datetime"
INT64_MAX = 2**63 - 1
NAT = int(np.iinfo(np.int64).min)
Span = float | int | np.integer | np.floating | np.timedelta64 | datetime.timedelta
Number = float | int


@dataclass(frozen=True)
class Clock:
    """The time kind shared by every stream of one TimeSync and its conversions.

    ``kind`` is ``"float"``, ``"int"`` or ``"datetime"``; ``unit`` is the ``datetime64`` unit
    (e.g. ``"ns"``, ``"10ms"``) of a datetime clock. Working numbers are float64 for a float clock
    and int64 counts (of the unit, for datetime) otherwise.

    Example:
        >>> clock = Clock(DATETIME, "ms")
        >>> clock.time(1500), clock.offset(-20), clock.span(np.timedelta64(2, "s"), "tolerance")
        (np.datetime64('1970-01-01T00:00:01.500'), np.timedelta64(-20,'ms'), 2000)
    """

    kind: str
    unit: str = ""

    @property
    def exact(self) -> bool:
        """Whether working numbers are integers (int and datetime clocks)."""
        return self.kind != FLOAT

    @property
    def dtype(self) -> np.dtype[Any]:
        """The dtype of working arrays."""
        return np.dtype(np.float64) if self.kind == FLOAT else np.dtype(np.int64)

    @property
    def zero(self) -> Number:
        """A zero offset in working numbers."""
        return 0.0 if self.kind == FLOAT else 0

    @property
    def numpy_unit(self) -> Any:
        """``unit`` for numpy's constructors (whose type stubs list only literal unit names)."""
        return self.unit

    def time(self, number: Number) -> Any:
        """A sample's ``"t"`` from a working number."""
        return np.datetime64(int(number), self.numpy_unit) if self.kind == DATETIME else number

    def offset(self, number: Number) -> Any:
        """A sample's ``<name>_dt`` from a working number."""
        return np.timedelta64(int(number), self.numpy_unit) if self.kind == DATETIME else number

    @property
    def missing_offset(self) -> Any:
        """``<name>_dt`` when no record could be chosen: NaN, ``None`` (int) or NaT."""
        if self.kind == DATETIME:
            return np.timedelta64("NaT", self.numpy_unit)
        return math.nan if self.kind == FLOAT else None

    def describe(self, number: Number) -> str:
        """A working number as the user wrote it, for messages."""
        return str(self.time(number))

    def span(self, value: Span, what: str) -> Number:
        """``tolerance`` or ``max_gap`` (named ``what``) in working numbers.

        Float clocks take any number. Integer clocks take an integer count of the timestamps'
        unit (a float only when whole, e.g. ``20e6``; ``inf`` means unbounded). Datetime clocks
        take a ``timedelta64`` (or ``datetime.timedelta``), floored to the clock's unit — exact,
        since offsets are whole units — or an integer count of the unit.
        """
        check_span(value, what)
        if self.kind == FLOAT:
            if isinstance(value, (np.timedelta64, datetime.timedelta)):
                raise ConfigError(
                    f"{what}={value!r} is a time delta but the timestamps are plain floats; give {what} "
                    "as a number in the timestamps' unit"
                )
            return float(value)
        if isinstance(value, (np.timedelta64, datetime.timedelta)):
            if self.kind == INT:
                raise ConfigError(
                    f"{what}={value!r} is a time delta but the timestamps are plain integers, which carry "
                    f"no unit; give {what} as an integer count of their unit (e.g. 20_000_000 for 20 ms of "
                    "nanoseconds), or give datetime64 timestamps"
                )
            try:
                count = int(np.timedelta64(value) // np.timedelta64(1, self.numpy_unit))
            except TypeError as exc:  # months and years have no fixed length in smaller units
                raise ConfigError(
                    f"{what}={value!r} cannot be converted to the timestamps' unit {self.unit!r} ({exc}); "
                    f"give {what} in a unit that converts to it, or as an integer count of {self.unit}"
                ) from exc
            return min(count, INT64_MAX)
        if isinstance(value, (float, np.floating)):
            if math.isinf(value):
                return INT64_MAX
            if not float(value).is_integer():
                units = f"counts of {self.unit}" if self.kind == DATETIME else "integer counts of their unit"
                raise ConfigError(
                    f"{what}={value!r} is not a whole number, but the timestamps are {units}; give {what} "
                    "as an integer count (e.g. 20_000_000 for 20 ms of nanoseconds)"
                    + (" or as a numpy.timedelta64" if self.kind == DATETIME else "")
                )
        return min(int(value), INT64_MAX)


def check_span(value: Any, what: str) -> None:
    """Reject a ``tolerance``/``max_gap`` that no clock could take (wrong type, negative, NaN)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating, np.timedelta64, datetime.timedelta)
    ):
        raise UsageError(f"{what} must be a number or a timedelta, got {value!r}")
    if isinstance(value, np.timedelta64):
        if np.isnat(value):
            raise ConfigError(f"{what} is NaT; give a duration")
        negative = bool(value.astype(np.int64) < 0)
    elif isinstance(value, datetime.timedelta):
        negative = value < datetime.timedelta(0)
    else:
        negative = not value >= 0  # catches NaN too
    if negative:
        raise ConfigError(f"{what} must be >= 0, got {value!r}")


def kind_of_array(name: str, timestamps: np.ndarray) -> tuple[str, str]:
    """``(kind, datetime unit)`` of a stream's timestamp array; names the stream when it has none."""
    dtype = timestamps.dtype
    if timestamps.ndim != 1:
        raise TimestampError(
            f"stream {name!r}: timestamps have shape {timestamps.shape}; give one timestamp per record"
        )
    if dtype.kind == "f":
        return FLOAT, ""
    if dtype.kind in "iu":
        return INT, ""
    if dtype.kind == "M":
        return DATETIME, _unit(np.datetime_data(dtype))
    raise TimestampError(
        f"stream {name!r}: timestamps of dtype {dtype} cannot be aligned; give floats, integers or "
        "numpy datetime64 values"
    )


def kind_of_scalar(name: str, timestamp: Any, position: int) -> tuple[str, str]:
    """``(kind, datetime unit)`` of one online timestamp."""
    if isinstance(timestamp, (float, np.floating)):
        return FLOAT, ""
    if isinstance(timestamp, (int, np.integer)) and not isinstance(timestamp, bool):
        return INT, ""
    if isinstance(timestamp, np.datetime64):
        if np.isnat(timestamp):
            raise TimestampError(
                f"stream {name!r}: timestamp at position {position} is NaT; drop or repair it"
            )
        return DATETIME, _unit(np.datetime_data(timestamp.dtype))
    raise TimestampError(
        f"stream {name!r}: timestamp at position {position} is a {type(timestamp).__name__} ({timestamp!r}); "
        "give floats, integers or numpy.datetime64 values"
    )


def _unit(data: tuple[str, int]) -> str:
    unit, count = data
    return unit if count == 1 else f"{count}{unit}"


def shared_clock(kinds: Mapping[str, tuple[str, str]]) -> Clock:
    """The clock of streams whose ``(kind, unit)`` are ``kinds`` (empty streams left out): one kind
    for all, datetime units merged into the finest; a :class:`TimestampError` names mixed kinds."""
    by_kind: dict[str, list[str]] = {}
    for name, (kind, _) in kinds.items():
        by_kind.setdefault(kind, []).append(name)
    if len(by_kind) > 1:
        listed = "; ".join(f"{kind}: {names}" for kind, names in by_kind.items())
        raise TimestampError(
            f"streams have timestamps of different kinds ({listed}); give every stream the same kind "
            "(all floats, all integers in one unit, or all datetime64)"
        )
    if not by_kind:
        return Clock(FLOAT)
    (kind,) = by_kind
    if kind != DATETIME:
        return Clock(kind)
    finest = np.result_type(
        *(np.dtype("M8" if unit == "generic" else f"M8[{unit}]") for _, unit in kinds.values())
    )
    unit = _unit(np.datetime_data(finest))
    if unit == "generic":
        raise TimestampError("datetime64 timestamps without a unit (only NaT has none); give real times")
    return Clock(DATETIME, unit)


def working_array(name: str, timestamps: np.ndarray, clock: Clock) -> np.ndarray:
    """A stream's timestamps as working numbers of ``clock`` (exact; no rounding, no wrap)."""
    if len(timestamps) == 0:
        return np.zeros(0, dtype=clock.dtype)
    if clock.kind == FLOAT:
        return np.asarray(timestamps, dtype=np.float64)
    if clock.kind == INT:
        if timestamps.dtype.kind == "u" and timestamps.dtype.itemsize == 8 and timestamps.max() > INT64_MAX:
            position = int(np.argmax(timestamps > INT64_MAX))
            raise TimestampError(
                f"stream {name!r}: timestamp at position {position} ({timestamps[position]}) exceeds "
                f"the int64 range; subtract a common origin from every stream's timestamps"
            )
        return np.asarray(timestamps, dtype=np.int64)
    target = np.dtype(f"M8[{clock.unit}]")
    converted = timestamps.astype(target, copy=False)
    if timestamps.dtype != target:
        back = converted.astype(timestamps.dtype)
        lost = np.flatnonzero((back != timestamps) & ~np.isnat(timestamps))
        if len(lost):
            raise outside_unit(name, int(lost[0]), timestamps[lost[0]], clock)
    return converted.view(np.int64)


def check_order(name: str, times: np.ndarray, clock: Clock) -> np.ndarray | None:
    """Check a stream's working times; ``None`` when strictly increasing, else the positions kept
    when equal timestamps keep only their last record. Raises for NaN, NaT, infinity or disorder."""
    if len(times) == 0:
        return None
    if _usable(times[0], clock) and _usable(times[-1], clock) and bool(np.all(times[1:] > times[:-1])):
        return None  # strictly increasing between usable ends (NaN compares false): all usable
    if clock.kind == FLOAT:
        bad = np.flatnonzero(~np.isfinite(times))
    else:
        bad = np.flatnonzero(times == NAT) if clock.kind == DATETIME else np.zeros(0, dtype=np.intp)
    if len(bad):
        raise unusable_time(name, int(bad[0]), times[bad[0]], clock)
    backwards = np.flatnonzero(times[1:] < times[:-1])
    if len(backwards):
        raise out_of_order(
            name,
            int(backwards[0]) + 1,
            clock.describe(times[backwards[0] + 1]),
            clock.describe(times[backwards[0]]),
        )
    keep = np.ones(len(times), dtype=bool)
    keep[:-1] = times[1:] != times[:-1]
    return np.flatnonzero(keep)


def _usable(first: Any, clock: Clock) -> bool:
    if clock.kind == FLOAT:
        return bool(np.isfinite(first))
    return clock.kind != DATETIME or int(first) != NAT


def outside_unit(name: str, position: int, timestamp: Any, clock: Clock) -> TimestampError:
    """The error for a datetime64 that the clock's (finer) unit cannot hold."""
    return TimestampError(
        f"stream {name!r}: timestamp at position {position} ({timestamp}) does not fit in "
        f"datetime64[{clock.unit}], the finest unit among the streams; give every stream the same "
        "unit, or times within its range"
    )


def unusable_time(name: str, position: int, time: Any, clock: Clock) -> TimestampError:
    """The error for a NaN, NaT or infinite timestamp."""
    what = "NaT" if clock.kind == DATETIME else ("NaN" if math.isnan(float(time)) else f"{float(time)}")
    return TimestampError(
        f"stream {name!r}: timestamp at position {position} is {what}; every timestamp must be a finite "
        "time: drop or repair that record"
    )


def out_of_order(name: str, position: int, time: str, before: str) -> TimestampError:
    """The error for a timestamp earlier than the one before it."""
    return TimestampError(
        f"stream {name!r}: timestamp at position {position} ({time}) is earlier than the one before it "
        f"({before}); sort the stream, or pass reorder_window=k if records arrive at most k late"
    )


def check_range(firsts: Mapping[str, int], lasts: Mapping[str, int], clock: Clock) -> None:
    """Integer clocks: all differences between times must fit in int64 (no silent wrap)."""
    if not firsts or not clock.exact:
        return
    low = min(firsts, key=lambda name: firsts[name])
    high = max(lasts, key=lambda name: lasts[name])
    if int(lasts[high]) - int(firsts[low]) > INT64_MAX:
        raise TimestampError(
            f"streams {low!r} (from {clock.describe(firsts[low])}) and {high!r} (to "
            f"{clock.describe(lasts[high])}) span more than 2**63 - 1 units, so their differences would "
            "overflow int64; subtract a common origin from the timestamps"
        )
