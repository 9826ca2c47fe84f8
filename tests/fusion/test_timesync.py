"""TimeSync against a brute-force double loop in plain Python numbers (exact integers for integer
and datetime64 timestamps), offline and online; online == offline, types included; accounting;
bad input."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchloom.fusion import TimestampError, TimeSync

BASE = 1_700_000_000_000_000_000  # nanoseconds since the epoch: float64 steps are 256 ns here
POLICIES = ["nearest", "previous", "interpolate"]


def brute_force(
    streams: dict[str, tuple[list[Any], list[Any]]],
    reference: str,
    tolerance: Any,
    policy: str,
    on_gap: str,
    max_gap: Any,
    missing_dt: Any = math.nan,
) -> list[dict[str, Any]]:
    """The definition, written as plainly as possible: a loop over ticks, a loop over records.

    Times are plain Python numbers (ints stay exact); ``dt`` is ``missing_dt`` where no record is taken.
    """

    def dedup(times: list[Any], values: list[Any]) -> list[tuple[Any, Any]]:
        kept: dict[Any, Any] = {}
        for t, v in zip(times, values, strict=True):
            kept[t] = v  # the last record of a timestamp wins
        return sorted(kept.items())

    zero = 0 if isinstance(tolerance, int) else 0.0
    ref = dedup(*streams[reference])
    others = {name: dedup(*s) for name, s in streams.items() if name != reference}
    out = []
    for tick, tick_value in ref:
        sample: dict[str, Any] = {
            "t": tick,
            reference: tick_value,
            f"{reference}_dt": zero,
            f"{reference}_valid": True,
        }
        ok = True
        for name, records in others.items():
            before = [(t, v) for t, v in records if t <= tick]
            after = [(t, v) for t, v in records if t >= tick]
            value, dt, valid = None, missing_dt, False
            if policy == "nearest":
                candidates = ([before[-1]] if before else []) + ([after[0]] if after else [])
                if candidates:
                    t, v = min(candidates, key=lambda r: (abs(r[0] - tick), r[0]))
                    value, dt, valid = v, t - tick, abs(t - tick) <= tolerance
            elif policy == "previous":
                if before:
                    t, v = before[-1]
                    value, dt, valid = v, t - tick, tick - t <= tolerance
            elif before and before[-1][0] == tick:
                value, dt, valid = float(before[-1][1]), zero, True
            elif before and after:
                (t0, v0), (t1, v1) = before[-1], after[0]
                w = (tick - t0) / (t1 - t0)
                value, dt = v0 * (1 - w) + v1 * w, max(tick - t0, t1 - tick)
                valid = dt <= tolerance and (max_gap is None or t1 - t0 <= max_gap)
            ok &= valid
            zero_value = (
                (0.0 if policy == "interpolate" or isinstance(records[0][1], float) else 0)
                if records
                else None
            )
            sample[name] = value if valid else zero_value  # an empty stream: no zero shape
            sample[f"{name}_dt"] = dt
            sample[f"{name}_valid"] = valid
        if ok or on_gap == "mask":
            out.append(sample)
    return out


def same(actual: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    """Equal sample by sample: times and offsets exactly (NaN/NaT/None alike), values to 1e-9."""
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert a.keys() == e.keys()
        for key in a:
            x, y = a[key], e[key]
            if key == "t" or key.endswith(("_dt", "_valid")):
                assert type(x) is type(y), (key, x, y)
                assert (x == y) or (x != x and y != y) or (x is None and y is None), (key, x, y)
            elif isinstance(y, float):
                assert isinstance(x, float) and x == pytest.approx(y, rel=1e-12, abs=1e-9), (key, x, y)
            else:
                assert type(x) is type(y) and x == y, (key, x, y)


def identical(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    """Online == offline: same keys, same types, same bits (NaN/NaT equal to themselves)."""
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert list(x) == list(y)
        for key in x:
            u, v = x[key], y[key]
            assert type(u) is type(v), (key, u, v)
            if isinstance(u, np.ndarray):
                assert u.dtype == v.dtype and np.array_equal(u, v, equal_nan=True), key
            elif isinstance(u, float):
                assert u.hex() == v.hex(), (key, u, v)  # bit for bit: -0.0 and NaN included
            elif u is not None:
                assert u == v or (u != u and v != v), (key, u, v)


KINDS = {  # kind -> (time of a step count, tolerances, max_gap): 1 step = 0.1 s, or 100 ns
    "float": (lambda k: k / 10, [0.0, 0.1, 0.25, 1.0], 0.3),
    "int": (lambda k: BASE + 100 * k, [0, 100, 250, 1000], 300),
    "datetime": (lambda k: BASE + 100 * k, [0, 100, 250, 1000], 300),
}


@st.composite
def stream(draw: st.DrawFn, kind: str = "float", non_empty: bool = False) -> tuple[list[Any], list[Any]]:
    steps = sorted(draw(st.lists(st.integers(0, 60), min_size=1 if non_empty else 0, max_size=25)))
    integer_values = draw(st.booleans())
    values = [draw(st.integers(-50, 50)) for _ in steps]
    return [KINDS[kind][0](k) for k in steps], values if integer_values else [float(v) for v in values]


def as_offline(kind: str, times: list[Any], values: list[Any], dtype: str) -> tuple[np.ndarray, np.ndarray]:
    if kind == "datetime":
        return np.array(times, dtype=np.int64).view("M8[ns]"), np.array(values)
    return np.array(times, dtype=dtype if kind == "int" else np.float64), np.array(values)


def as_online(kind: str, times: list[Any], values: list[Any], numpy_scalars: bool) -> list[tuple[Any, Any]]:
    if kind == "datetime":
        return [(np.datetime64(t, "ns"), v) for t, v in zip(times, values, strict=True)]
    if kind == "int" and numpy_scalars:
        return [(np.int64(t), v) for t, v in zip(times, values, strict=True)]
    return list(zip(times, values, strict=True))


def expected_for(kind: str, samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Integer brute-force samples as datetime64 samples: "t" a datetime64, offsets timedelta64."""
    if kind != "datetime":
        return samples
    return [
        {
            key: np.datetime64(v, "ns")
            if key == "t"
            else (np.timedelta64("NaT", "ns") if v is None else np.timedelta64(v, "ns"))
            if key.endswith("_dt")
            else v
            for key, v in sample.items()
        }
        for sample in samples
    ]


@pytest.mark.parametrize("kind", list(KINDS))
@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_offline_and_online_equal_the_brute_force(kind: str, data: st.DataObject) -> None:
    _, tolerances, gap = KINDS[kind]
    streams = {
        "camera": data.draw(stream(kind, non_empty=True)),
        "imu": data.draw(stream(kind)),
        "gps": data.draw(stream(kind)),
    }
    tolerance = data.draw(st.sampled_from(tolerances))
    policy = data.draw(st.sampled_from(POLICIES))
    on_gap = data.draw(st.sampled_from(["drop", "mask"]))
    max_gap = data.draw(st.sampled_from([None, gap]))
    dtype = data.draw(st.sampled_from(["int64", "uint64"]))
    missing_dt = math.nan if kind == "float" else None
    expected = expected_for(
        kind, brute_force(streams, "camera", tolerance, policy, on_gap, max_gap, missing_dt)
    )
    if kind == "datetime":  # durations as timedelta64 (or, equally, integer counts of the unit)
        tolerance = data.draw(st.sampled_from([np.timedelta64(tolerance, "ns"), tolerance]))
        max_gap = None if max_gap is None else np.timedelta64(max_gap, "ns")
    options: dict[str, Any] = {
        "reference": "camera",
        "tolerance": tolerance,
        "policy": policy,
        "on_gap": on_gap,
        "max_gap": max_gap,
    }
    offline = TimeSync({name: as_offline(kind, *s, dtype) for name, s in streams.items()}, **options)
    offline_samples = list(offline)
    same(offline_samples, expected)
    numpy_scalars = data.draw(st.booleans())
    online = TimeSync(
        {name: iter(as_online(kind, *s, numpy_scalars)) for name, s in streams.items()}, **options
    )
    identical(list(online), offline_samples)
    for report in (offline.report, online.report):
        for name, (times, _) in streams.items():
            assert report.total[name] == len(times)
            assert report.used[name] + report.skipped[name] + report.dropped[name] == len(times)
    assert offline.report == online.report


def test_frames_100_ns_apart_at_epoch_nanoseconds_stay_distinct() -> None:
    """float64 rounds BASE + 100 to BASE (256 ns steps): the frames merged and took wrong neighbours."""
    assert float(BASE + 100) == float(BASE)
    camera = (np.array([BASE, BASE + 100], dtype=np.int64), np.array([0, 1]))
    imu = (np.array([BASE - 45, BASE + 40, BASE + 90, BASE + 160]), np.array([1.0, 2.0, 3.0, 4.0]))
    for streams in (
        {"camera": camera, "imu": imu},
        {"camera": list(zip(*camera, strict=True)), "imu": list(zip(*imu, strict=True))},
    ):
        samples = list(TimeSync(streams, reference="camera", tolerance=50))
        assert [(s["t"], s["camera"], s["imu"], s["imu_dt"]) for s in samples] == [
            (BASE, 0, 2.0, 40),
            (BASE + 100, 1, 3.0, -10),
        ]
        assert all(type(s["t"]) is int and type(s["imu_dt"]) is int for s in samples)
    interpolated = TimeSync(
        {"camera": camera, "imu": imu}, reference="camera", tolerance=100, policy="interpolate"
    )
    assert [s["imu"] for s in interpolated] == pytest.approx([1.0 + 45 / 85, 3.0 + 10 / 70], abs=1e-12)
    assert [s["imu_dt"] for s in interpolated] == [45, 60]


def test_datetime64_units_merge_into_the_finest_and_offsets_are_timedelta64() -> None:
    start = np.datetime64("2026-11-30T12:00:00", "ms")
    camera = (start + np.arange(3) * np.timedelta64(100, "ms"), np.arange(3))
    imu_times = start.astype("M8[us]") + np.array([-1500, 99_999, 230_000], dtype="m8[us]")
    sync = TimeSync(
        {"camera": camera, "imu": (imu_times, np.ones(3))},
        reference="camera",
        tolerance=np.timedelta64(2, "ms"),
        on_gap="mask",
    )
    assert sync.clock is not None and sync.clock.unit == "us"
    samples = list(sync)
    assert (
        samples[0]["t"] == np.datetime64("2026-11-30T12:00:00.000000") and samples[0]["t"].dtype == "M8[us]"
    )
    assert [s["imu_dt"] for s in samples] == [
        np.timedelta64(-1500, "us"),
        np.timedelta64(-1, "us"),
        np.timedelta64(30_000, "us"),
    ]
    assert [s["imu_valid"] for s in samples] == [True, True, False]
    assert samples[0]["camera_dt"] == np.timedelta64(0, "us")
    online = TimeSync(
        {"camera": list(zip(*camera, strict=True)), "imu": list(zip(imu_times, np.ones(3), strict=True))},
        reference="camera",
        tolerance=np.timedelta64(2000, "us"),
        on_gap="mask",
    )
    identical(list(online), samples)


def test_time_kind_errors_name_the_streams_and_the_fix() -> None:
    ints = (np.array([0, 10]), np.array([1.0, 2.0]))
    with pytest.raises(TimestampError, match=r"different kinds \(int: \['cam'\]; float: \['imu'\]\)"):
        TimeSync({"cam": ints, "imu": (np.array([0.0, 1.0]), np.zeros(2))}, reference="cam", tolerance=1)
    with pytest.raises(ValueError, match=r"tolerance=0.02 is not a whole number.*integer count"):
        TimeSync({"cam": ints, "imu": ints}, reference="cam", tolerance=0.02)
    assert len(TimeSync({"cam": ints, "imu": ints}, reference="cam", tolerance=20e6)) == 2
    with pytest.raises(ValueError, match="plain integers, which carry no unit"):
        TimeSync({"cam": ints, "imu": ints}, reference="cam", tolerance=np.timedelta64(1, "ms"))
    dates = np.array(["2026-01-01T00:00", "NaT"], dtype="M8[s]")
    with pytest.raises(TimestampError, match=r"stream 'imu': timestamp at position 1 is NaT"):
        TimeSync(
            {"cam": (dates[:1], [0]), "imu": (dates, [0, 0])},
            reference="cam",
            tolerance=np.timedelta64(1, "s"),
        )
    with pytest.raises(TimestampError, match=r"stream 'imu': timestamp at position 1 is NaT"):
        list(
            TimeSync(
                {"cam": [(dates[0], 0)], "imu": iter(zip(dates, [0, 0], strict=True))},
                reference="cam",
                tolerance=1,
            )
        )
    with pytest.raises(TimestampError, match=r"stream 'imu': timestamp at position 1 \(0.5\) is a float"):
        list(TimeSync({"cam": [(0, 0)], "imu": [(0, 0), (0.5, 0)]}, reference="cam", tolerance=1))
    with pytest.raises(TimestampError, match=r"stream 'imu': timestamp at position 2 is inf"):
        TimeSync(
            {"cam": ([0.0], [1]), "imu": (np.array([0.0, 1.0, np.inf]), np.zeros(3))},
            reference="cam",
            tolerance=1,
        )
    huge = np.array([-(2**62), 2**62 + 1], dtype=np.int64)
    with pytest.raises(TimestampError, match=r"span more than 2\*\*63 - 1 units.*common origin"):
        TimeSync({"cam": (huge, np.zeros(2)), "imu": ints}, reference="cam", tolerance=1)
    big = np.array([2**63 + 5], dtype=np.uint64)
    with pytest.raises(
        TimestampError, match=r"stream 'imu': timestamp at position 0 .* exceeds the int64 range"
    ):
        TimeSync({"cam": ints, "imu": (big, np.zeros(1))}, reference="cam", tolerance=1)


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
        str(Path(__file__).resolve().parents[2] / "examples" / "sensor_fusion.py"), run_name="__main__"
    )
    printed = capsys.readouterr().out
    assert "imu (16, 8, 6) imu_valid (16, 8) camera (16, 8)" in printed
    assert "imu: 370 / 184 / 0 of 554" in printed and "masked steps in recording 0: 16" in printed


@pytest.mark.parametrize("kind", list(KINDS))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_reorder_window_restores_order_in_both_modes(kind: str, data: st.DataObject) -> None:
    camera, (times, values) = data.draw(stream(kind, non_empty=True)), data.draw(stream(kind))
    window, seed = data.draw(st.integers(0, 4)), data.draw(st.integers(0, 1000))
    policy = data.draw(st.sampled_from(POLICIES))
    tolerance = KINDS[kind][1][2]
    rng = np.random.default_rng(seed)
    order = np.arange(len(times))
    for start in range(0, len(order), window + 1):  # shuffle within blocks: nobody is > window late
        rng.shuffle(order[start : start + window + 1])
    shuffled = ([times[i] for i in order], [values[i] for i in order])
    arrival_sorted = sorted(zip(*shuffled, strict=True), key=lambda record: record[0])  # ties: arrival order
    sorted_imu = ([t for t, _ in arrival_sorted], [v for _, v in arrival_sorted])
    missing_dt = math.nan if kind == "float" else None
    expected = brute_force(
        {"camera": camera, "imu": sorted_imu}, "camera", tolerance, policy, "mask", None, missing_dt
    )
    options: dict[str, Any] = {
        "reference": "camera",
        "tolerance": tolerance,
        "policy": policy,
        "on_gap": "mask",
        "reorder_window": window,
    }
    offline = TimeSync(
        {"camera": as_offline(kind, *camera, "int64"), "imu": as_offline(kind, *shuffled, "int64")}, **options
    )
    online = TimeSync(
        {"camera": iter(as_online(kind, *camera, False)), "imu": iter(as_online(kind, *shuffled, True))},
        **options,
    )
    same(list(offline), expected_for(kind, expected))
    identical(list(online), list(offline))
    assert online.report == offline.report


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
