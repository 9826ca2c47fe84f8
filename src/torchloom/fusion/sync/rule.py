"""The choice rule: which record of a stream each reference tick takes, its offset and validity.

One rule, written twice side by side: :meth:`Rule.align` for all ticks at once over arrays
(offline) and :meth:`Rule.choose` for one tick between two records (online). Both see the same
two candidates — the last record at or before the tick and the first one after it — and compute
with the same operations on the same exact numbers (float64, or integers for integer and
datetime64 clocks), so both modes give identical results. With ``tolerance`` and ``max_gap`` in
the clock's working numbers:

- ``"nearest"``: the closer candidate (on a tie, the earlier one); valid when ``|dt| <= tolerance``;
- ``"previous"``: the record at or before the tick; valid when ``-dt <= tolerance``;
- ``"interpolate"``: a record exactly at the tick alone (valid), else both candidates, weighted
  linearly; valid when both are within ``tolerance`` (``dt`` is the larger distance) and, with
  ``max_gap``, at most ``max_gap`` apart. Weights are float64 computed from exact differences.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

Policy = Literal["nearest", "previous", "interpolate"]
POLICIES = ("nearest", "previous", "interpolate")
NONE, BEFORE, AFTER, BOTH = 0, 1, 2, 3  # what one tick takes (online): nothing, a candidate, both
FLOAT_EXACT = 2**53  # integers below this convert to float64 exactly


@dataclass
class Alignment:
    """Every tick's choice in one stream (indices into the stream's deduplicated records).

    ``first`` is the chosen record (for ``"interpolate"``, the earlier one); ``second`` the later
    interpolated one, -1 where a record exactly at the tick was taken alone; ``weight`` the later
    one's weight. ``missing`` marks ticks that took no record (``None``: every tick took one);
    there ``first``, ``dt`` and ``weight`` are meaningless and ``valid`` is False.

    Example:
        >>> rule = Rule("previous", 1, None, exact=True)
        >>> alignment = rule.align(np.array([10]), np.array([5, 10]), None, None)
        >>> alignment.missing.tolist(), alignment.valid.tolist(), alignment.chosen(None)[0].tolist()
        ([True, False], [False, True], [0])
    """

    first: np.ndarray
    dt: np.ndarray
    valid: np.ndarray
    missing: np.ndarray | None = None
    second: np.ndarray | None = None
    weight: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def chosen(self, rows: np.ndarray | None) -> list[np.ndarray]:
        """Indices of the records taken by the ticks ``rows`` (a mask; ``None``: every tick)."""
        taken = None if self.missing is None else ~self.missing
        if rows is not None:
            taken = rows if taken is None else rows & taken
        out = [self.first if taken is None else self.first[taken]]
        if self.second is not None:
            second = self.second if rows is None else self.second[rows]
            out.append(second[second >= 0])
        return out


class Rule:
    """The choice rule of one TimeSync (``tolerance``/``max_gap`` in the clock's working numbers).

    Example:
        >>> rule = Rule("nearest", tolerance=2, max_gap=None, exact=True)
        >>> times, ticks = np.array([0, 10, 20]), np.array([4, 5, 6, 19])
        >>> alignment = rule.align(times, ticks, None, None)
        >>> alignment.first.tolist(), alignment.dt.tolist(), alignment.valid.tolist()
        ([0, 0, 1, 2], [-4, -5, 4, 1], [False, False, False, True])
        >>> rule.choose(0, 10, 5)  # online: the same choice between two candidate times
        (1, -5, False, 0.0)
    """

    def __init__(
        self, policy: Policy, tolerance: float | int, max_gap: float | int | None, *, exact: bool
    ) -> None:
        self.policy, self.tolerance, self.max_gap, self.exact = policy, tolerance, max_gap, exact
        self.zero: float | int = 0 if exact else 0.0
        self.choose = {"nearest": self._nearest, "previous": self._previous}.get(policy, self._interpolate)

    # --- all ticks at once (offline) ------------------------------------------------------------

    def align(
        self,
        times: np.ndarray,
        ticks: np.ndarray,
        float_times: np.ndarray | None,
        float_ticks: np.ndarray | None,
    ) -> Alignment:
        """Choose for every tick. ``times`` are strictly increasing working numbers; ``ticks`` are
        non-decreasing; ``float_times``/``float_ticks`` are the same values as exact float64 (to
        locate ticks quickly), or ``None``."""
        count, size = len(ticks), len(times)
        if size == 0:
            return Alignment(
                np.zeros(count, np.intp),
                np.zeros(count, times.dtype),
                np.zeros(count, bool),
                missing=np.ones(count, bool),
            )
        last = last_at_or_before(times, ticks, float_times, float_ticks)
        after = last + 1
        # Ticks are sorted: those before the first record are a head, those at or after the last a
        # tail; there the clipped gathers below read a stand-in, which the rule then sets aside.
        head, tail = int(np.searchsorted(last, 0)), int(np.searchsorted(last, size - 1))
        low = np.take(times, last, mode="clip")
        high = np.take(times, after, mode="clip")
        if self.policy == "nearest":
            to_before = np.subtract(ticks, low, out=low)
            to_after = np.subtract(high, ticks, out=high)
            take_before = to_before <= to_after  # a tie goes to the earlier record
            take_before[:head] = False
            take_before[tail:] = True
            first = after - take_before  # no np.where: its unpredictable branches cost more than arithmetic
            dt = np.take(times, first)
            np.subtract(dt, ticks, out=dt)
            return Alignment(first, dt, np.abs(dt, out=to_before) <= self.tolerance)
        missing = None
        if head or (self.policy == "interpolate" and tail < count):
            missing = np.zeros(count, dtype=bool)
            missing[:head] = True
        if self.policy == "previous":
            dt = np.subtract(low, ticks, out=low)
            valid = dt >= -self.tolerance  # the same as -dt <= tolerance, exactly
            valid[:head] = False
            return Alignment(np.maximum(last, 0) if head else last, dt, valid, missing)
        exact = low == ticks
        both = ~exact
        both[:head] = False
        both[tail:] = False
        span = high - low
        dt = np.maximum(ticks - low, high - ticks)
        dt[exact] = 0
        weight = np.zeros(count)
        np.divide((ticks - low).astype(np.float64), span.astype(np.float64), out=weight, where=both)
        valid = both & (dt <= self.tolerance)
        if self.max_gap is not None:
            valid &= span <= self.max_gap
        valid |= exact
        if missing is not None:
            missing[tail:] = ~exact[tail:]
        return Alignment(np.maximum(last, 0), dt, valid, missing, np.where(both, after, -1), weight)

    # --- one tick (online) -----------------------------------------------------------------------
    # ``before``/``after``: the candidates' times, -inf / +inf where there is none. Returns
    # ``(taken, dt, valid, weight)``: NONE, BEFORE, AFTER or BOTH; ``weight`` counts with BOTH only.

    def _nearest(self, before: Any, after: Any, tick: Any) -> tuple[int, Any, bool, float]:
        to_before = tick - before
        to_after = after - tick
        if to_before <= to_after:
            if before == -math.inf:
                return NONE, None, False, 0.0
            return BEFORE, before - tick, abs(to_before) <= self.tolerance, 0.0  # as offline: t - tick
        return AFTER, to_after, abs(to_after) <= self.tolerance, 0.0

    def _previous(self, before: Any, after: Any, tick: Any) -> tuple[int, Any, bool, float]:
        if before == -math.inf:
            return NONE, None, False, 0.0
        dt = before - tick
        return BEFORE, dt, -dt <= self.tolerance, 0.0

    def _interpolate(self, before: Any, after: Any, tick: Any) -> tuple[int, Any, bool, float]:
        if before == tick:
            return BEFORE, self.zero, True, 0.0
        if before == -math.inf or after == math.inf:
            return NONE, None, False, 0.0
        span = after - before
        dt = max(tick - before, after - tick)
        valid = dt <= self.tolerance and (self.max_gap is None or span <= self.max_gap)
        weight = float(tick - before) / float(span) if self.exact else (tick - before) / span
        return BOTH, dt, valid, weight


def last_at_or_before(
    times: np.ndarray, ticks: np.ndarray, float_times: np.ndarray | None, float_ticks: np.ndarray | None
) -> np.ndarray:
    """Per tick, the index of the last of ``times`` at or before it (-1: none).

    ``searchsorted`` runs a full binary search per tick; with exact float64 copies of the times,
    ``np.interp`` of the indices does the same job from the previous tick's position (sorted ticks
    land next to it), and its estimate is exact up to one step, which one comparison corrects.

    Example:
        >>> times = np.array([0.0, 1.0, 2.0])
        >>> last_at_or_before(times, np.array([-1.0, 0.0, 0.5, 2.0, 9.0]), times, None).tolist()
        [-1, 0, 0, 2, 2]
    """
    if float_times is None:
        return np.searchsorted(times, ticks, side="right") - 1
    size = len(times)
    keys = float_ticks if float_ticks is not None else ticks
    # index + fraction, floored: the last time at or before, or (rounding) the next; left -> 0
    estimate = np.interp(keys, float_times, np.arange(size, dtype=np.float64), left=0.0, right=size - 1.0)
    index = estimate.astype(np.intp)
    return index - (times[index] > ticks)
