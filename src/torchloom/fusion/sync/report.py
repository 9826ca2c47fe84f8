"""What a TimeSync did with every input record, and the error for unusable timestamps."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class SyncReport:
    """Per stream, how many input records were used, skipped or dropped (they sum to the total).

    A record is *used* when a kept tick chose it, *dropped* when only dropped ticks chose it, and
    *skipped* when no tick chose it (it lies between ticks, or an equal timestamp replaced it).

    Example:
        >>> report = SyncReport()
        >>> report.add("imu", total=5, used=3, dropped=1)
        >>> print(report)
        SyncReport (records used / skipped / dropped of total):
          imu: 3 / 1 / 1 of 5
    """

    total: dict[str, int] = field(default_factory=dict)
    used: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, *, total: int, used: int, dropped: int) -> None:
        """Record ``name``'s counts; the records neither used nor dropped are skipped."""
        self.total[name], self.used[name], self.dropped[name] = total, used, dropped
        self.skipped[name] = total - used - dropped

    def __str__(self) -> str:
        lines = ["SyncReport (records used / skipped / dropped of total):"]
        lines += [
            f"  {name}: {self.used[name]} / {self.skipped[name]} / {self.dropped[name]} of {self.total[name]}"
            for name in self.total
        ]
        return "\n".join(lines)


def count_chosen(total: int, kept: list[np.ndarray], dropped: list[np.ndarray]) -> tuple[int, int]:
    """``(used, dropped)`` among a stream's ``total`` records, given the input positions chosen by
    kept ticks and by dropped ticks (a record chosen by both is used).

    Example:
        >>> count_chosen(4, kept=[np.array([0, 3])], dropped=[np.array([0, 2])])
        (2, 1)
    """
    used = np.zeros(total, dtype=bool)
    for positions in kept:
        used[positions] = True
    count = int(np.count_nonzero(used))
    if not any(len(positions) for positions in dropped):
        return count, 0
    for positions in dropped:
        used[positions] = True
    return count, int(np.count_nonzero(used)) - count
