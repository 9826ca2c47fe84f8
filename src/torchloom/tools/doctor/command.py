"""``torchloom doctor DATA``: the command line of :func:`~torchloom.tools.doctor.diagnose`.

DATA is local or a URL (``s3://bucket/train``, read with ``--storage-option``: see
:mod:`torchloom.tools.storage`). The report is printed as tables and written to ``--out``
(``report.json`` and the plots; by default ``./torchloom-doctor``, always a local folder). With
``--json`` it is printed as JSON instead, and written only when ``--out`` is given.

Exit status: 0 when no problem was found; 1 when one was (a bad or refused file, a wrong
extension, an exact duplicate, a near duplicate across splits, an empty class, a folder beside the
split folders, no image at all: see :mod:`torchloom.tools.doctor.report`) or DATA could not be
read (one line on stderr says why); 2 on a usage error (``--out`` inside a DATA folder included:
the next run would read the report's plots as data).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from torchloom.datasets.index import DatasetReport
from torchloom.errors import TorchloomError, install_hint
from torchloom.io.files import is_url
from torchloom.tools.doctor.diagnosis import DEFAULT_OUT, diagnose
from torchloom.tools.doctor.duplicates import NEAR_MAX_DISTANCE
from torchloom.tools.doctor.perceptual import HASH_BITS
from torchloom.tools.doctor.plots import plots_available
from torchloom.tools.output_files import refuse_output_inside
from torchloom.tools.storage import add_storage_arguments, refuse_url_output, storage_options_of
from torchloom.tools.terminal import (
    EXIT_CLEAN,
    EXIT_PROBLEMS,
    Output,
    add_outside_root_argument,
    add_threads_argument,
    fail,
    printable,
)

#: Rows of a terminal table before the rest is summarised (the report keeps them all).
TABLE_ROWS = 20


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``doctor`` on the ``torchloom`` command's subparsers; its handler is ``run``."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "doctor", help="find bad files, duplicates and leaks, imbalance, sizes, mean/std in a dataset"
    )
    parser.add_argument(
        "data",
        help="a class folder, a folder of train/val/test class folders, or a manifest; local or a URL "
        "(s3://bucket/train)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the JSON report to stdout (written only with --out)"
    )
    parser.add_argument(
        "--out",
        default=None,
        help=f"folder for report.json and plots (default ./{DEFAULT_OUT}; none with --json)",
    )
    add_threads_argument(parser, "reading and decoding the files")
    parser.add_argument(
        "--near-max-distance",
        type=int,
        default=NEAR_MAX_DISTANCE,
        help=f"near duplicates differ in at most this many of 64 hash bits (default {NEAR_MAX_DISTANCE})",
    )
    parser.add_argument("--no-plots", action="store_true", help="write report.json only")
    add_outside_root_argument(parser)
    add_storage_arguments(parser)
    parser.set_defaults(handler=run, parser=parser)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run the command from parsed arguments; returns the exit status."""
    parser: argparse.ArgumentParser = args.parser
    if not is_url(args.data) and not os.path.exists(args.data):
        parser.error(f"DATA {args.data!r} does not exist; pass a class folder, a split root or a manifest")
    if not 0 <= args.near_max_distance < HASH_BITS:
        parser.error(f"--near-max-distance must be in 0..{HASH_BITS - 1}, got {args.near_max_distance}")
    out = args.out if args.out is not None or args.json else DEFAULT_OUT
    try:
        refuse_url_output("--out", out)
        storage_options = storage_options_of(args)
        if out is not None and os.path.isdir(args.data):
            refuse_output_inside(args.data, out, "DATA", "doctor would read its report's plots as data")
        report = diagnose(
            args.data,
            num_threads=args.threads,
            progress=True,
            near_max_distance=args.near_max_distance,
            allow_outside_root=args.allow_outside_root,
            storage_options=storage_options,
        )
    except TorchloomError as exc:
        return fail("doctor", exc)
    written: list[str] = []
    try:
        if out is not None:
            written = report.write(out, plots=not args.no_plots)
    except OSError as exc:  # --out cannot be written (permissions, a file in the way, disk full)
        return fail("doctor", exc)
    if args.json:
        print(report.to_json())
        if written:
            print(printable(f"report written to {written[0]}"), file=sys.stderr)
    else:
        print_report(report.document, Output.for_stream(), written)
        if not args.no_plots and not plots_available():
            print(f"plots skipped: matplotlib is not installed ({install_hint('matplotlib', 'plot')})")
    return EXIT_PROBLEMS if report.problems else EXIT_CLEAN


def print_report(document: dict[str, Any], out: Output, written: list[str]) -> None:
    """Print a report document as tables."""
    data = document["data"]
    out.line(
        f"torchloom doctor: {data['source']} ({data['layout']}): {data['files']} image files, "
        f"splits {data['splits']}, {len(data['classes'])} classes"
    )
    ignored = DatasetReport()
    for item in data["ignored"]:  # a reason's detail follows ': ' (the reasons themselves hold none)
        ignored.ignore(item["path"], item["reason"], kind=item["reason"].split(": ", 1)[0])
    for line in ignored.summary(root=data["source"]):
        out.line(line)
    bad = document["bad_files"]
    if bad:
        out.table(
            "Bad files", ["kind", "split", "path", "reason"], _rows(bad, ["kind", "split", "path", "reason"])
        )
    wrong = document["wrong_extension"]
    if wrong:
        out.table(
            "Wrong extension", ["path", "named", "actually"], _rows(wrong, ["path", "extension", "format"])
        )
    pairs = sorted(document["duplicates"]["pairs"], key=lambda pair: not pair["leak"])
    if pairs:
        rows = [
            [
                "LEAK" if p["leak"] else "same split",
                "exact" if p["exact"] else f"near ({p['distance']} bits)",
                f"{p['a']['split']}: {p['a']['path']}",
                f"{p['b']['split']}: {p['b']['path']}",
            ]
            for p in pairs
        ]
        out.table("Duplicates", ["where", "kind", "file", "duplicate of it"], _clip(rows))
    _print_classes(document["classes"], data["classes"], out)
    images = document["images"]
    height, width = images["height"], images["width"]
    out.table(
        "Images",
        ["", "min", "median", "max"],
        [
            ["height", height["min"], height["median"], height["max"]],
            ["width", width["min"], width["median"], width["max"]],
        ],
    )
    out.line(
        f"{images['distinct_sizes']} distinct sizes; modes {images['modes']}; formats {images['formats']}"
    )
    normalize = document["normalize"]
    if normalize["call"]:
        out.line(f"per-channel statistics over {normalize['over']}:")
        out.line(f"  from torchloom import Normalize; normalize = {normalize['call']}")
    quality = document["quality"]
    rows = [
        [name, quality["thresholds"].get(name, "-"), count, ", ".join(quality["files"][name][:2])]
        for name, count in quality["counts"].items()
    ]
    out.table("Quality (cleanvision's checks; warnings)", ["issue", "threshold", "images", "e.g."], rows)
    problems = document["problems"]
    if problems["count"]:
        kinds = ", ".join(f"{kind}: {count}" for kind, count in problems["by_kind"].items())
        out.line(f"PROBLEMS: {problems['count']} ({kinds})")
    else:
        out.line("no problems found")
    folder = os.path.dirname(written[0]) or "."
    out.line(f"report written to {folder}/ (report.json and {len(written) - 1} plot(s))")


def _print_classes(classes: dict[str, Any], names: list[str], out: Output) -> None:
    splits = list(classes["counts"])
    rows = [[name] + [classes["counts"][split][name] for split in splits] for name in names]
    if rows:
        out.table("Classes", ["class", *splits], rows)
    if classes["imbalance_ratio"]:
        out.line(f"imbalance: largest/smallest class = {classes['imbalance_ratio']:.2f}")
    if classes["sampler"]:
        out.line("  balance it with: from torchloom import BalancedSampler")
        out.line(f"                   sampler = {classes['sampler']}  # DataLoader(dataset, sampler=sampler)")


def _rows(items: list[dict[str, Any]], keys: list[str]) -> list[list[Any]]:
    return _clip([[item[key] for key in keys] for item in items])


def _clip(rows: list[list[Any]]) -> list[list[Any]]:
    if len(rows) <= TABLE_ROWS:
        return rows
    more = [f"... {len(rows) - TABLE_ROWS} more in report.json"] + [""] * (len(rows[0]) - 1)
    return [*rows[:TABLE_ROWS], more]
