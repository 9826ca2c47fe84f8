"""Offline alignment: ``(timestamps, values)`` arrays aligned at once, read back one sample at a time.

Construction checks and deduplicates every stream (one comparison pass when timestamps strictly
increase), locates every tick in every stream and applies :meth:`Rule.align`, all vectorised.
Samples store no copies of the values: a sample reads the chosen records' values through the same
helpers as the online path, so both modes give identical values of identical types.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from torchloom.fusion.sync.clock import (
    FLOAT,
    Clock,
    check_order,
    check_range,
    kind_of_array,
    shared_clock,
    working_array,
)
from torchloom.fusion.sync.online import reordered
from torchloom.fusion.sync.report import SyncReport, count_chosen
from torchloom.fusion.sync.rule import FLOAT_EXACT, Alignment, Rule
from torchloom.fusion.sync.values import as_float, as_values, check_interpolable, mix, plain, zero_value


@dataclass
class _Column:
    """One stream's values (deduplicated) and every tick's choice among them."""

    name: str
    values: np.ndarray
    alignment: Alignment
    zero: Any


class OfflineAlignment:
    """Every stream aligned to the reference's ticks; ``sample(row)`` builds one sample.

    Example:
        >>> from torchloom.fusion.sync.report import SyncReport
        >>> streams = {"cam": (np.array([0, 10]), np.array([7, 8])), "imu": (np.array([1, 9]), np.zeros(2))}
        >>> aligned = OfflineAlignment(streams, "cam", lambda clock: Rule("nearest", 1, None, exact=True),
        ...                            drop=True, interpolate=False, reorder_window=None, report=SyncReport())
        >>> len(aligned), aligned.sample(1)
        (2, {'t': 10, 'cam': 8, 'cam_dt': 0, 'cam_valid': True, 'imu': 0.0, 'imu_dt': -1, 'imu_valid': True})
    """

    def __init__(
        self,
        streams: Mapping[str, tuple[Any, Any]],
        reference: str,
        make_rule: Callable[[Clock], Rule],
        *,
        drop: bool,
        interpolate: bool,
        reorder_window: int | None,
        report: SyncReport,
    ) -> None:
        raw = {}
        for name, (timestamps, values) in streams.items():
            stamps = np.asarray(timestamps)
            raw[name] = (stamps, as_values(name, values, len(stamps)))
        self.clock = clock = shared_clock(
            {name: kind_of_array(name, stamps) for name, (stamps, _) in raw.items() if len(stamps)}
        )
        rule = make_rule(clock)
        prepared: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        zeros: dict[str, Any] = {}
        for name, (stamps, values) in raw.items():
            times = working_array(name, stamps, clock)
            if reorder_window is not None and len(times):
                records = zip(times.tolist(), range(len(times)), strict=True)
                order = [position for _, position in reordered(name, records, reorder_window, clock.describe)]
                times, values = times[order], values[order]
            if name != reference:
                if interpolate and len(values):
                    check_interpolable(name, values)
                zeros[name] = zero_value(values[0], interpolate=interpolate) if len(values) else None
            keep = check_order(name, times, clock)
            prepared[name] = (times, values) if keep is None else (times[keep], values[keep])
        present = {name: times for name, (times, _) in prepared.items() if len(times)}
        check_range({n: t[0] for n, t in present.items()}, {n: t[-1] for n, t in present.items()}, clock)
        as_floats = _exact_floats(clock, list(present.values()))
        self.ticks, self.tick_values = prepared[reference]
        float_ticks = as_floats(self.ticks) if as_floats is not None else None
        self.columns: list[_Column] = []
        for name, (times, values) in prepared.items():
            if name != reference:
                float_times = as_floats(times) if as_floats is not None else None
                alignment = rule.align(times, self.ticks, float_times, float_ticks)
                self.columns.append(_Column(name, values, alignment, zeros[name]))
        keep_mask = None
        if drop and self.columns:
            keep_mask = np.logical_and.reduce([column.alignment.valid for column in self.columns])
            if keep_mask.all():
                keep_mask = None
        self.rows = None if keep_mask is None else np.flatnonzero(keep_mask)
        self.length = len(self.ticks) if self.rows is None else len(self.rows)
        self.reference = reference
        self._account(report, raw, keep_mask)

    def _account(
        self, report: SyncReport, raw: Mapping[str, tuple[np.ndarray, np.ndarray]], keep: np.ndarray | None
    ) -> None:
        report.add(
            self.reference,
            total=len(raw[self.reference][0]),
            used=self.length,
            dropped=len(self.ticks) - self.length,
        )
        for column in self.columns:
            dropped = column.alignment.chosen(~keep) if keep is not None else []
            used, dropped_count = count_chosen(len(column.values), column.alignment.chosen(keep), dropped)
            report.add(column.name, total=len(raw[column.name][0]), used=used, dropped=dropped_count)

    def __len__(self) -> int:
        return self.length

    def sample(self, row: int) -> dict[str, Any]:
        """The ``row``-th aligned sample (``0 <= row < len(self)``)."""
        tick = row if self.rows is None else int(self.rows[row])
        clock, reference = self.clock, self.reference
        sample: dict[str, Any] = {
            "t": clock.time(self.ticks[tick].item()),
            reference: plain(self.tick_values[tick]),
            f"{reference}_dt": clock.offset(clock.zero),
            f"{reference}_valid": True,
        }
        for column in self.columns:
            alignment, name = column.alignment, column.name
            if alignment.missing is not None and alignment.missing[tick]:
                sample[name], sample[f"{name}_dt"], sample[f"{name}_valid"] = (
                    column.zero,
                    clock.missing_offset,
                    False,
                )
                continue
            valid = bool(alignment.valid[tick])
            first = alignment.first[tick]
            if not valid:
                value = column.zero
            elif alignment.second is None:
                value = plain(column.values[first])
            elif alignment.second[tick] < 0:  # a record exactly at the tick, taken alone
                value = as_float(column.values[first])
            else:
                later = column.values[alignment.second[tick]]
                value = mix(column.values[first], later, float(alignment.weight[tick]))
            sample[name] = value
            sample[f"{name}_dt"] = clock.offset(alignment.dt[tick].item())
            sample[f"{name}_valid"] = valid
        return sample


def _exact_floats(clock: Clock, streams: Sequence[np.ndarray]) -> Callable[[np.ndarray], np.ndarray] | None:
    """A function giving exact float64 copies of working times (to locate ticks with ``np.interp``),
    or ``None`` when integer times span too much to be exact in float64."""
    if clock.kind == FLOAT:
        return lambda times: times
    if not streams:
        return None
    origin = min(int(times[0]) for times in streams)
    if max(int(times[-1]) for times in streams) - origin >= FLOAT_EXACT:
        return None
    return lambda times: (times - origin).astype(np.float64)
