"""Hold a new run's goals against the previous BENCHMARKS.md: what held, what moved.

Every section ends with a ``| goal | measured | met |`` table; a goal is matched by its text, so a
renamed goal shows as new. A ratio "held" when its goal's verdict is unchanged and it moved by less
than :data:`NOISE` (this machine's round-to-round spread of the ratios is 10-20 %).

Example:
    >>> old = "| goal | measured | met |\\n|---|---|---|\\n| a ≥ 1× b | 1.20× | yes |\\n"
    >>> new = "| goal | measured | met |\\n|---|---|---|\\n| a ≥ 1× b | 1.26× | yes |\\n"
    >>> [(row.goal, row.verdict) for row in compare_goals(goal_rows(old), goal_rows(new))]
    [('a ≥ 1× b', 'held')]
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The title of the section :func:`comparison_section` writes.
COMPARISON_TITLE = "## Against the previous run"
#: A ratio moving by less than this fraction, with its goal's verdict unchanged, held.
NOISE = 0.15
_GOAL_HEADER = "| goal | measured | met |"
_RATIO = re.compile(r"([0-9][0-9,]*\.?[0-9]*)×")


@dataclass(frozen=True)
class Goal:
    """One row of a goal table: the goal's text, the measured text and whether it was met."""

    goal: str
    measured: str
    met: str

    @property
    def ratio(self) -> float | None:
        found = _RATIO.search(self.measured)
        return float(found.group(1).replace(",", "")) if found else None


@dataclass(frozen=True)
class Compared:
    """A goal in the previous and the new run (``None`` where it is in one run only)."""

    goal: str
    before: Goal | None
    after: Goal | None
    verdict: str


def goal_rows(text: str) -> dict[str, Goal]:
    """Every row of every goal table in a BENCHMARKS.md text, by goal."""
    rows: dict[str, Goal] = {}
    in_table = False
    for line in text.splitlines():
        if line.strip() == _GOAL_HEADER:
            in_table = True
            continue
        if not in_table or line.startswith("|---"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) != 3:
            in_table = False
            continue
        rows[cells[0]] = Goal(*cells)
    return rows


def compare_goals(before: dict[str, Goal], after: dict[str, Goal]) -> list[Compared]:
    """The goals of both runs, in the new run's order (goals gone since last come after)."""
    compared = []
    for name in [*after, *(name for name in before if name not in after)]:
        old, new = before.get(name), after.get(name)
        compared.append(Compared(name, old, new, _verdict(old, new)))
    return compared


def _verdict(old: Goal | None, new: Goal | None) -> str:
    if old is None:
        return "new"
    if new is None:
        return "not measured"
    if old.met != new.met:
        return f"{old.met} → {new.met}"
    if old.ratio is None or new.ratio is None or old.ratio == 0:
        return "held" if old.measured == new.measured else "changed"
    change = new.ratio / old.ratio - 1
    return "held" if abs(change) < NOISE else f"{change:+.0%}"


def measured_here(text: str) -> str:
    """``text`` without its GPU section, which a run on this machine copies in, not re-measures."""
    return "\n## ".join(part for part in text.split("\n## ") if not part.startswith("GPU"))


def comparison_section(previous: str, fresh: str, previous_date: str) -> str:
    """A BENCHMARKS.md section holding the fresh run's goals against the previous file's (the GPU
    section, copied from ``benchmarks/GPU.md``, is left out of both)."""
    compared = compare_goals(goal_rows(measured_here(previous)), goal_rows(measured_here(fresh)))
    held = sum(row.verdict == "held" for row in compared)
    lines = [
        COMPARISON_TITLE,
        "",
        f"Each goal of this run beside the same goal in the previous BENCHMARKS.md ({previous_date}). "
        f"A ratio held when its verdict is unchanged and it moved by less than {NOISE:.0%}, the spread "
        f"of these ratios between rounds on this machine. {held} of {len(compared)} held.",
        "",
        "| goal | before | now | |",
        "|---|---|---|---|",
    ]
    for row in compared:
        before = row.before.measured if row.before else "—"
        after = row.after.measured if row.after else "—"
        lines.append(f"| {row.goal} | {before} | {after} | {row.verdict} |")
    return "\n".join(lines)


def written_on(text: str) -> str:
    """The date a BENCHMARKS.md says it was written (``"unknown"`` when it does not say)."""
    found = re.search(r" on (\d{4}-\d{2}-\d{2})", text)
    return found.group(1) if found else "unknown"
