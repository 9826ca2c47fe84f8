"""What :func:`~torchloom.resume.check_resume` found: a case per interrupted run, and the verdict.

A resumed epoch is compared with the reference run's. With the reference's world size, each rank's
sample ids must be the reference's, in order (or in any order, when asked). With another world
size the ranks split the rest of the epoch differently, so the epoch is compared over all ranks as
a multiset: every sample of the reference is there, nothing else is, and repeats are at most the
padding the resumed samplers report (``padded``: samples repeated so that every rank has the same
length).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

#: Failing cases :meth:`ResumeReport.summary` prints (the rest are counted).
SHOWN_FAILURES = 10
#: The kinds of :class:`Mismatch`.
MISMATCH_KINDS = ("lost", "repeated", "unexpected", "reordered", "error")


@dataclass(frozen=True)
class Mismatch:
    """The first difference of a resumed run from the reference.

    Attributes:
        kind: ``"lost"`` (a sample of the reference never delivered), ``"repeated"`` (delivered more
            often than in the reference), ``"unexpected"`` (not in the reference epoch),
            ``"reordered"`` (the same samples in another order) or ``"error"`` (resuming raised, for
            instance on a state that does not fit the new setting).
        epoch: the epoch it happened in (``None`` for an error).
        rank: the rank, when compared rank by rank (``None`` when compared over all ranks).
        sample: the sample id lost, repeated, unexpected or out of place (``None`` for an error).
        detail: a sentence saying what happened.

    Example:
        >>> print(Mismatch("lost", epoch=0, rank=0, sample=17, detail="1 sample lost"))
        sample 17 lost in epoch 0 on rank 0 (1 sample lost)
    """

    kind: str
    epoch: int | None
    rank: int | None
    sample: Hashable | None
    detail: str

    def __str__(self) -> str:
        if self.kind == "error":
            return f"resuming raised {self.detail}"
        where = f" on rank {self.rank}" if self.rank is not None else " over all ranks"
        return f"sample {self.sample!r} {self.kind} in epoch {self.epoch}{where} ({self.detail})"


@dataclass(frozen=True)
class ResumeCase:
    """One run interrupted at ``stop`` and resumed with ``world_size`` ranks of ``num_workers`` each.

    Attributes:
        stop: where the run was interrupted, in words (epoch, batch, and which seam it is).
        world_size: ranks of the resumed run.
        num_workers: the ``num_workers`` the resumed run's loaders were built with.
        mismatch: the first difference from the reference; ``None`` when it resumed exactly.

    Example:
        >>> ResumeCase("epoch 0 after batch 3 of 8 (mid-epoch)", world_size=1, num_workers=0).ok
        True
    """

    stop: str
    world_size: int
    num_workers: int
    mismatch: Mismatch | None = None

    @property
    def ok(self) -> bool:
        """Whether every epoch of this run was the reference exactly once."""
        return self.mismatch is None

    def __str__(self) -> str:
        setting = f"world_size={self.world_size}, num_workers={self.num_workers}"
        verdict = "ok" if self.mismatch is None else str(self.mismatch)
        return f"{self.stop}, resumed with {setting}: {verdict}"


@dataclass(frozen=True)
class ResumeReport:
    """The verdict of :func:`~torchloom.resume.check_resume` on a pipeline.

    Attributes:
        cases: every interrupted and resumed run, in the order they ran.
        samples_per_epoch: samples of each epoch of the reference run, over all ranks.
        world_size: ranks of the reference run.
        num_workers: the ``num_workers`` of the reference run.

    Example:
        >>> report = ResumeReport((ResumeCase("epoch 0 after batch 1 of 4", 1, 0),), (8, 8), 1, 0)
        >>> report.ok, report.first_failure
        (True, None)
    """

    cases: tuple[ResumeCase, ...]
    samples_per_epoch: tuple[int, ...]
    world_size: int
    num_workers: int

    @property
    def ok(self) -> bool:
        """Whether every case delivered every epoch as the reference, exactly once."""
        return bool(self.cases) and all(case.ok for case in self.cases)

    @property
    def failures(self) -> tuple[ResumeCase, ...]:
        """The cases that did not resume exactly."""
        return tuple(case for case in self.cases if not case.ok)

    @property
    def first_failure(self) -> ResumeCase | None:
        """The first case that did not resume exactly, or ``None``."""
        failures = self.failures
        return failures[0] if failures else None

    def summary(self) -> str:
        """A few lines: the verdict, the reference, and every failing case.

        Example:
            >>> print(ResumeReport((ResumeCase("epoch 0 after batch 1 of 4", 1, 0),), (8,), 1, 0).summary())
            resume exact: 1 of 1 cases (reference: 1 epoch(s) of [8] samples, world_size=1, num_workers=0)
        """
        failures = self.failures
        verdict = "resume exact" if self.ok else "resume NOT exact"
        lines = [
            f"{verdict}: {len(self.cases) - len(failures)} of {len(self.cases)} cases (reference: "
            f"{len(self.samples_per_epoch)} epoch(s) of {list(self.samples_per_epoch)} samples, "
            f"world_size={self.world_size}, num_workers={self.num_workers})"
        ]
        lines += [f"  {case}" for case in failures[:SHOWN_FAILURES]]
        if len(failures) > SHOWN_FAILURES:
            lines.append(f"  ... and {len(failures) - SHOWN_FAILURES} more (report.failures lists them all)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def compare_rank(
    epoch: int, rank: int, reference: Sequence[Hashable], got: Sequence[Hashable], *, ordered: bool = True
) -> Mismatch | None:
    """The first difference of one rank's epoch from the reference, in order (with ``ordered``).

    Example:
        >>> print(compare_rank(0, 0, [1, 2, 3], [1, 2, 2, 3]))
        sample 2 repeated in epoch 0 on rank 0 (delivered 4 samples, the reference 3: 0 lost, 1 repeated)
    """
    if list(got) == list(reference):
        return None
    found = _counted(epoch, rank, Counter(reference), Counter(got), reference, got, allowed_repeats=0)
    if found is not None or not ordered:
        return found
    position = next(at for at, (want, have) in enumerate(zip(reference, got, strict=True)) if want != have)
    return Mismatch(
        "reordered",
        epoch,
        rank,
        got[position],
        f"at position {position} the reference has {reference[position]!r}",
    )


def compare_all_ranks(
    epoch: int, reference: Sequence[Hashable], got: Sequence[Hashable], *, padded: int
) -> Mismatch | None:
    """The first difference of an epoch over all ranks from the reference, as multisets, allowing
    ``padded`` repeats (and the reference's own repeats of padding).

    Example:
        >>> compare_all_ranks(0, [0, 1, 2, 3], [0, 2, 1, 3, 0], padded=1) is None
        True
    """
    return _counted(epoch, None, Counter(reference), Counter(got), reference, got, allowed_repeats=padded)


def _counted(
    epoch: int,
    rank: int | None,
    want: Counter[Hashable],
    have: Counter[Hashable],
    reference: Sequence[Hashable],
    got: Sequence[Hashable],
    *,
    allowed_repeats: int,
) -> Mismatch | None:
    # Rank by rank every missing copy counts; over all ranks, a sample counts as lost only when no
    # copy of it arrived (the reference's own padding repeats may fall elsewhere after a re-split).
    deficit = want - have if rank is not None else Counter({s: 1 for s in want if s not in have})
    lost = [sample for sample in dict.fromkeys(reference) if deficit[sample] > 0]
    extra = have - want
    unexpected = [sample for sample in got if sample not in want]
    repeated = [sample for sample in got if sample in want and extra[sample] > 0]
    detail = (
        f"delivered {len(got)} samples, the reference {len(reference)}: {sum(deficit.values())} lost, "
        f"{sum(extra.values())} repeated"
    )
    if lost:
        return Mismatch("lost", epoch, rank, lost[0], detail)
    if unexpected:
        return Mismatch("unexpected", epoch, rank, unexpected[0], detail)
    if sum(extra.values()) > allowed_repeats:
        if allowed_repeats:
            detail += f", more than the {allowed_repeats} the samplers pad with"
        return Mismatch("repeated", epoch, rank, repeated[0], detail)
    return None
