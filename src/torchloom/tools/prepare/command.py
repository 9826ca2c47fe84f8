"""``torchloom prepare``: a labelled, reproducible train/val(/test) split of a raw image folder.

::

    torchloom prepare RAW (--labels FILE.json|FILE.csv | --rule 'LABEL:substr,...' ...) --out DIR
        [--fractions 0.8,0.1,0.1] [--seed 0] [--previous MANIFEST] [--materialize link|copy]
        [--group-duplicates] [--json]

Writes ``DIR/manifest.parquet`` and ``DIR/manifest.csv`` (see
:mod:`torchloom.tools.prepare.pipeline` for the columns and :mod:`torchloom.tools.prepare.split` for the
split rule), ``DIR/problems.csv`` when anything was left out, and with ``--materialize``
``DIR/<split>/<label>/<file>``. RAW is only read; it may be a URL (``s3://bucket/raw``, with
``--storage-option``: :mod:`torchloom.tools.storage`), DIR is a local folder. A re-run keeps
every file's split from the previous manifest (``DIR/manifest.parquet``, or ``--previous``) and
places only new files.

Exit status: 0 when every image was labelled and readable and every label entry matched a
file; 1 when something was left out (unmatched, unknown, ambiguous or unreadable entries,
duplicates with conflicting labels; the manifest of the rest is still written) or the labels
could not be read; 2 for a usage error (missing RAW, label file or ``--previous`` manifest, bad
``--fractions`` or ``--rule``, ``--out`` inside RAW, a previous manifest with a split that
``--fractions`` does not make). A class left without a file in a split is a warning.

Example:
    >>> import argparse
    >>> parser = argparse.ArgumentParser()
    >>> args = add_parser(parser.add_subparsers()).parse_args(["raw", "--rule", "ok:good", "--out", "o"])
    >>> args.rule, args.fractions, args.seed
    (['ok:good'], '0.8,0.1,0.1', 0)
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from typing import Any

from torchloom.errors import ConfigError, MissingFileError, TorchloomError, UnsafeFileError
from torchloom.io.files import is_url
from torchloom.tools.prepare.labels import CSV_LABEL_COLUMNS, CSV_PATH_COLUMNS, parse_rules, read_label_map
from torchloom.tools.prepare.pipeline import (
    PROBLEM_KINDS,
    PrepareResult,
    check_output_folder,
    prepare_dataset,
)
from torchloom.tools.prepare.previous import previous_manifest
from torchloom.tools.prepare.split import parse_fractions
from torchloom.tools.storage import add_storage_arguments, storage_options_of
from torchloom.tools.terminal import EXIT_CLEAN, EXIT_PROBLEMS, Output, add_threads_argument, fail

#: The one problem kind whose files stay in the manifest (duplicates given different labels).
KEPT_KIND = "duplicate label conflict"
#: Problems listed by name in the terminal per kind; ``problems.csv`` holds them all.
PROBLEMS_SHOWN = 20


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``prepare`` on the ``torchloom`` command's subparsers; its handler is ``run``."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "prepare",
        help="label a raw image folder, split it reproducibly, write a manifest",
        description="Label RAW's images, split them (stratified, deterministic, stable when files are "
        "added) and write DIR/manifest.parquet and DIR/manifest.csv. RAW is never modified.",
    )
    parser.add_argument(
        "raw", help="the folder of raw images (searched recursively), local or a URL (s3://bucket/raw)"
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--labels",
        help="a .json object {relative path: label} or a .csv with a path column "
        f"({'/'.join(CSV_PATH_COLUMNS)}) and a label column ({'/'.join(CSV_LABEL_COLUMNS)})",
    )
    source.add_argument(
        "--rule",
        action="append",
        help="LABEL:substr1,substr2 - files whose relative path contains a substring (any case) get "
        "LABEL; repeat for more labels; a file matching two labels is reported, not guessed",
    )
    parser.add_argument("--out", required=True, help="folder for the manifest (and materialized files)")
    parser.add_argument(
        "--fractions",
        default="0.8,0.1,0.1",
        help="the train,val[,test] fractions of the files (default 0.8,0.1,0.1)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the split's hash (default 0)")
    parser.add_argument(
        "--previous",
        metavar="MANIFEST",
        help="the manifest of an earlier run (.parquet or .csv): its files keep their split and only "
        "new files are placed (default: DIR/manifest.parquet when it exists)",
    )
    parser.add_argument(
        "--materialize",
        choices=("link", "copy"),
        help="also build DIR/<split>/<label>/<file>: hard links (copies across devices) or copies",
    )
    parser.add_argument(
        "--group-duplicates",
        action="store_true",
        help="keep exact and near-duplicate images together in one split (no leakage)",
    )
    add_threads_argument(parser, "checking and hashing the files")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    add_storage_arguments(parser)
    parser.set_defaults(handler=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run the command from parsed arguments; returns the exit status."""
    try:
        fractions = parse_fractions(args.fractions)
        if args.seed < 0:
            raise ConfigError(f"--seed must be >= 0, got {args.seed}")
        if not is_url(args.raw) and not os.path.isdir(args.raw):
            raise ConfigError(f"RAW {args.raw!r} is not a folder; pass the folder of raw images")
        storage_options = storage_options_of(args)
        rules = parse_rules(args.rule) if args.rule else None
        if args.previous is not None and not os.path.isfile(args.previous):
            raise MissingFileError(
                f"--previous {args.previous!r} is not a file; pass a manifest that prepare wrote"
            )
        check_output_folder(args.raw, args.out, materializing=args.materialize is not None)
        entries = read_label_map(args.labels) if args.labels else None
    except (MissingFileError, UnsafeFileError) as exc:  # RAW or --labels is not a file to read
        return fail("prepare", exc, usage=True)
    except TorchloomError as exc:
        return fail("prepare", exc)
    try:
        result = prepare_dataset(
            args.raw,
            args.out,
            label_entries=entries,
            rules=rules,
            fractions=fractions,
            seed=args.seed,
            materialize=args.materialize,
            group_duplicates=args.group_duplicates,
            num_threads=args.threads,
            progress=not args.json,
            previous=previous_manifest(args.out, args.previous),
            storage_options=storage_options,
        )
    except (TorchloomError, OSError) as exc:
        return fail("prepare", exc)
    status = EXIT_PROBLEMS if result.problem_count or not result.manifest.num_rows else EXIT_CLEAN
    if args.json:
        print(json.dumps(report_dict(result, args, status), indent=2))
    else:
        print_report(Output.for_stream(), result, args)
    return status


def report_dict(result: PrepareResult, args: argparse.Namespace, status: int) -> dict[str, Any]:
    """The ``--json`` report: counts per class and split, every problem, what was written."""
    counts = result.counts()
    return {
        "raw": args.raw,
        "out": args.out,
        "splits": list(result.split_names),
        "seed": args.seed,
        "files": result.manifest.num_rows,
        "counts": {
            label: dict(zip(result.split_names, row.tolist(), strict=True))
            for label, row in zip(result.classes, counts, strict=True)
        },
        "rebalanced": _rebalanced(result),
        "previous": result.previous,
        "kept": result.kept,
        "moved_to_duplicate_group": result.moved_to_group,
        "warnings": result.warnings,
        "duplicate_groups": result.duplicate_groups,
        "materialize": args.materialize,
        "copied_instead_of_linked": result.copied_instead_of_linked,
        "problems": {
            kind: [{"name": name, "reason": reason} for name, reason in items]
            for kind, items in result.problems.items()
        },
        "ignored_non_images": len(result.ignored),
        "written": result.written,
        "exit_status": status,
    }


def print_report(out: Output, result: PrepareResult, args: argparse.Namespace) -> None:
    """Tables: files per class and split, then every kind of problem by name, then what was written."""
    counts = result.counts()
    names = list(result.split_names)
    rows: list[list[object]] = [
        [label, *row.tolist(), int(row.sum())] for label, row in zip(result.classes, counts, strict=True)
    ]
    rows.append(["all", *counts.sum(axis=0).tolist(), int(counts.sum())])
    out.table(
        f"files per class and split (seed {args.seed}, --fractions {args.fractions})",
        ["class", *names, "total"],
        rows,
    )
    if result.previous is not None:
        out.line(
            f"{result.kept} file(s) kept their split from {result.previous}; "
            f"{result.manifest.num_rows - result.kept - result.moved_to_group} new file(s) placed"
        )
    if result.moved_to_group:
        out.line(
            f"{result.moved_to_group} old file(s) moved to the split of a duplicate of theirs "
            "(--group-duplicates keeps each group in one split)"
        )
    out.line(
        f"{_rebalanced(result)} file(s) outside their hash split, to give each class the counts nearest "
        "the fractions (column 'rebalanced')"
    )
    for warning in result.warnings:
        out.line(f"warning: {warning}")
    if args.group_duplicates:
        out.line(f"{result.duplicate_groups} duplicate group(s) kept together, each in one split")
    for kind in PROBLEM_KINDS:
        items = result.problems.get(kind, [])
        if items:
            shown = [[name, reason] for name, reason in items[:PROBLEMS_SHOWN]]
            more = f", first {PROBLEMS_SHOWN} shown" if len(items) > PROBLEMS_SHOWN else ""
            fate = "kept in the manifest: fix the labels" if kind == KEPT_KIND else "left out of the manifest"
            out.table(f"{kind}: {len(items)} ({fate}{more})", ["name", "reason"], shown)
    if result.ignored:
        reasons = Counter(item.reason for item in result.ignored)
        by_reason = ", ".join(f"{count} {reason}" for reason, count in reasons.items())
        out.line(f"{len(result.ignored)} entries of RAW ignored: {by_reason}")
    if result.copied_instead_of_linked:
        out.line(f"{result.copied_instead_of_linked} file(s) copied: the filesystem refused hard links")
    if not result.written:
        out.line("nothing written: no image is both labelled and readable")
        return
    out.line("wrote " + ", ".join(result.written))
    root = args.raw if is_url(args.raw) else os.path.abspath(args.out if args.materialize else args.raw)
    split = result.split_names[0]
    reach = ", storage_options=..." if is_url(args.raw) else ""
    out.line(
        f"load a split: ManifestDataset(pyarrow.parquet.read_table({result.written[0]!r}, "
        f"filters=[('split', '==', {split!r})]), root={root!r}{reach})"
    )


def _rebalanced(result: PrepareResult) -> int:
    return int(sum(result.manifest.column("rebalanced").to_pylist()))
