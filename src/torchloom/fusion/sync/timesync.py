"""TimeSync: align streams recorded at different rates to a reference clock, exactly."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from torch.utils.data import Dataset

from torchloom.datasets.options import takes_no_sample_options
from torchloom.errors import ConfigError, SampleIndexError, UsageError, check_choice
from torchloom.fusion.sync.clock import FLOAT, Clock, Span, check_span, kind_of_scalar, shared_clock
from torchloom.fusion.sync.offline import OfflineAlignment
from torchloom.fusion.sync.online import (
    Reader,
    aligned,
    converted,
    converter,
    deduplicated,
    open_source,
    reordered,
)
from torchloom.fusion.sync.report import SyncReport
from torchloom.fusion.sync.rule import POLICIES, Policy, Rule
from torchloom.fusion.sync.values import check_interpolable, zero_value

GAP_RULES = ("drop", "mask")


class TimeSync(Dataset[dict[str, Any]]):
    """Align ``streams`` to the timestamps of the ``reference`` stream.

    For every reference tick, every other stream gives one value chosen by ``policy``:
    ``"nearest"`` (the closest record, the earlier on a tie; valid when ``|dt| <= tolerance``),
    ``"previous"`` (the last record at or before the tick; valid when ``tick - t <= tolerance``)
    or ``"interpolate"`` (linear between the records around the tick, float64; valid when both are
    within ``tolerance`` and, with ``max_gap``, at most ``max_gap`` apart; a record exactly at the
    tick is taken alone). Each sample holds ``"t"`` (the tick), each stream's value under its name,
    ``<name>_dt`` (record time minus tick; for interpolation the larger distance to the two records)
    and ``<name>_valid``. ``on_gap="drop"`` drops ticks where a stream is invalid; ``"mask"`` keeps
    them with a zero value (``None`` for non-numeric values) and ``valid=False``.

    **Time stays exact.** Timestamps are floats, integers of any dtype (say nanoseconds since the
    epoch), or ``datetime64`` of any unit (online: Python/numpy ints and floats, ``numpy.datetime64``
    scalars; a stream's first record sets its kind, and an int later in a float stream is taken as
    a float, as numpy would); all streams must be of one kind (datetime64 units merge into the
    finest, exactly). Integer and datetime times are never rounded through float64: every
    comparison and offset is exact, and interpolation weights are float64 divisions of exact
    differences. ``"t"`` keeps the input's kind and ``dt`` is in its unit — a float, an int, or a
    ``numpy.timedelta64``; where a stream gave no record (an empty stream, a tick before its first
    record...) ``dt`` is NaN, ``None`` (int) or NaT. ``tolerance`` and ``max_gap`` are in the
    timestamps' unit: any number for floats; whole numbers for integers (``20e6`` is fine, ``0.02``
    is an error, as it reads as seconds); a ``numpy.timedelta64`` (or an integer count of the unit)
    for datetime64. Offline, integer times must span less than 2**63 units (checked, so int64
    differences never wrap); online, Python integers have no bound.

    **Nothing lost silently**: ``report`` counts every input record as used (taken by a kept
    tick — with ``on_gap="mask"`` also when it was too far away and its value masked), dropped
    (taken only by dropped ticks) or skipped (between ticks, or replaced by a later record with
    the same timestamp: equal timestamps keep their last record). Timestamps must not decrease and
    must be finite (no NaN, NaT or infinity): an error names the stream and the position — unless
    ``reorder_window=k`` is given, which sorts records arriving at most ``k`` records late (a
    bounded heap, in both modes).

    **Offline or online, the same samples.** ``(timestamps, values)`` array pairs are aligned at
    construction, vectorised, and the TimeSync is a map-style dataset. Iterables of
    ``(timestamp, value)`` records (or callables returning one, to iterate more than once) are
    aligned online by :meth:`stream`, reading each once with two records held per stream.

    Args:
        streams: name -> ``(timestamps, values)`` arrays, or an iterable of ``(timestamp, value)``
            records, or a callable returning one.
        reference: the name of the stream whose timestamps are the output clock.
        tolerance: the largest offset at which a record still counts, in the timestamps' unit.
        policy: ``"nearest"``, ``"previous"`` or ``"interpolate"``.
        on_gap: ``"drop"`` ticks where a stream has no valid value, or ``"mask"`` them.
        max_gap: with ``"interpolate"``, the longest span between the two records interpolated.
        reorder_window: sort records arriving up to this many records late.

    Example:
        >>> import numpy as np
        >>> ns = 1_700_000_000_000_000_000  # nanoseconds since the epoch: beyond float64's exact range
        >>> camera = (np.array([ns, ns + 100]), np.array([10, 11]))
        >>> imu = (np.array([ns - 30, ns + 60, ns + 90]), np.array([1.0, 2.0, 3.0]))
        >>> sync = TimeSync({"camera": camera, "imu": imu}, reference="camera", tolerance=50)
        >>> [(s["camera"], s["imu"], s["imu_dt"]) for s in sync]
        [(10, 1.0, -30), (11, 3.0, -10)]
        >>> sync.report.used["imu"], sync.report.skipped["imu"]
        (2, 1)
    """

    @takes_no_sample_options(
        "its samples are the streams' values, aligned at construction or read once by stream(): "
        "nothing is decoded or can fail per sample"
    )
    def __init__(
        self,
        streams: Mapping[str, Any],
        *,
        reference: str,
        tolerance: Span,
        policy: Policy = "nearest",
        on_gap: Literal["drop", "mask"] = "drop",
        max_gap: Span | None = None,
        reorder_window: int | None = None,
    ) -> None:
        check_choice("policy", policy, POLICIES)
        check_choice("on_gap", on_gap, GAP_RULES)
        if reference not in streams:
            raise ConfigError(f"reference={reference!r} is not one of the streams {list(streams)}")
        if reorder_window is not None and reorder_window < 0:
            raise ConfigError(f"reorder_window must be >= 0, got {reorder_window}")
        check_span(tolerance, "tolerance")
        if max_gap is not None:
            check_span(max_gap, "max_gap")
        self.reference, self.policy, self.on_gap = reference, policy, on_gap
        self.tolerance, self.max_gap, self.reorder_window = tolerance, max_gap, reorder_window
        self.names = [reference] + [name for name in streams if name != reference]
        self.report = SyncReport()
        self.clock: Clock | None = None  # known once timestamps are seen
        self._sources = dict(streams)
        self.online = not all(isinstance(s, tuple) and len(s) == 2 for s in streams.values())
        self._passes = 0
        self._offline: OfflineAlignment | None = None
        if not self.online:
            self._offline = OfflineAlignment(
                self._sources,
                reference,
                self._rule,
                drop=on_gap == "drop",
                interpolate=policy == "interpolate",
                reorder_window=reorder_window,
                report=self.report,
            )
            self.clock = self._offline.clock

    def _rule(self, clock: Clock) -> Rule:
        max_gap = None if self.max_gap is None else clock.span(self.max_gap, "max_gap")
        return Rule(self.policy, clock.span(self.tolerance, "tolerance"), max_gap, exact=clock.exact)

    # --- offline -------------------------------------------------------------------------------

    def __len__(self) -> int:
        if self._offline is None:
            raise UsageError("an online TimeSync (iterator streams) has no length; iterate it")
        return len(self._offline)

    def __getitem__(self, index: int) -> dict[str, Any]:
        if self._offline is None:
            raise UsageError("an online TimeSync (iterator streams) cannot be indexed; iterate it")
        length = len(self._offline)
        row = int(index)
        if row < 0:
            row += length
        if not 0 <= row < length:
            raise SampleIndexError(f"index {int(index)} out of range for TimeSync of {length} samples")
        return self._offline.sample(row)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self._offline is None:
            return self.stream()
        return map(self._offline.sample, range(len(self._offline)))

    # --- online --------------------------------------------------------------------------------

    def stream(self) -> Iterator[dict[str, Any]]:
        """Align the streams online, reading each once; ``report`` is complete when the pass ends."""
        single_use = [
            name for name, stream in self._sources.items() if not callable(stream) and iter(stream) is stream
        ]
        if self._passes and single_use:
            raise UsageError(
                f"this online TimeSync was already iterated, and its stream(s) {single_use} are "
                "iterators that the first pass consumed; pass a callable that opens the stream again (e.g. "
                "lambda: read_imu(path)) to iterate more than once"
            )
        self._passes += 1
        sources = {name: open_source(self._sources[name]) for name in self.names}
        firsts = {name: next(source, None) for name, source in sources.items()}
        kinds = {
            name: kind_of_scalar(name, _pair(name, first)[0], 0)
            for name, first in firsts.items()
            if first is not None
        }
        self.clock = clock = shared_clock(kinds)
        rule = self._rule(clock)
        interpolate = self.policy == "interpolate"
        readers = []
        for name in self.names:
            first = firsts[name]
            records: Any = sources[name] if first is None else itertools.chain([first], sources[name])
            fast, convert = converter(name, clock)
            if self.reorder_window is not None:
                records = reordered(
                    name, converted(records, fast, convert), self.reorder_window, clock.describe
                )
                fast = float if clock.kind == FLOAT else int
            zero = None
            if name != self.reference and first is not None:
                if interpolate:
                    check_interpolable(name, first[1])
                zero = zero_value(first[1], interpolate=interpolate)
            readers.append(Reader(name, deduplicated(name, records, fast, convert, clock), zero))
        yield from aligned(
            readers[0],
            readers[1:],
            rule,
            clock,
            drop=self.on_gap == "drop",
            interpolate=interpolate,
            report=self.report,
        )


def _pair(name: str, record: Any) -> tuple[Any, Any]:
    try:
        timestamp, value = record
    except (TypeError, ValueError) as exc:
        raise UsageError(
            f"stream {name!r}: records must be (timestamp, value) pairs, got {record!r}"
        ) from exc
    return timestamp, value
