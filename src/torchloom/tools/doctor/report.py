"""Turn one examination of a dataset into the doctor's report document (``report.json``).

Top-level keys (schema in :data:`torchloom.tools.doctor.schema.REPORT_SCHEMA`, version
:data:`~torchloom.tools.doctor.schema.SCHEMA_VERSION`):

- ``schema_version``: an integer, raised on any incompatible change;
- ``data``: source, layout (``classes``, ``splits``, ``files`` or ``manifest``), file count,
  split and class names, what was ignored as not a sample (with the reason, worded as every
  folder reader words it: :mod:`torchloom.datasets.discovery`);
- ``problems``: ``count``, ``by_kind`` and one readable ``message`` per problem (see below);
- ``bad_files``: unreadable, empty, truncated, corrupt, unsupported and non-image files, and the
  would-be samples the walk refused (kind ``refused``: links leading outside DATA, folders that
  cannot be listed, links to missing folders; for a manifest, rows left out), each with its reason;
- ``wrong_extension``: images whose extension names another format (a PNG named ``.jpg``; a HEIC
  photo named ``.jpg``, which no reader decodes, with the reader's ``reason``);
- ``duplicates``: ``groups`` (exact: identical bytes; near: perceptual hashes within
  ``near_max_distance`` bits) and ``pairs`` (every cross-split pair of a group, flagged ``leak``;
  else each member paired with the group's first), with Hamming distances;
- ``classes``: counts per split and class, the imbalance ratio (largest / smallest class of the
  training split) and a ``BalancedSampler`` call;
- ``images``: size range, distinct sizes, colour modes and formats of the readable images;
- ``normalize``: per-channel mean and std (0-1 scale) for ``torchloom.transforms.Normalize``;
- ``quality``: cleanvision's issue types (thresholds, counts, files);
- ``plots``: the PNG files written beside the report.

A **problem** (exit status 1) is: a bad file (a refused entry included), a wrong extension, an
exact duplicate (anywhere), a near duplicate across splits (train/val leakage), a class folder
without an image file (it keeps a label number that is never sampled), a folder beside the split
folders (never examined: classes named like splits, or a stray folder), no image file at all,
and images without labels: a folder of images without class folders, a manifest without a label
column, manifest rows with an empty label (each message names the layout expected). Near
duplicates within one split, class imbalance and quality issues are reported as warnings only.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from torchloom.datasets.discovery import (
    IMAGE_EXTENSIONS,
    REASON_BESIDE_SPLITS,
    REFUSAL_FIXES,
    Discovery,
    Exclusion,
)
from torchloom.tools.doctor.duplicates import NEAR_MAX_DISTANCE
from torchloom.tools.doctor.examine import Examination
from torchloom.tools.doctor.layout import LABEL_COLUMNS
from torchloom.tools.doctor.perceptual import hamming
from torchloom.tools.doctor.quality import (
    BLURRY_THRESHOLD,
    DARK_THRESHOLD,
    LIGHT_THRESHOLD,
    LOW_INFORMATION_THRESHOLD,
    ODD_ASPECT_RATIO_THRESHOLD,
    PIXEL_SCORES,
    aspect_ratio_scores,
    size_scores,
)
from torchloom.tools.doctor.schema import SCHEMA_VERSION

#: The kind of bad file the walk refused before it could be examined.
REFUSED = "refused"
#: Cross-split pairs listed per duplicate group at most (a group of n files has up to n²/4).
MAX_PAIRS_PER_GROUP = 50
#: A largest/smallest class ratio from which the report suggests a balanced sampler.
IMBALANCE_WARNING = 1.5
TRAIN_SPLITS = ("train", "training")
QUALITY_THRESHOLDS = {
    "dark": DARK_THRESHOLD,
    "light": LIGHT_THRESHOLD,
    "blurry": BLURRY_THRESHOLD,
    "low_information": LOW_INFORMATION_THRESHOLD,
    "odd_aspect_ratio": ODD_ASPECT_RATIO_THRESHOLD,
}


@dataclass(frozen=True)
class DuplicatePair:
    """Two files of one duplicate group (indices into the layout's paths)."""

    a: int
    b: int
    exact: bool
    distance: int
    leak: bool


def build_document(
    layout: Discovery,
    facts: Examination,
    groups: list[list[int]],
    pairs: list[DuplicatePair],
    *,
    near_max_distance: int = NEAR_MAX_DISTANCE,
) -> dict[str, Any]:
    """The report document (without ``plots``, filled in once they are written)."""
    split_of = [layout.split_names[s] for s in layout.splits.tolist()]

    def file(i: int) -> dict[str, str]:
        return {"path": layout.paths[i], "split": split_of[i]}

    bad = [
        {"path": item.path, "split": _split_holding(layout, item.path), "kind": REFUSED, "reason": item.text}
        for item in layout.refused
    ]
    bad += [
        {
            "path": layout.paths[i],
            "split": split_of[i],
            "kind": str(facts.problem[i]),
            "reason": str(facts.reason[i]),
        }
        for i in np.flatnonzero(~facts.readable & ~facts.wrong_extension).tolist()
    ]
    wrong = [
        {
            "path": layout.paths[i],
            "split": split_of[i],
            "extension": os.path.splitext(layout.paths[i])[1],
            "format": str(facts.found_format[i]),
            **({} if facts.readable[i] else {"reason": str(facts.reason[i])}),
        }
        for i in np.flatnonzero(facts.wrong_extension).tolist()
    ]
    group_docs = [
        {
            "kind": "exact" if len({facts.digest[i] for i in group}) == 1 else "near",
            "splits": sorted({split_of[i] for i in group}),
            "members": [file(i) for i in group],
        }
        for group in groups
    ]
    document: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "data": {
            "source": layout.root,
            "layout": layout.layout,
            "files": len(layout.paths),
            "splits": layout.split_names,
            "classes": layout.classes,
            "ignored": [{"path": item.path, "reason": item.text} for item in layout.ignored],
        },
        "bad_files": bad,
        "wrong_extension": wrong,
        "duplicates": {
            "near_max_distance": near_max_distance,
            "groups": group_docs,
            "pairs": [
                {"a": file(p.a), "b": file(p.b), "exact": p.exact, "distance": p.distance, "leak": p.leak}
                for p in pairs
            ],
        },
        "classes": _classes(layout),
        "images": _images(facts),
        "normalize": _normalize(layout, facts),
        "quality": _quality(layout, facts),
        "plots": [],
    }
    document["problems"] = _problems(document, _layout_problems(layout))
    return document


def duplicate_pairs(layout: Discovery, facts: Examination, groups: list[list[int]]) -> list[DuplicatePair]:
    """The pairs reported for each group: every cross-split pair (at most
    :data:`MAX_PAIRS_PER_GROUP`), or, for a group within one split, each member with the first."""
    pairs: list[DuplicatePair] = []
    for group in groups:
        splits = layout.splits[group]
        if len(set(splits.tolist())) > 1:
            candidates = [
                (a, b) for k, a in enumerate(group) for b in group[k + 1 :] if splits[k] != layout.splits[b]
            ]
        else:
            candidates = [(group[0], b) for b in group[1:]]
        for a, b in candidates[:MAX_PAIRS_PER_GROUP]:
            distance = int(hamming(facts.phash[a], facts.phash[b])) if facts.readable[[a, b]].all() else 0
            leak = bool(layout.splits[a] != layout.splits[b])
            pairs.append(DuplicatePair(a, b, bool(facts.digest[a] == facts.digest[b]), distance, leak))
    return pairs


def _layout_problems(layout: Discovery) -> list[tuple[str, str]]:
    """The problems of what was found, before a file is read: ``(kind, message)`` pairs."""
    problems = [(REFUSED, _refusal(item)) for item in layout.refused]
    problems += [
        (
            "beside_splits",
            f"folder beside the split folders: {item.path} is never examined (if "
            f"{layout.split_names} are classes beside it, rename them: FolderDataset refuses this root)",
        )
        for item in layout.ignored
        if item.reason == REASON_BESIDE_SPLITS
    ]
    refused_classes = {_class_holding(layout, item.path) for item in layout.refused}
    problems += [
        (
            "empty_class",
            f"empty class: {name!r} has no image file; it keeps a label number but is never sampled "
            "(add images, or remove the folder)",
        )
        for name in layout.empty_classes
        if name not in refused_classes  # its refusal says why
    ]
    if not len(layout.paths):
        counts = ", ".join(f"{count} {reason}" for reason, count in layout.counts().items())
        left_out = f" ({len(layout.excluded)} entries left out: {counts})" if counts else ""
        problems.append(
            (
                "no_images",
                f"no image files: nothing in {layout.root} was examined{left_out}; expected image files "
                f"({', '.join(IMAGE_EXTENSIONS)}) in {_EXPECTED}",
            )
        )
    return problems + _unlabelled(layout)


# The layouts doctor reads, as its messages name them.
_EXPECTED = "class folders DATA/<class>/<image>, split folders DATA/<split>/<class>/<image>, or a manifest"


def _unlabelled(layout: Discovery) -> list[tuple[str, str]]:
    """The problem of images that have no label, naming the layout that gives them one."""
    unlabelled = int(np.sum(layout.labels < 0))
    if not unlabelled:
        return []
    if layout.layout == "files":
        what = f"{unlabelled} image file(s) directly in {layout.root}, no class folders; expected {_EXPECTED}"
    elif not layout.classes:
        what = f"manifest {layout.root} has no label column; expected one of {list(LABEL_COLUMNS)}"
    else:
        first = int(np.flatnonzero(layout.labels < 0)[0])
        what = (
            f"{unlabelled} row(s) of manifest {layout.root} have an empty label "
            f"(first: {layout.paths[first]}); give every row a label"
        )
    return [("unlabelled", f"unlabelled: {what}")]


def _refusal(item: Exclusion) -> str:
    fix = REFUSAL_FIXES.get(item.reason)
    return f"{REFUSED}: {item.path} ({item.text})" + (f"; {fix}" if fix else "")


def _split_holding(layout: Discovery, path: str) -> str:
    """The split a refused entry of ``layout`` would have belonged to."""
    if layout.layout != "splits":
        return layout.split_names[0]
    first = layout.relative(path).split("/", 1)[0]
    return first if first in layout.split_names else layout.split_names[0]


def _class_holding(layout: Discovery, path: str) -> str | None:
    """The class folder a refused entry of ``layout`` lies in (or is), if any."""
    if layout.layout not in ("classes", "splits"):
        return None
    parts = layout.relative(path).split("/")
    depth = 1 if layout.layout == "splits" else 0
    return parts[depth] if len(parts) > depth else None


def _problems(document: dict[str, Any], layout_problems: list[tuple[str, str]]) -> dict[str, Any]:
    messages = [message for _, message in layout_problems]
    messages += [
        f"{f['kind']}: {f['path']} ({f['reason']})" for f in document["bad_files"] if f["kind"] != REFUSED
    ]
    messages += [  # a format no reader decodes: the reader's reason names both and the fix
        f"wrong extension: {f['path']} ({f['reason']})"
        if "reason" in f
        else f"wrong extension: {f['path']} is {f['format']}, named {f['extension']}"
        for f in document["wrong_extension"]
    ]
    kinds = Counter(kind for kind, _ in layout_problems)
    kinds.update(f["kind"] for f in document["bad_files"] if f["kind"] != REFUSED)
    kinds["wrong_extension"] = len(document["wrong_extension"])
    for pair in document["duplicates"]["pairs"]:
        a, b = pair["a"], pair["b"]
        if pair["leak"] or pair["exact"]:
            kind = ("exact" if pair["exact"] else "near") + ("_leak" if pair["leak"] else "_duplicate")
            kinds[kind] += 1
            where = f"{a['split']}/{b['split']} leak" if pair["leak"] else f"duplicate in {a['split']}"
            what = "identical bytes" if pair["exact"] else f"near duplicate, {pair['distance']} bits apart"
            messages.append(f"{where}: {a['path']} = {b['path']} ({what})")
    by_kind = {kind: count for kind, count in kinds.items() if count}
    return {"count": len(messages), "by_kind": by_kind, "messages": messages}


def _classes(layout: Discovery) -> dict[str, Any]:
    counts: dict[str, dict[str, int]] = {}
    for split_id, split in enumerate(layout.split_names):
        labels = layout.labels[(layout.splits == split_id) & (layout.labels >= 0)]
        numbers = np.bincount(labels, minlength=len(layout.classes))
        counts[split] = {name: int(n) for name, n in zip(layout.classes, numbers, strict=True)}
    train = next((s for s in layout.split_names if s.lower() in TRAIN_SPLITS), layout.split_names[0])
    present = [n for n in counts.get(train, {}).values() if n > 0]
    ratio = max(present) / min(present) if len(present) > 1 else None
    sampler = None
    if ratio is not None and ratio >= IMBALANCE_WARNING:
        sampler = 'BalancedSampler(dataset.targets, mode="inverse", seed=0)'
    return {"counts": counts, "imbalance_ratio": ratio, "sampler": sampler}


def _images(facts: Examination) -> dict[str, Any]:
    ok = facts.readable
    heights, widths = facts.height[ok], facts.width[ok]
    sizes = Counter(zip(heights.tolist(), widths.tolist(), strict=True))

    def summary(values: np.ndarray) -> dict[str, Any]:
        if len(values) == 0:
            return {"min": 0, "median": 0.0, "max": 0}
        return {"min": int(values.min()), "median": float(np.median(values)), "max": int(values.max())}

    return {
        "readable": int(ok.sum()),
        "height": summary(heights),
        "width": summary(widths),
        "distinct_sizes": len(sizes),
        "most_common_sizes": [{"size": [h, w], "count": n} for (h, w), n in sizes.most_common(5)],
        "modes": dict(Counter(facts.mode[ok].tolist()).most_common()),
        "formats": dict(Counter(facts.found_format[ok].tolist()).most_common()),
    }


def _normalize(layout: Discovery, facts: Examination) -> dict[str, Any]:
    train = [i for i, s in enumerate(layout.split_names) if s.lower() in TRAIN_SPLITS]
    use = facts.readable & (np.isin(layout.splits, train) if train else True)
    weights = (facts.height * facts.width)[use].astype(np.float64)
    if weights.sum() == 0:
        return {"over": "no readable image", "mean": [], "std": [], "call": None}
    mean = facts.channel_mean[use].T @ weights / weights.sum()
    square = facts.channel_square[use].T @ weights / weights.sum()
    std = np.sqrt(np.maximum(square - mean**2, 0.0))
    mean_text = ", ".join(f"{v:.4f}" for v in mean)
    std_text = ", ".join(f"{v:.4f}" for v in std)
    return {
        "over": f"{int(use.sum())} readable images"
        + (f" of split {layout.split_names[train[0]]!r}" if train else ""),
        "mean": [round(float(v), 4) for v in mean],
        "std": [round(float(v), 4) for v in std],
        "call": f"Normalize(mean=({mean_text}), std=({std_text}))",
    }


def _quality(layout: Discovery, facts: Examination) -> dict[str, Any]:
    ok = facts.readable
    flags: dict[str, np.ndarray] = {
        name: ok & (facts.scores[:, column] < QUALITY_THRESHOLDS[name])
        for column, name in enumerate(PIXEL_SCORES)
    }
    flags["grayscale"] = ok & facts.grayscale
    flags["odd_aspect_ratio"] = ok & (
        aspect_ratio_scores(facts.height, facts.width) < ODD_ASPECT_RATIO_THRESHOLD
    )
    odd = np.zeros(len(ok), dtype=bool)
    scores, threshold = size_scores(facts.height[ok], facts.width[ok])
    odd[np.flatnonzero(ok)] = scores < threshold
    flags["odd_size"] = odd
    return {
        "thresholds": {**QUALITY_THRESHOLDS, "odd_size": threshold},
        "counts": {name: int(mask.sum()) for name, mask in flags.items()},
        "files": {
            name: [layout.paths[i] for i in np.flatnonzero(mask).tolist()] for name, mask in flags.items()
        },
    }
