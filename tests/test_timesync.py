"""TimeSync against a brute-force double loop, offline and online; accounting; bad input."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchloom.fusion import TimestampError, TimeSync


def brute_force(
    streams: dict[str, tuple[list[float], list[float]]],
    reference: str,
    tolerance: float,
    policy: str,
    on_gap: str,
    max_gap: float | None,
) -> list[dict[str, Any]]:
    """The definition, written as plainly as possible: a loop over ticks, a loop over records."""

    def dedup(times: list[float], values: list[float]) -> list[tuple[float, float]]:
        kept: dict[float, float] = {}
        for t, v in zip(times, values, strict=True):
            kept[t] = v  # the last record of a timestamp wins
        return sorted(kept.items())

    ref = dedup(*streams[reference])
    others = {name: dedup(*s) for name, s in streams.items() if name != reference}
    out = []
    for tick, tick_value in ref:
        sample: dict[str, Any] = {
            "t": tick,
            reference: tick_value,
            f"{reference}_dt": 0.0,
            f"{reference}_valid": True,
        }
        ok = True
        for name, records in others.items():
            before = [(t, v) for t, v in records if t <= tick]
            after = [(t, v) for t, v in records if t >= tick]
            value, dt, valid = None, math.nan, False
            if policy == "nearest":
                candidates = ([before[-1]] if before else []) + ([after[0]] if after else [])
                if candidates:
                    t, v = min(candidates, key=lambda r: (abs(r[0] - tick), r[0]))
                    value, dt, valid = v, t - tick, abs(t - tick) <= tolerance
            elif policy == "previous" or (policy == "interpolate" and before and before[-1][0] == tick):
                if before:
                    t, v = before[-1]
                    value, dt, valid = v, t - tick, tick - t <= tolerance
            elif before and after:
                (t0, v0), (t1, v1) = before[-1], after[0]
                w = (tick - t0) / (t1 - t0)
                value, dt = v0 * (1 - w) + v1 * w, max(tick - t0, t1 - tick)
                valid = dt <= tolerance and (max_gap is None or t1 - t0 <= max_gap)
            ok &= valid
            sample[name] = value if valid else (0.0 if records else None)  # an empty stream: no zero shape
            sample[f"{name}_dt"] = dt
            sample[f"{name}_valid"] = valid
        if ok or on_gap == "mask":
            out.append(sample)
    return out


def same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key in x:
            if isinstance(x[key], float) and math.isnan(x[key]):
                assert math.isnan(y[key])
            elif isinstance(x[key], float):
                assert y[key] == pytest.approx(x[key], abs=1e-9)
            else:
                assert x[key] == y[key]


timestamps = st.lists(st.integers(0, 60), max_size=25).map(lambda ts: sorted(t / 10 for t in ts))


@st.composite
def stream(draw: st.DrawFn, non_empty: bool = False) -> tuple[list[float], list[float]]:
    times = draw(timestamps.filter(lambda t: len(t) > 0) if non_empty else timestamps)
    values = [float(draw(st.integers(-50, 50))) for _ in times]
    return times, values


@settings(max_examples=120, deadline=None)
@given(
    camera=stream(non_empty=True),
    imu=stream(),
    gps=stream(),
    tolerance=st.sampled_from([0.0, 0.1, 0.25, 1.0]),
    policy=st.sampled_from(["nearest", "previous", "interpolate"]),
    on_gap=st.sampled_from(["drop", "mask"]),
    max_gap=st.sampled_from([None, 0.3]),
)
def test_offline_and_online_equal_the_brute_force(
    camera: Any, imu: Any, gps: Any, tolerance: float, policy: str, on_gap: str, max_gap: float | None
) -> None:
    streams = {"camera": camera, "imu": imu, "gps": gps}
    expected = brute_force(streams, "camera", tolerance, policy, on_gap, max_gap)
    arrays = {name: (np.array(t, dtype=float), np.array(v, dtype=float)) for name, (t, v) in streams.items()}
    options: dict[str, Any] = {
        "reference": "camera",
        "tolerance": tolerance,
        "policy": policy,
        "on_gap": on_gap,
        "max_gap": max_gap,
    }
    offline = TimeSync(arrays, **options)
    same(list(offline), expected)
    online = TimeSync(
        {name: iter(list(zip(t, v, strict=True))) for name, (t, v) in streams.items()}, **options
    )
    same(list(online), expected)
    for report in (offline.report, online.report):
        for name, (times, _) in streams.items():
            assert report.total[name] == len(times)
            assert report.used[name] + report.skipped[name] + report.dropped[name] == len(times)
    assert offline.report == online.report


class CountingIterator:
    def __init__(self, records: list[tuple[float, float]]) -> None:
        self.records, self.reads = records, 0

    def __iter__(self) -> CountingIterator:
        return self

    def __next__(self) -> tuple[float, float]:
        if self.reads >= len(self.records):
            raise StopIteration
        self.reads += 1
        return self.records[self.reads - 1]


def test_online_reads_each_stream_once_with_a_bounded_buffer() -> None:
    camera = [(i / 10, float(i)) for i in range(1000)]
    imu = CountingIterator([(i / 30, float(i)) for i in range(3000)])
    sync = TimeSync({"camera": iter(camera), "imu": imu}, reference="camera", tolerance=0.02)
    count = 0
    for _ in sync:
        count += 1
    assert count == 1000 and imu.reads == 3000 and sync.report.total["imu"] == 3000


def test_camera_and_imu_with_dropout_gap() -> None:
    rng = np.random.default_rng(0)
    cam_t = np.arange(0, 10, 0.1)
    imu_t = np.sort(np.arange(0, 10, 1 / 30) + rng.normal(0, 0.002, 300))
    keep = (imu_t < 4.0) | (imu_t > 5.0)  # a one-second dropout
    imu_t, imu_v = imu_t[keep], rng.normal(size=(int(keep.sum()), 6))
    masked = TimeSync(
        {"camera": (cam_t, np.arange(100)), "imu": (imu_t, imu_v)},
        reference="camera",
        tolerance=0.02,
        on_gap="mask",
    )
    assert len(masked) == 100
    invalid = [s["t"] for s in masked if not s["imu_valid"]]
    assert invalid and all(3.95 < t < 5.05 for t in invalid)
    assert masked[45]["imu"].shape == (6,) and not masked[45]["imu"].any()
    dropped = TimeSync(
        {"camera": (cam_t, np.arange(100)), "imu": (imu_t, imu_v)}, reference="camera", tolerance=0.02
    )
    assert len(dropped) == 100 - len(invalid) and dropped.report.dropped["camera"] == len(invalid)


def test_bad_input() -> None:
    good = (np.array([0.0, 1.0]), np.array([1.0, 2.0]))
    with pytest.raises(TimestampError, match=r"stream 'imu'.*position 2"):
        TimeSync({"cam": good, "imu": (np.array([0.0, 0.5, 0.2]), np.zeros(3))}, reference="cam", tolerance=1)
    with pytest.raises(TimestampError, match="position 1 is NaN"):
        TimeSync({"cam": good, "imu": (np.array([0.0, np.nan]), np.zeros(2))}, reference="cam", tolerance=1)
    with pytest.raises(TimestampError, match=r"stream 'imu'.*position 2"):
        list(
            TimeSync(
                {"cam": iter([(0.0, 1), (1.0, 2)]), "imu": iter([(0.0, 1), (0.9, 1), (0.5, 1)])},
                reference="cam",
                tolerance=1,
            )
        )
    with pytest.raises(ValueError, match="mismatched shapes"):
        TimeSync(
            {"cam": good, "imu": (np.array([0.0, 1.0]), [np.zeros(2), np.zeros(3)])},
            reference="cam",
            tolerance=1,
        )
    with pytest.raises(ValueError, match="reference"):
        TimeSync({"cam": good}, reference="imu", tolerance=1)
    empty = TimeSync(
        {"cam": good, "imu": (np.zeros(0), np.zeros(0))}, reference="cam", tolerance=1, on_gap="mask"
    )
    assert [s["imu_valid"] for s in empty] == [False, False]
    single = TimeSync({"cam": good, "imu": (np.array([0.5]), np.array([7.0]))}, reference="cam", tolerance=1)
    assert [s["imu"] for s in single] == [7.0, 7.0]


def test_sensor_fusion_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    import runpy
    from pathlib import Path

    runpy.run_path(
        str(Path(__file__).resolve().parents[1] / "examples" / "sensor_fusion.py"), run_name="__main__"
    )
    printed = capsys.readouterr().out
    assert "imu (16, 8, 6) imu_valid (16, 8) camera (16, 8)" in printed
    assert "imu: 370 / 184 / 0 of 554" in printed and "masked steps in recording 0: 16" in printed


@settings(max_examples=60, deadline=None)
@given(
    camera=stream(non_empty=True),
    imu=stream(),
    window=st.integers(0, 4),
    seed=st.integers(0, 1000),
    policy=st.sampled_from(["nearest", "previous", "interpolate"]),
)
def test_reorder_window_restores_order_in_both_modes(
    camera: Any, imu: Any, window: int, seed: int, policy: str
) -> None:
    rng = np.random.default_rng(seed)
    times, values = imu
    order = np.arange(len(times))
    for start in range(0, len(order), window + 1):  # shuffle within blocks: nobody is > window late
        rng.shuffle(order[start : start + window + 1])
    shuffled = ([times[i] for i in order], [values[i] for i in order])
    options: dict[str, Any] = {"reference": "camera", "tolerance": 0.25, "policy": policy, "on_gap": "mask"}
    arrival_sorted = sorted(zip(*shuffled, strict=True), key=lambda record: record[0])  # ties: arrival order
    sorted_imu = ([t for t, _ in arrival_sorted], [v for _, v in arrival_sorted])
    expected = brute_force({"camera": camera, "imu": sorted_imu}, "camera", 0.25, policy, "mask", None)
    offline = TimeSync(
        {"camera": tuple(map(np.asarray, camera)), "imu": tuple(map(np.asarray, shuffled))},
        reorder_window=window,
        **options,
    )
    online = TimeSync(
        {"camera": iter(list(zip(*camera, strict=True))), "imu": iter(list(zip(*shuffled, strict=True)))},
        reorder_window=window,
        **options,
    )
    same(list(offline), expected)
    same(list(online), expected)


def test_reorder_window_too_small_names_the_late_record() -> None:
    imu = (np.array([0.0, 0.1, 0.2, 0.05]), np.zeros(4))
    with pytest.raises(TimestampError, match=r"position 3 \(0.05\) arrived more than reorder_window=1"):
        TimeSync(
            {"cam": (np.array([0.0]), np.zeros(1)), "imu": imu},
            reference="cam",
            tolerance=1,
            reorder_window=1,
        )
    ok = TimeSync(
        {"cam": (np.array([0.0]), np.zeros(1)), "imu": imu}, reference="cam", tolerance=1, reorder_window=2
    )
    assert ok.report.total["imu"] == 4


def _recording(seed: int) -> Any:
    def make() -> dict[str, Any]:
        rng = np.random.default_rng(seed)
        cam = np.arange(0, 3, 0.1)
        imu = np.sort(np.arange(0, 3, 1 / 30) + rng.normal(0, 0.002, 90))
        return {"cam": iter(list(zip(cam.tolist(), range(30), strict=True))), "imu": (imu, np.zeros(90))}

    return make


@pytest.mark.parametrize("num_workers", [0, 2, 3])
@pytest.mark.parametrize("count", [1, 2, 5])
def test_synced_recordings_exactly_once_across_workers_and_ranks(num_workers: int, count: int) -> None:
    from collections import Counter

    from torch.utils.data import DataLoader

    from torchloom.fusion import SyncedRecordings

    recordings = [_recording(seed) for seed in range(count)]
    seen: Counter[tuple[int, int]] = Counter()
    for rank in range(2):
        dataset = SyncedRecordings(recordings, rank=rank, world_size=2, reference="cam", tolerance=0.05)
        for sample in DataLoader(dataset, batch_size=None, num_workers=num_workers):
            seen[(int(sample["recording"]), int(sample["cam"]))] += 1
    assert seen == Counter((r, frame) for r in range(count) for frame in range(30))


def test_online_sources_read_twice_reopen_or_refuse() -> None:
    camera = [(t / 10, t) for t in range(5)]
    imu = [(t / 30, float(t)) for t in range(15)]
    options = {"reference": "cam", "tolerance": 0.02}
    reopened = TimeSync({"cam": lambda: iter(camera), "imu": lambda: iter(imu)}, **options)
    first = list(reopened)
    assert len(first) == 5 and list(reopened) == first
    assert reopened.report.total == {"cam": 5, "imu": 15}  # counted once per pass, not summed
    lists = TimeSync({"cam": camera, "imu": imu}, **options)
    assert list(lists) == first == list(lists)
    once = TimeSync({"cam": iter(camera), "imu": iter(imu)}, **options)
    assert list(once) == first
    with pytest.raises(TypeError, match=r"stream\(s\) \['cam', 'imu'\] are iterators .* callable"):
        list(once)
