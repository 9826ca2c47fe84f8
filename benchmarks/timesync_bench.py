"""TimeSync speed: offline alignment of 3 streams (1,000,000 reference ticks at 10 Hz, an IMU at
30 Hz and a GPS at 5 Hz, both with jitter) against the straightforward Python loop (``bisect`` per
tick and stream, nearest record within tolerance); online throughput beside it."""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from torchloom.fusion import TimeSync

TICKS = 1_000_000
ONLINE_TICKS = 100_000
TOLERANCE = 0.02
ROUNDS = 3


def make_streams(ticks: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
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


def python_loop(streams: dict[str, tuple[np.ndarray, np.ndarray]]) -> list[dict[str, Any]]:
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


@dataclass
class SyncResult:
    offline_ticks_per_second: float
    loop_ticks_per_second: float
    online_ticks_per_second: float

    @property
    def ratio(self) -> float:
        return self.offline_ticks_per_second / self.loop_ticks_per_second


def run_timesync(ticks: int = TICKS) -> SyncResult:
    streams = make_streams(ticks)
    offline_times, loop_times = [], []
    for _ in range(ROUNDS):  # interleaved, best of each: this machine's noise only ever slows a run
        start = time.perf_counter()
        TimeSync(streams, reference="camera", tolerance=TOLERANCE, on_gap="mask")
        offline_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        python_loop(streams)
        loop_times.append(time.perf_counter() - start)
    offline, loop = ticks / min(offline_times), ticks / min(loop_times)
    small = make_streams(ONLINE_TICKS)
    iterators = {name: zip(t.tolist(), v.tolist(), strict=True) for name, (t, v) in small.items()}
    start = time.perf_counter()
    for _ in TimeSync(iterators, reference="camera", tolerance=TOLERANCE, on_gap="mask"):
        pass
    online = ONLINE_TICKS / (time.perf_counter() - start)
    return SyncResult(offline, loop, online)
