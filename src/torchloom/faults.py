"""Fault policy for bad samples: raise, skip with a record, or retry transient I/O.

A dataset with ``on_error="skip"`` returns a :class:`Skipped` marker in place of a broken
sample. :func:`torchloom.collate` drops the markers and lists them in the batch under
``"skipped"``; a :class:`FaultReport` reads them from every batch, whichever worker process
made it, so the user sees exactly what was not trained on.

Example:
    >>> from torchloom import FaultPolicy
    >>> policy = FaultPolicy.parse("skip")
    >>> result = policy.run(3, "bad.jpg", lambda: open("/nonexistent/bad.jpg", "rb"))
    >>> result.index, result.error
    (3, 'FileNotFoundError')
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, TypeVar

from torchloom.errors import (
    ConfigError,
    DataError,
    DecodeError,
    SampleError,
    SkippedSampleError,
    check_choice,
)

__all__ = [
    "SKIPPED_KEY",
    "FaultPolicy",
    "FaultReport",
    "SampleError",
    "Skipped",
    "SkippedSampleError",
]

T = TypeVar("T")

OnError = Literal["raise", "skip", "retry"]
ON_ERROR_CHOICES = ("raise", "skip", "retry")
#: The batch key under which collate lists the samples it dropped.
SKIPPED_KEY = "skipped"
# Errors a data fault may raise; anything else (a transform's TypeError, a TransformError) is a bug
# and always propagates, whatever the policy.
DATA_FAULTS: tuple[type[BaseException], ...] = (OSError, DataError)
# OSErrors that another attempt will not fix.
PERMANENT_OS_ERRORS: tuple[type[BaseException], ...] = (
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)


@dataclass(frozen=True)
class Skipped:
    """Marker returned in place of a sample that failed under the ``"skip"`` policy.

    :func:`torchloom.collate` drops it and records it. Anything that treats it as a sample (torch's
    default collate, indexing it like a dict) gets a :class:`SkippedSampleError` saying so and
    naming the fix.

    Example:
        >>> from torchloom import Skipped, collate
        >>> marker = Skipped(3, "cat.jpg", "DecodeError", "file is empty (0 bytes)")
        >>> collate([marker])["skipped"][0].path
        'cat.jpg'
    """

    index: int
    path: str | None
    error: str
    reason: str
    attempts: int = 1
    #: Which dataset skipped it (its repr); with ``index``, what a :class:`FaultReport` keys on.
    dataset: str = ""

    def _misused(self) -> SkippedSampleError:
        return SkippedSampleError(
            f"sample {self.index} ({self.path!r}) was skipped under on_error='skip' ({self.error}: "
            f"{self.reason}), and something used the Skipped marker as a sample: most likely the "
            "DataLoader's default collate. Pass collate_fn=torchloom.collate (it drops skipped "
            "samples and lists them under batch['skipped']), or use on_error='raise'"
        )

    def __getitem__(self, key: Any) -> Any:
        raise self._misused()

    def __len__(self) -> int:
        raise self._misused()

    def __iter__(self) -> Iterator[Any]:
        raise self._misused()

    def __bool__(self) -> bool:
        return True

    def pin_memory(self) -> Skipped:
        """The marker itself: ``pin_memory=True`` (DataLoader, Loader) leaves batch["skipped"] as it is
        (torch's pinning asks an object for ``pin_memory`` before treating it as a sequence)."""
        return self


# torch's default collate takes the Sequence branch for a registered class and calls len(): the
# marker's error (with the fix) is raised instead of "found <class Skipped>".
Sequence.register(Skipped)


@dataclass(frozen=True)
class FaultPolicy:
    """What a dataset does when loading a sample fails.

    Args:
        on_error: ``"raise"`` (a :class:`SampleError` with the cause chained), ``"skip"``
            (a :class:`Skipped` marker) or ``"retry"`` (``retries`` more attempts for transient
            I/O errors, waiting ``backoff`` seconds, doubled each time, then ``after_retries``).
        retries: extra attempts under ``"retry"``.
        backoff: first wait between attempts, in seconds.
        after_retries: ``"raise"`` or ``"skip"`` once retries are used up, or for a
            non-transient fault (a corrupt file is not retried).

    Example:
        >>> FaultPolicy(on_error="retry", retries=2, after_retries="skip").on_error
        'retry'
    """

    on_error: OnError = "raise"
    retries: int = 3
    backoff: float = 0.05
    after_retries: Literal["raise", "skip"] = "raise"

    def __post_init__(self) -> None:
        check_choice("on_error", self.on_error, ON_ERROR_CHOICES)
        if self.after_retries not in ("raise", "skip"):
            raise ConfigError(f"Invalid after_retries={self.after_retries!r}; use 'raise' or 'skip'")
        if self.retries < 0 or self.backoff < 0:
            raise ConfigError(f"retries and backoff must be >= 0, got {self.retries=}, {self.backoff=}")

    @classmethod
    def parse(cls, value: str | FaultPolicy) -> FaultPolicy:
        """Accept a policy or one of the strings ``"raise"``, ``"skip"``, ``"retry"``."""
        if isinstance(value, FaultPolicy):
            return value
        check_choice("on_error", value, ON_ERROR_CHOICES)
        return cls(on_error=value)  # type: ignore[arg-type]

    def run(self, index: int, path: str | None, load: Callable[[], T], dataset: str = "") -> T | Skipped:
        """Call ``load`` under this policy for the sample ``index`` read from ``path`` (of ``dataset``)."""
        attempts = 1 + (self.retries if self.on_error == "retry" else 0)
        final = self.after_retries if self.on_error == "retry" else self.on_error
        for attempt in range(1, attempts + 1):
            try:
                return load()
            except DATA_FAULTS as exc:
                transient = isinstance(exc, OSError) and not isinstance(exc, PERMANENT_OS_ERRORS)
                if transient and attempt < attempts:
                    time.sleep(self.backoff * 2 ** (attempt - 1))
                    continue
                if final == "skip":
                    reason = exc.reason if isinstance(exc, DecodeError) else str(exc)
                    return Skipped(index, path, type(exc).__name__, reason, attempt, dataset)
                raise SampleError(index, path, f"{type(exc).__name__}: {exc}") from exc
            except Exception as exc:  # a bug, not a data fault: keep its type, say where it happened
                if hasattr(exc, "add_note"):
                    exc.add_note(f"while loading sample {index} ({path!r})")
                raise
        raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover


def _escaped(text: str) -> str:
    """``text`` with control characters escaped (printable Unicode kept)."""
    return repr(text)[1:-1] if not text.isprintable() else text


class FaultReport:
    """Collects the samples skipped under the ``"skip"`` policy, across worker processes.

    Wrap the loader with :meth:`watch`; each batch's ``"skipped"`` list (filled by
    :func:`torchloom.collate`) is recorded, and batches left with no samples are not yielded.

    Example:
        >>> report = FaultReport()
        >>> batches = [{"x": [1], "skipped": [Skipped(4, "a.jpg", "DecodeError", "truncated")]}]
        >>> [b["x"] for b in report.watch(batches)]
        [[1]]
        >>> [s.path for s in report.skipped]
        ['a.jpg']
    """

    def __init__(self) -> None:
        self._events: list[Skipped] = []

    def watch(self, batches: Iterable[Any]) -> Iterator[Any]:
        """Yield the batches of ``batches``, recording their skipped samples."""
        for batch in batches:
            if self.record_batch(batch):
                yield batch

    def record_batch(self, batch: Any) -> bool:
        """Record a batch's skipped samples; return whether it still holds any sample."""
        if not isinstance(batch, dict) or SKIPPED_KEY not in batch:
            return True
        self._events.extend(batch[SKIPPED_KEY])
        return len(batch) > 1

    def record(self, skipped: Skipped) -> None:
        """Record one skipped sample (for loops without collate)."""
        self._events.append(skipped)

    @property
    def events(self) -> list[Skipped]:
        """Every skip, in the order seen (a sample skipped in two epochs appears twice)."""
        return list(self._events)

    @property
    def skipped(self) -> list[Skipped]:
        """Each skipped sample once (keyed by dataset and index), sorted by dataset, then index."""
        unique = {(event.dataset, event.index): event for event in self._events}
        return [unique[key] for key in sorted(unique)]

    def __len__(self) -> int:
        return len(self.skipped)

    def to_json(self) -> str:
        """The unique skipped samples as a JSON list of objects."""
        return json.dumps([asdict(event) for event in self.skipped], ensure_ascii=False, indent=2)

    def summary(self) -> str:
        """A short human-readable listing of what was not trained on."""
        skipped = self.skipped
        if not skipped:
            return "FaultReport: no samples skipped"
        lines = [f"FaultReport: {len(skipped)} sample(s) skipped ({len(self._events)} skip events)"]
        # Paths and reasons are shown as reprs: a newline or a terminal escape in a file name
        # cannot forge lines of this report.
        lines += [
            f"  {s.dataset + ' ' if s.dataset else ''}#{s.index} {s.path!r}: {s.error}: {_escaped(s.reason)}"
            for s in skipped
        ]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()
