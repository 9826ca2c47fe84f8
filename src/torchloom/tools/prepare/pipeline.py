"""The work of ``torchloom prepare``: label, check, split and write a manifest (no printing).

:func:`prepare_dataset` reads a raw image folder (never writing to it), labels its images from a
map or filename rules, splits them with :func:`torchloom.tools.prepare.split.stratified_split`, and
writes ``OUT/manifest.parquet`` and ``OUT/manifest.csv`` (plus ``OUT/problems.csv`` listing
every file or label entry left out, when there are any). With ``materialize``, it also builds
``OUT/<split>/<label>/<file>`` folders. A re-run keeps the split of every file the previous
manifest placed (``OUT/manifest.parquet``, or ``previous=``) and places only the new ones.

Manifest columns: ``image`` (the path :class:`torchloom.ManifestDataset` reads: relative to OUT
when materialized, so ``ManifestDataset("OUT/manifest.parquet")`` works as is; otherwise
relative to RAW, so pass ``root=RAW``), ``label``, ``split``, ``source`` (the path relative to
RAW), ``blake2b`` (128-bit content hash), ``bytes`` (the file's size, which a
:class:`~torchloom.ManifestDataset` on an object store checks every read against),
``rebalanced`` (moved out of its hash split by balancing) and ``duplicate_group`` (``-1`` when
not grouped).

RAW may be a URL (``s3://bucket/raw``, reached with ``storage_options``): its prefix is listed
once and walked by the same rules, each object read in one GET; the manifest's paths stay
relative to RAW (pass ``root=RAW`` and the same ``storage_options`` to the dataset). Materializing
and ``group_duplicates`` need a local RAW. ``manifest.csv`` holds the same,
escaped for spreadsheets (:mod:`torchloom.tools.output_files`: a path that would run as a formula
gets ``./`` before it); every file is written atomically.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pa_parquet

from torchloom.datasets.discovery import Exclusion, find_tree
from torchloom.datasets.listing import PrefixListing
from torchloom.datasets.options import IndexingSettings, object_store
from torchloom.errors import ConfigError
from torchloom.io.files import Inside, is_url, lies_inside
from torchloom.io.objects import ObjectRoot, ObjectStore
from torchloom.tools.doctor.duplicates import duplicate_groups
from torchloom.tools.output_files import refuse_output_inside, write_atomically, write_csv
from torchloom.tools.prepare.labels import Labelling, Rule, label_by_map, label_by_rules, parse_rules
from torchloom.tools.prepare.materialize import MaterializeMode, check_folder_name, materialize, target_names
from torchloom.tools.prepare.previous import previous_manifest, read_previous_splits
from torchloom.tools.prepare.raw import FileCheck, check_files
from torchloom.tools.prepare.split import NEW, SPLIT_NAMES, stratified_split
from torchloom.tools.terminal import Output, printable

__all__ = ["PrepareResult", "parse_rules", "prepare_dataset"]

MANIFEST_STEM = "manifest"
PROBLEMS_FILE = "problems.csv"
STAGING_FOLDER = ".torchloom-prepare-staging"
#: Key of the prepare settings in the Parquet manifest's schema metadata.
METADATA_KEY = b"torchloom.prepare"
#: Problem kinds, in the order they are reported.
PROBLEM_KINDS = ("unmatched", "unknown label entry", "ambiguous", "unreadable", "duplicate label conflict")
#: Manifest columns holding paths (escaped as paths in manifest.csv).
PATH_COLUMNS = ("image", "source")


@dataclass
class PrepareResult:
    """What :func:`prepare_dataset` produced and everything it left out, by kind.

    Example:
        >>> import numpy as np, os, simplejpeg, tempfile
        >>> from torchloom.tools.prepare import parse_rules, prepare_dataset
        >>> with tempfile.TemporaryDirectory() as raw, tempfile.TemporaryDirectory() as out:
        ...     for name in ["ok_1.jpg", "ok_2.jpg", "bad_1.jpg", "ok_3.txt", "what.jpg"]:
        ...         image = simplejpeg.encode_jpeg(np.full((8, 8, 3), len(name), np.uint8))
        ...         _ = open(os.path.join(raw, name), "wb").write(image)
        ...     rules = parse_rules(["ok:ok_", "bad:bad_"])
        ...     result = prepare_dataset(raw, out, rules=rules, fractions=(0.5, 0.5), progress=False)
        >>> {kind: len(left) for kind, left in result.problems.items() if left}
        {'unmatched': 1}
        >>> result.classes, result.manifest.num_rows
        (['bad', 'ok'], 3)
    """

    manifest: pa.Table
    split_names: tuple[str, ...]
    classes: list[str]
    problems: dict[str, list[tuple[str, str]]]
    #: Entries of RAW that are not images (paths relative to RAW), with the reason.
    ignored: list[Exclusion] = field(default_factory=list)
    duplicate_groups: int = 0
    copied_instead_of_linked: int = 0
    written: list[str] = field(default_factory=list)
    #: The previous manifest whose splits were kept (``None``: none was read), how many files kept
    #: their split from it, and how many it placed elsewhere moved to join a duplicate group.
    previous: str | None = None
    kept: int = 0
    moved_to_group: int = 0
    #: Warnings about files kept, such as a class left without a file in a split.
    warnings: list[str] = field(default_factory=list)

    @property
    def problem_count(self) -> int:
        return sum(len(items) for items in self.problems.values())

    def counts(self) -> np.ndarray:
        """Files per class (rows, in :attr:`classes` order) and split (columns)."""
        class_number = {label: number for number, label in enumerate(self.classes)}
        split_number = {split: number for number, split in enumerate(self.split_names)}
        counts = np.zeros((len(self.classes), len(self.split_names)), dtype=np.int64)
        rows = [class_number[label] for label in self.manifest.column("label").to_pylist()]
        columns = [split_number[split] for split in self.manifest.column("split").to_pylist()]
        np.add.at(counts, (np.asarray(rows, np.int64), np.asarray(columns, np.int64)), 1)
        return counts


def check_output_folder(raw: str, out: str, *, materializing: bool) -> None:
    """Refuse an ``out`` inside ``raw`` (raw is never written), a ``raw`` that a rebuild of
    ``out``'s split folders would delete, and (when ``materializing``) split folders in ``out``
    that prepare did not make."""
    if is_url(out):
        raise ConfigError(f"--out {out!r} is a URL; prepare writes its manifest to a local folder")
    if is_url(raw) and materializing:
        raise ConfigError(
            f"--materialize copies RAW's files into --out, but RAW {raw!r} is a URL: use the "
            "manifest as it is (ManifestDataset(..., root=RAW, storage_options=...))"
        )
    if not is_url(raw):  # a local OUT lies neither inside a URL RAW nor around it
        _refuse_overlap(raw, out)
    ours = os.path.exists(os.path.join(out, f"{MANIFEST_STEM}.csv"))
    for name in SPLIT_NAMES if materializing else ():
        if os.path.exists(os.path.join(out, name)) and not ours:
            raise ConfigError(
                f"{os.path.join(out, name)!r} exists and was not made by torchloom prepare "
                f"(no {MANIFEST_STEM}.csv beside it); choose an empty --out"
            )


def _refuse_overlap(raw: str, out: str) -> None:
    refuse_output_inside(raw, out, "RAW", "prepare never writes into RAW")
    real_raw, real_out = os.path.realpath(raw), os.path.realpath(out)
    for name in (*SPLIT_NAMES, STAGING_FOLDER):
        if lies_inside(real_raw, os.path.join(real_out, name)):
            raise ConfigError(f"RAW {raw!r} is inside {os.path.join(out, name)!r}, which prepare rebuilds")


def prepare_dataset(
    raw: str,
    out: str,
    *,
    label_entries: Sequence[tuple[str, str]] | None = None,
    rules: Sequence[Rule] | None = None,
    fractions: Sequence[float] = (0.8, 0.1, 0.1),
    seed: int = 0,
    materialize: MaterializeMode | None = None,
    group_duplicates: bool = False,
    num_threads: int | None = None,
    progress: bool = True,
    previous: str | None = None,
    storage_options: Mapping[str, Any] | ObjectStore | None = None,
) -> PrepareResult:
    """Label, check, split and write ``OUT/manifest.parquet`` and ``OUT/manifest.csv`` (the columns
    and the checks: :mod:`torchloom.tools.prepare.pipeline`'s notes); give ``label_entries`` (from
    :func:`torchloom.tools.prepare.read_label_map`) or ``rules``. ``materialize``:
    ``"link"`` or ``"copy"`` also builds the ``out/<split>/<label>/`` folders (``--materialize``).
    ``previous``: the manifest of an earlier run whose files keep their split (default:
    ``out/manifest.parquet`` when there is one; see :mod:`torchloom.tools.prepare.split`).
    ``num_threads``: threads checking and hashing the files (default: the one rule for file work,
    see :class:`~torchloom.datasets.IndexingOptions`). ``progress``: a progress bar while they run,
    shown on a terminal once the work has taken a second. ``storage_options``: how to reach a
    ``raw`` given as a URL, as datasets take it.

    Example:
        >>> import numpy as np, os, simplejpeg, tempfile
        >>> from torchloom.tools.prepare import parse_rules, prepare_dataset
        >>> raw, out = tempfile.mkdtemp(), tempfile.mkdtemp()
        >>> for name in ["ok_1.jpg", "ok_2.jpg", "bad_1.jpg"]:
        ...     _ = open(os.path.join(raw, name), "wb").write(
        ...         simplejpeg.encode_jpeg(np.full((8, 8, 3), len(name), np.uint8)))
        >>> rules = parse_rules(["ok:ok_", "bad:bad_"])
        >>> result = prepare_dataset(raw, out, rules=rules, fractions=(0.5, 0.5))
        >>> result.manifest.column("split").to_pylist(), result.problem_count
        (['train', 'train', 'val'], 0)
    """
    if (label_entries is None) == (rules is None):
        raise ConfigError("give exactly one of label_entries= (a label map) or rules= (filename rules)")
    check_output_folder(raw, out, materializing=materialize is not None)
    names = tuple(SPLIT_NAMES[: len(fractions)])
    previous = previous_manifest(out, previous)
    previous_splits = read_previous_splits(previous, names) if previous is not None else {}
    inside: Inside
    if is_url(raw):
        if group_duplicates:
            raise ConfigError(f"--group-duplicates needs a local RAW; {raw!r} is a URL")
        inside = ObjectRoot(raw, object_store(storage_options))
        found = find_tree(inside.url, lister=PrefixListing(inside, progress=progress))
        num_threads = IndexingSettings(num_threads=num_threads).threads_for(inside)
    else:
        found = find_tree(raw)  # never follows a link out of RAW; hidden entries are left out
        inside = os.path.realpath(raw)  # and no read does either, whatever changes after the walk
    files = found.relative_paths()
    if label_entries is not None:
        labelling = label_by_map(files, label_entries)
    else:
        labelling = label_by_rules(files, rules or ())
    bar = partial(Output().progress, description="checking and hashing") if progress else None
    checks = check_files(found.paths.to_list(), num_threads=num_threads, progress=bar, inside=inside)
    checks = [_check_name(path, check) for path, check in zip(files, checks, strict=True)]
    refused = [(found.relative(item.path), item.text) for item in found.refused]
    problems = _problems(labelling, refused, files, checks)
    rows = [
        i
        for i, (label, check) in enumerate(zip(labelling.labels, checks, strict=True))
        if label and not check.problem
    ]
    paths = [files[i] for i in rows]
    labels = [str(labelling.labels[i]) for i in rows]
    classes = sorted(set(labels))
    if materialize is not None:
        for label in classes:
            check_folder_name(label, "label")
    # Groups come sorted, ordered by their first member (see duplicate_groups).
    kept = [found.paths[i] for i in rows]
    groups = duplicate_groups(kept, num_threads=num_threads) if group_duplicates else []
    unit_of, group_of = _units(len(paths), groups)
    problems["duplicate label conflict"] = _label_conflicts(groups, paths, labels)
    first, unit_previous = _unit_firsts(paths, unit_of, previous_splits)
    class_number = {label: number for number, label in enumerate(classes)}
    unit_keys = [paths[row] for row in first.tolist()]
    unit_classes = np.array([class_number[labels[row]] for row in first.tolist()], dtype=np.int64)
    result = stratified_split(unit_keys, unit_classes, fractions, seed=seed, previous=unit_previous)
    split = [names[result.split[unit]] for unit in unit_of]
    table = pa.table(
        {
            "image": paths,
            "label": labels,
            "split": split,
            "source": paths,
            "blake2b": [checks[i].digest for i in rows],
            "bytes": pa.array([checks[i].size for i in rows], pa.int64()),
            "rebalanced": [bool(result.rebalanced[unit]) for unit in unit_of],
            "duplicate_group": group_of.tolist(),
        }
    )
    ignored = [item._replace(path=found.relative(item.path)) for item in found.excluded if not item.refused]
    prepared = PrepareResult(table, names, classes, problems, ignored, len(groups), previous=previous)
    before = np.array([previous_splits.get(path, NEW) for path in paths], dtype=np.int64)
    placed, after = before != NEW, result.split[unit_of]
    prepared.kept = int(np.sum(placed & (after == before)))
    prepared.moved_to_group = int(np.sum(placed & (after != before)))
    prepared.warnings = _empty_splits(prepared, fractions)
    if paths:
        _write(prepared, raw, out, fractions, seed, materialize, inside)
    return prepared


def _check_name(path: str, check: FileCheck) -> FileCheck:
    """``check``, or the refusal of a file whose relative ``path`` a manifest (UTF-8 text in every
    format it is written in) cannot hold: bytes of another encoding, kept in str as surrogates."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        why = f"its name is not valid UTF-8 ({os.fsencode(path)!r}), so no manifest can name it"
        return FileCheck("", f"{why}; rename it (e.g. `convmv -f latin1 -t utf8 --notest`)")
    return check


def _problems(
    labelling: Labelling, refused: list[tuple[str, str]], files: list[str], checks: list[FileCheck]
) -> dict[str, list[tuple[str, str]]]:
    """Problems by kind; an unreadable file is listed as unreadable only."""
    unreadable = {path: check.problem for path, check in zip(files, checks, strict=True) if check.problem}
    return {
        "unmatched": [
            (path, "no label for this image") for path in labelling.unmatched if path not in unreadable
        ],
        "unknown label entry": labelling.unknown,
        "ambiguous": [(path, why) for path, why in labelling.ambiguous if path not in unreadable],
        "unreadable": refused + list(unreadable.items()),
    }


def _units(count: int, groups: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Each row's unit number (a group is one unit) and its duplicate group (``-1`` if none)."""
    group_of = np.full(count, -1, dtype=np.int64)
    for number, members in enumerate(groups):
        group_of[members] = number
    unit_of = np.empty(count, dtype=np.int64)
    first_row: dict[int, int] = {}
    next_unit = 0
    for row in range(count):
        group = int(group_of[row])
        if group >= 0 and group in first_row:
            unit_of[row] = unit_of[first_row[group]]
            continue
        first_row[group] = row
        unit_of[row] = next_unit
        next_unit += 1
    return unit_of, group_of


def _unit_firsts(
    paths: list[str], unit_of: np.ndarray, previous: dict[str, int]
) -> tuple[np.ndarray, np.ndarray]:
    """Per unit: the row of its smallest path (its key and its label), and the split the previous
    manifest gave its smallest path that it names (:data:`NEW` when it names none). One pass."""
    count = int(unit_of.max()) + 1 if len(unit_of) else 0
    first = np.full(count, -1, dtype=np.int64)
    placed = np.full(count, -1, dtype=np.int64)  # the row whose previous split the unit keeps
    for row, unit in enumerate(unit_of.tolist()):
        if first[unit] < 0 or paths[row] < paths[first[unit]]:
            first[unit] = row
        if paths[row] in previous and (placed[unit] < 0 or paths[row] < paths[placed[unit]]):
            placed[unit] = row
    unit_previous = np.array(
        [NEW if row < 0 else previous[paths[row]] for row in placed.tolist()], dtype=np.int64
    )
    return first, unit_previous


def _empty_splits(prepared: PrepareResult, fractions: Sequence[float]) -> list[str]:
    """A warning per class left without a file in a split that its fraction asks files for."""
    wanted = ",".join(f"{fraction:g}" for fraction in fractions)
    warnings = []
    for label, row in zip(prepared.classes, prepared.counts(), strict=True):
        empty = [
            name
            for name, fraction, count in zip(prepared.split_names, fractions, row.tolist(), strict=True)
            if fraction > 0 and count == 0
        ]
        if empty:
            splits = " or ".join(empty)
            warnings.append(
                f"class {label!r} has no {splits} file ({int(row.sum())} file(s) at --fractions {wanted}): "
                f"add files of it, or it cannot be evaluated in {splits}"
            )
    return warnings


def _label_conflicts(groups: list[list[int]], paths: list[str], labels: list[str]) -> list[tuple[str, str]]:
    conflicts = []
    for group in groups:
        found = sorted({labels[i] for i in group})
        if len(found) > 1:
            members = ", ".join(f"{paths[i]} ({labels[i]})" for i in group)
            conflicts.append((paths[group[0]], f"duplicates labelled {found}: {members}"))
    return conflicts


def _write(
    prepared: PrepareResult,
    raw: str,
    out: str,
    fractions: Sequence[float],
    seed: int,
    mode: MaterializeMode | None,
    inside: Inside,
) -> None:
    os.makedirs(out, exist_ok=True)
    table = prepared.manifest
    if mode is not None:
        images = _image_paths(table)
        staging = os.path.join(out, STAGING_FOLDER)
        shutil.rmtree(staging, ignore_errors=True)
        sources = [os.path.join(raw, *p.split("/")) for p in table.column("source").to_pylist()]
        targets = [os.path.join(staging, *p.split("/")) for p in images]
        local = inside if isinstance(inside, str) else None  # check_output_folder refused a URL RAW
        prepared.copied_instead_of_linked = materialize(sources, targets, mode=mode, inside=local)
        for name in SPLIT_NAMES:
            shutil.rmtree(os.path.join(out, name), ignore_errors=True)
            if os.path.isdir(os.path.join(staging, name)):
                os.replace(os.path.join(staging, name), os.path.join(out, name))
        shutil.rmtree(staging)
        table = table.set_column(0, "image", pa.array(images, pa.string()))
        prepared.manifest = table
    source = raw if is_url(raw) else os.path.abspath(raw)
    settings = {"raw": source, "fractions": list(fractions), "seed": seed, "materialize": mode}
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps(settings).encode()})
    parquet, csv = (os.path.join(out, f"{MANIFEST_STEM}{suffix}") for suffix in (".parquet", ".csv"))
    write_atomically(parquet, lambda handle: pa_parquet.write_table(table, handle))
    write_atomically(csv, lambda handle: write_csv(table, handle, path_columns=PATH_COLUMNS))
    prepared.written = [parquet, csv]
    problems = os.path.join(out, PROBLEMS_FILE)
    rows = [(kind, name, reason) for kind, items in prepared.problems.items() for name, reason in items]
    if rows:
        kinds, names, reasons = zip(*rows, strict=True)
        names = tuple(printable(name) for name in names)  # a name that is not UTF-8, still named
        problem_table = pa.table({"kind": list(kinds), "name": list(names), "reason": list(reasons)})
        write_atomically(problems, lambda handle: write_csv(problem_table, handle, path_columns=("name",)))
        prepared.written.append(problems)
    elif os.path.exists(problems):
        os.remove(problems)


def _image_paths(table: pa.Table) -> list[str]:
    """``<split>/<label>/<name>`` per row, names unique within each folder."""
    splits, labels, sources = (table.column(c).to_pylist() for c in ("split", "label", "source"))
    images = [""] * len(sources)
    folders: dict[tuple[str, str], list[int]] = {}
    for row, key in enumerate(zip(splits, labels, strict=True)):
        folders.setdefault(key, []).append(row)
    for (split, label), rows in folders.items():
        for row, name in zip(rows, target_names([sources[r] for r in rows]), strict=True):
            images[row] = f"{split}/{label}/{name}"
    return images
