"""Fault policy (raise / skip / retry) and the automatic collate."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch.utils.data import default_collate

from torchloom import FaultPolicy, FaultReport, SampleError, Skipped, collate
from torchloom.errors import CollateError, DecodeError


class Flaky:
    """Fails with ``error`` the first ``failures`` calls, then returns "ok"."""

    def __init__(self, failures: int, error: BaseException) -> None:
        self.failures, self.error, self.calls = failures, error, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "ok"


def test_retry_recovers_from_transient_io() -> None:
    policy = FaultPolicy(on_error="retry", retries=3, backoff=0.0)
    flaky = Flaky(2, TimeoutError("network share timed out"))
    assert policy.run(0, "a.jpg", flaky) == "ok" and flaky.calls == 3


def test_retry_gives_up_then_raises_or_skips() -> None:
    flaky = Flaky(10, ConnectionResetError("reset"))
    with pytest.raises(SampleError, match="ConnectionResetError"):
        FaultPolicy(on_error="retry", retries=2, backoff=0.0).run(4, "a.jpg", flaky)
    assert flaky.calls == 3
    skipped = FaultPolicy(on_error="retry", retries=1, backoff=0.0, after_retries="skip").run(
        4, "a.jpg", Flaky(10, ConnectionResetError("reset"))
    )
    assert isinstance(skipped, Skipped) and skipped.attempts == 2 and skipped.index == 4


def test_permanent_faults_are_not_retried() -> None:
    for error in (FileNotFoundError("gone"), DecodeError("a.jpg", "corrupt")):
        flaky = Flaky(10, error)
        result = FaultPolicy(on_error="retry", backoff=0.0, after_retries="skip").run(1, "a.jpg", flaky)
        assert isinstance(result, Skipped) and flaky.calls == 1


def test_bugs_are_never_skipped() -> None:
    with pytest.raises(TypeError):
        FaultPolicy(on_error="skip").run(0, None, Flaky(1, TypeError("bug in a transform")))


def test_errors_survive_the_dataloader_reraise() -> None:
    rebuilt = SampleError(
        "Caught SampleError in DataLoader worker process 0.\\nSampleError: sample 12 ('x') failed"
    )
    assert rebuilt.index == 12
    assert DecodeError("just a message").reason == "just a message"


def test_fault_report_counts_unique_samples_and_serialises() -> None:
    report = FaultReport()
    first = Skipped(3, "b.jpg", "DecodeError", "truncated")
    batches = [{"x": torch.zeros(1), "skipped": [first]}, {"skipped": [first]}, {"x": torch.zeros(2)}]
    assert len(list(report.watch(batches))) == 2
    assert len(report) == 1 and len(report.events) == 2
    assert json.loads(report.to_json())[0]["path"] == "b.jpg"
    assert "1 sample(s) skipped" in str(report)
    assert str(FaultReport()) == "FaultReport: no samples skipped"


def test_collate_drops_skipped_and_records_them() -> None:
    marker = Skipped(1, "bad.jpg", "DecodeError", "truncated")
    batch = collate(
        [{"image": torch.ones(3, 2, 2), "label": 0}, marker, {"image": torch.zeros(3, 2, 2), "label": 1}]
    )
    assert batch["image"].shape == (2, 3, 2, 2) and batch["label"].tolist() == [0, 1]
    assert batch["skipped"] == [marker]
    with pytest.raises(CollateError, match="not dicts"):
        collate([torch.zeros(1), marker])


def test_collate_matches_default_collate_on_equal_shapes() -> None:
    samples = [
        {
            "image": torch.full((3, 4, 4), i, dtype=torch.uint8),
            "label": i,
            "score": 0.5 * i,
            "name": f"s{i}",
            "array": np.full(2, i, np.float32),
            "pair": (i, torch.tensor([i])),
        }
        for i in range(3)
    ]
    ours, reference = collate(samples), default_collate(samples)
    assert set(ours) == set(reference)
    for key in ("image", "label", "score", "array"):
        assert torch.equal(ours[key], reference[key]) and ours[key].dtype == reference[key].dtype
    assert ours["name"] == reference["name"]
    assert torch.equal(ours["pair"][1], reference["pair"][1])


def test_collate_shape_mismatch_names_field_shapes_and_fix() -> None:
    with pytest.raises(CollateError) as caught:
        collate([{"image": torch.zeros(3, 4, 4)}, {"image": torch.zeros(3, 5, 4)}])
    message = str(caught.value)
    assert (
        "batch.image" in message
        and "(3, 4, 4)" in message
        and "(3, 5, 4)" in message
        and "PadImages" in message
    )
    with pytest.raises(CollateError, match="different keys"):
        collate([{"a": 1}, {"b": 1}])
