"""TimeSync speed, each mode against a reference doing the same work in the same run.

- Offline: 3 streams, 1,000,000 reference ticks (a camera at 10 Hz, an IMU at 30 Hz and a GPS at
  5 Hz, both with jitter), nearest record within 20 ms, gaps masked, against ``pandas.merge_asof``
  (``direction="nearest"``, ``tolerance``) building the same columns: each stream's value, its
  offset ``dt`` and its validity. Timed from the input arrays to the aligned result, on float
  seconds, int64 nanoseconds since the epoch and ``datetime64[ns]``.
- Online: 100,000 ticks of Python ``(timestamp, value)`` records against the straightforward Python
  loop one writes by hand (``bisect`` per tick and stream over lists, one dict per tick).

Rounds are interleaved and each rate is the best of its rounds: this machine's noise only ever
slows a run down. pandas is a benchmark-only dependency (``pip install -e '.[bench]'`` in the clone).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from torchloom.errors import install_hint
from torchloom.fusion import TimeSync

TICKS = 1_000_000
ONLINE_TICKS = 100_000
TOLERANCE = 0.02  # seconds
TOLERANCE_NS = 20_000_000
EPOCH_NS = 1_700_000_000_000_000_000  # nanoseconds since 1970: beyond float64's exact integers
ROUNDS = 5
ONLINE_ROUNDS = 3
OTHERS = ("imu", "gps")

Streams = dict[str, tuple[np.ndarray, np.ndarray]]


def make_streams(ticks: int) -> Streams:
    rng = np.random.default_rng(0)
    seconds = ticks / 10
    camera = np.arange(ticks) / 10
    imu = np.sort(np.arange(int(seconds * 30)) / 30 + rng.normal(0, 0.003, int(seconds * 30)))
    gps = np.sort(np.arange(int(seconds * 5)) / 5 + rng.normal(0, 0.01, int(seconds * 5)))
    return {
        "camera": (camera, np.arange(ticks)),
        "imu": (imu, rng.normal(size=len(imu))),
        "gps": (gps, rng.normal(size=len(gps))),
    }


def in_nanoseconds(streams: Streams, dtype: str) -> Streams:
    """The same streams with int64 nanosecond (or ``datetime64[ns]``) timestamps near 1.7e18."""
    out = {}
    for name, (seconds, values) in streams.items():
        nanoseconds = EPOCH_NS + np.round(seconds * 1e9).astype(np.int64)
        out[name] = (nanoseconds.view("M8[ns]") if dtype == "datetime64" else nanoseconds, values)
    return out


def merge_asof_reference(streams: Streams, tolerance: Any) -> Any:
    """pandas doing TimeSync's offline work: per stream the nearest record within ``tolerance``,
    its value, its offset ``dt`` (record time minus tick) and its validity."""
    try:
        import pandas as pd  # a benchmark-only dependency
    except ImportError as exc:
        raise ImportError(
            f"the TimeSync benchmark compares with pandas: {install_hint('pandas', 'bench')}"
        ) from exc

    times, values = streams["camera"]
    table = pd.DataFrame({"t": times, "camera": values})
    for name in OTHERS:
        record_times, record_values = streams[name]
        right = pd.DataFrame({"t": record_times, name: record_values, f"{name}_t": record_times})
        table = pd.merge_asof(table, right, on="t", direction="nearest", tolerance=tolerance)
        table[f"{name}_dt"] = table.pop(f"{name}_t") - table["t"]
        table[f"{name}_valid"] = table[f"{name}_dt"].notna()
    return table


def python_loop(streams: Streams) -> list[dict[str, Any]]:
    """What one writes by hand: for each tick, for each stream, bisect and take the nearest."""
    ticks, tick_values = (a.tolist() for a in streams["camera"])
    others = {name: (t.tolist(), v.tolist()) for name, (t, v) in streams.items() if name != "camera"}
    out = []
    for tick, value in zip(ticks, tick_values, strict=True):
        sample: dict[str, Any] = {"t": tick, "camera": value}
        for name, (times, values) in others.items():
            i = bisect.bisect_left(times, tick)
            best = min((j for j in (i - 1, i) if 0 <= j < len(times)), key=lambda j: abs(times[j] - tick))
            dt = times[best] - tick
            sample[name], sample[f"{name}_dt"], sample[f"{name}_valid"] = (
                values[best],
                dt,
                abs(dt) <= TOLERANCE,
            )
        out.append(sample)
    return out


def online(streams: Streams) -> int:
    """TimeSync over iterators of Python records (built inside the timing, as the loop's lists are)."""
    iterators = {name: zip(t.tolist(), v.tolist(), strict=True) for name, (t, v) in streams.items()}
    count = 0
    for _ in TimeSync(iterators, reference="camera", tolerance=TOLERANCE, on_gap="mask"):
        count += 1
    return count


@dataclass
class Pair:
    """One comparison: TimeSync and its reference, ticks per second."""

    name: str
    timesync: float
    reference: float

    @property
    def ratio(self) -> float:
        return self.timesync / self.reference


@dataclass
class SyncResult:
    offline: list[Pair]  # against pandas.merge_asof, per timestamp kind
    online: Pair  # against the Python loop
    agree: bool  # TimeSync and merge_asof chose the same records (validity and dt, float seconds)


def _best_of(rounds: int, ticks: int, runs: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Ticks per second of each run, rounds interleaved, best of each."""
    times: dict[str, list[float]] = {key: [] for key in runs}
    for _ in range(rounds):
        for key, run in runs.items():
            start = time.perf_counter()
            run()
            times[key].append(time.perf_counter() - start)
    return {key: ticks / min(values) for key, values in times.items()}


def agreement(streams: Streams, checked: int = 50_000) -> bool:
    """Whether TimeSync and merge_asof give the same validity and offsets (at ``checked`` ticks)."""
    sync = TimeSync(streams, reference="camera", tolerance=TOLERANCE, on_gap="mask")
    table = merge_asof_reference(streams, TOLERANCE)
    valid = {name: table[f"{name}_valid"].to_numpy() for name in OTHERS}
    offsets = {name: table[f"{name}_dt"].to_numpy() for name in OTHERS}
    for row in np.linspace(0, len(sync) - 1, checked).astype(int).tolist():
        sample = sync[row]
        for name in OTHERS:
            if sample[f"{name}_valid"] != valid[name][row]:
                return False
            if valid[name][row] and sample[f"{name}_dt"] != offsets[name][row]:
                return False
    return True


def run_timesync(ticks: int = TICKS) -> SyncResult:
    streams = make_streams(ticks)
    kinds = {
        "float seconds": (streams, TOLERANCE),
        "int64 ns": (in_nanoseconds(streams, "int64"), TOLERANCE_NS),
        "datetime64[ns]": (in_nanoseconds(streams, "datetime64"), np.timedelta64(TOLERANCE_NS, "ns")),
    }
    offline = []
    for kind, (data, tolerance) in kinds.items():

        def timesync(data: Streams = data, tolerance: Any = tolerance) -> object:
            return TimeSync(data, reference="camera", tolerance=tolerance, on_gap="mask")

        def pandas(data: Streams = data, tolerance: Any = tolerance) -> object:
            return merge_asof_reference(data, _pandas_tolerance(tolerance))

        rates = _best_of(ROUNDS, ticks, {"timesync": timesync, "pandas": pandas})
        offline.append(Pair(kind, rates["timesync"], rates["pandas"]))
    small = make_streams(ONLINE_TICKS)
    rates = _best_of(
        ONLINE_ROUNDS, ONLINE_TICKS, {"online": lambda: online(small), "loop": lambda: python_loop(small)}
    )
    return SyncResult(offline, Pair("online", rates["online"], rates["loop"]), agreement(streams))


def _pandas_tolerance(tolerance: Any) -> Any:
    import pandas as pd  # present: merge_asof_reference needs it too

    return pd.Timedelta(tolerance) if isinstance(tolerance, np.timedelta64) else tolerance
