"""Where ``torchloom prepare`` gets labels: a JSON or CSV map, or filename rules.

Every file and every label entry ends up somewhere a person can see it: labelled, *unmatched*
(an image with no label), *unknown* (a label entry naming no image in the raw folder) or
*ambiguous* (rules of two labels match it, or a map gives it two labels). Nothing is guessed or
dropped silently.

Paths are compared as relative POSIX paths (``scratch/img 1.jpg``): ``\\`` becomes ``/`` and a
leading ``./`` is dropped. Names are compared in Unicode normal form NFC, on both sides: ``café``
typed on Linux (one code point for ``é``) matches the same name copied from macOS, which stores it
decomposed (NFD: ``e`` and a combining accent), as the two look the same on screen.
"""

from __future__ import annotations

import csv
import io
import json
import os
import posixpath
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

from torchloom.errors import ConfigError, ManifestError
from torchloom.io.files import open_file

#: Column names accepted for the file path in a CSV label map (first present wins).
CSV_PATH_COLUMNS = ("path", "file", "filename", "image")
#: Column names accepted for the label in a CSV label map (first present wins).
CSV_LABEL_COLUMNS = ("label", "class", "category")


@dataclass(frozen=True)
class Rule:
    """Files whose relative path contains any of ``substrings`` (case-insensitive) get ``label``.

    Example:
        >>> from torchloom.tools.prepare import Rule, parse_rules
        >>> rules = parse_rules(["scratch:scr,Scratch", "ok:good"])
        >>> rules[1], isinstance(rules[0], Rule)
        (Rule(label='ok', substrings=('good',)), True)
    """

    label: str
    substrings: tuple[str, ...]


@dataclass
class Labelling:
    """The label of each file (``None`` when it has none) and everything that did not fit.

    ``unknown`` and ``ambiguous`` are ``(name, reason)`` pairs; ``unmatched`` lists files.
    """

    labels: list[str | None]
    unmatched: list[str] = field(default_factory=list)
    unknown: list[tuple[str, str]] = field(default_factory=list)
    ambiguous: list[tuple[str, str]] = field(default_factory=list)


def normalize_key(path: str) -> str:
    """A label map's path as a relative POSIX path in NFC (``.\\\\a\\\\b.jpg`` -> ``a/b.jpg``).

    Example:
        >>> normalize_key(".\\\\scratch\\\\1.jpg"), normalize_key("./ok//2.jpg")
        ('scratch/1.jpg', 'ok/2.jpg')
        >>> normalize_key("cafe\\u0301.jpg") == "caf\\u00e9.jpg"
        True
    """
    text = unicodedata.normalize("NFC", path.strip()).replace("\\", "/")
    while text.startswith("./"):
        text = text[2:]
    return posixpath.normpath(text) if text else text


def parse_rules(texts: Sequence[str]) -> list[Rule]:
    """Parse ``LABEL:substr1,substr2`` rules; a :class:`ConfigError` names a malformed one.

    Example:
        >>> parse_rules(["scratch: scr , scratch"])
        [Rule(label='scratch', substrings=('scr', 'scratch'))]
    """
    rules: list[Rule] = []
    for text in texts:
        label, colon, rest = text.partition(":")
        substrings = tuple(part.strip() for part in rest.split(",") if part.strip())
        if not colon or not label.strip() or not substrings:
            raise ConfigError(
                f"--rule {text!r} is not LABEL:substr1,substr2 (a label, a colon, then comma-separated "
                "substrings of the file's relative path), e.g. --rule 'scratch:scr,scratch'"
            )
        rules.append(Rule(label.strip(), substrings))
    return rules


def label_by_rules(files: Sequence[str], rules: Sequence[Rule]) -> Labelling:
    """Label ``files`` (relative POSIX paths) by the rules their path matches.

    A file matching rules of one label gets it; rules of two or more labels make it ambiguous;
    none leaves it unmatched.

    Example:
        >>> rules = parse_rules(["scratch:scr,scratch", "ok:good"])
        >>> labelling = label_by_rules(["a/scr_1.jpg", "b/good_2.jpg", "c/other.jpg", "scr_good.jpg"], rules)
        >>> labelling.labels
        ['scratch', 'ok', None, None]
        >>> labelling.unmatched, labelling.ambiguous
        (['c/other.jpg'], [('scr_good.jpg', "rules of 'ok', 'scratch' match")])
    """
    lowered = [(rule.label, tuple(_nfc(s).lower() for s in rule.substrings)) for rule in rules]
    result = Labelling(labels=[])
    for path in files:
        text = _nfc(path).lower()
        matched = sorted({label for label, substrings in lowered if any(s in text for s in substrings)})
        if len(matched) == 1:
            result.labels.append(matched[0])
            continue
        result.labels.append(None)
        if matched:
            result.ambiguous.append((path, f"rules of {', '.join(map(repr, matched))} match"))
        else:
            result.unmatched.append(path)
    return result


def read_label_map(path: str) -> list[tuple[str, str]]:
    """The ``(relative path, label)`` entries of a ``.json`` map or a ``.csv`` file, in file order.

    JSON: one object mapping relative paths to labels (strings or integers). CSV: a header row
    with a path column (one of :data:`CSV_PATH_COLUMNS`) and a label column (one of
    :data:`CSV_LABEL_COLUMNS`). A malformed file raises :class:`ManifestError` naming it (and the
    line, for CSV). A path given twice is two entries (in JSON too, where a parser would keep the
    last): with two labels, :func:`label_by_map` reports the file ambiguous.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "labels.csv")
        >>> _ = open(path, "w").write("file,class\\nok/1.jpg,ok\\n")
        >>> read_label_map(path)
        [('ok/1.jpg', 'ok')]
    """
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in (".json", ".csv"):
        raise ConfigError(
            f"--labels {path!r} must be a .json map or a .csv file, not {suffix or 'no extension'}"
        )
    try:
        with open_file(path) as raw, io.TextIOWrapper(raw, encoding="utf-8-sig", newline="") as handle:
            return _read_json_map(path, handle.read()) if suffix == ".json" else _read_csv_map(path, handle)
    except UnicodeDecodeError as exc:
        raise ManifestError(f"label file {path!r} is not UTF-8 text ({exc})") from exc


def _read_json_map(path: str, text: str) -> list[tuple[str, str]]:
    try:  # every key/value pair, as written: a key given twice is two entries, as two CSV rows are
        mapping = json.loads(text, object_pairs_hook=_JsonPairs)
    except json.JSONDecodeError as exc:
        raise ManifestError(
            f"label file {path!r} line {exc.lineno} column {exc.colno}: invalid JSON ({exc.msg})"
        ) from exc
    if not isinstance(mapping, _JsonPairs):
        raise ManifestError(
            f"label file {path!r} must hold one JSON object mapping relative paths to labels, "
            f'e.g. {{"scratch/1.jpg": "scratch"}}; it holds a {type(mapping).__name__}'
        )
    entries = []
    for key, label in mapping:
        if isinstance(label, bool) or not isinstance(label, (str, int)) or label == "":
            shown = dict(label) if isinstance(label, _JsonPairs) else label
            raise ManifestError(
                f"label file {path!r}: entry {key!r} has label {shown!r}; labels must be non-empty "
                "strings or integers"
            )
        entries.append((key, str(label)))
    return entries


class _JsonPairs(list[tuple[str, object]]):
    """A JSON object's key/value pairs in file order, duplicates kept (``json.loads``'s dict keeps
    the last value of a key given twice, silently)."""


def _read_csv_map(path: str, handle: object) -> list[tuple[str, str]]:
    reader = csv.reader(handle)  # type: ignore[arg-type]
    try:
        header = [name.strip() for name in next(reader, [])]
        path_column = next((c for c in CSV_PATH_COLUMNS if c in header), None)
        label_column = next((c for c in CSV_LABEL_COLUMNS if c in header), None)
        if path_column is None or label_column is None:
            raise ManifestError(
                f"label file {path!r} has columns {header}; it needs a path column (one of "
                f"{list(CSV_PATH_COLUMNS)}) and a label column (one of {list(CSV_LABEL_COLUMNS)})"
            )
        path_at, label_at = header.index(path_column), header.index(label_column)
        entries = []
        for row in reader:
            if not row:
                continue
            if len(row) != len(header):
                raise ManifestError(
                    f"label file {path!r} line {reader.line_num} has {len(row)} fields, "
                    f"the header {len(header)}"
                )
            if not row[label_at].strip():
                raise ManifestError(f"label file {path!r} line {reader.line_num}: the label is empty")
            entries.append((row[path_at], row[label_at].strip()))
        return entries
    except csv.Error as exc:
        raise ManifestError(f"label file {path!r} line {reader.line_num}: {exc}") from exc


def label_by_map(files: Sequence[str], entries: Sequence[tuple[str, str]]) -> Labelling:
    """Label ``files`` (relative POSIX paths) from map entries.

    Entries naming no file in ``files`` are unknown; a file given two different labels is
    ambiguous; files without an entry are unmatched. Names match in Unicode normal form NFC (a name
    typed on Linux matches the same name copied from macOS): an entry labels every file whose name
    is the same in NFC.

    Example:
        >>> result = label_by_map(["a.jpg", "b.jpg"], [("a.jpg", "ok"), ("gone.jpg", "ok")])
        >>> result.labels, result.unmatched, result.unknown
        (['ok', None], ['b.jpg'], [('gone.jpg', 'no such image file in the raw folder')])
    """
    present: dict[str, list[str]] = {}  # NFC name -> the files of that name (twins in NFC and NFD)
    for path in files:
        present.setdefault(_nfc(path), []).append(path)
    given: dict[str, set[str]] = {}
    result = Labelling(labels=[])
    for raw_key, label in entries:
        key = normalize_key(raw_key)
        if key in present:
            for path in present[key]:
                given.setdefault(path, set()).add(label)
        elif key.startswith("/") or key == ".." or key.startswith("../"):
            result.unknown.append((raw_key, "path leaves the raw folder; use paths relative to RAW"))
        else:
            result.unknown.append((raw_key, "no such image file in the raw folder"))
    for path in files:
        labels = sorted(given.get(path, ()))
        result.labels.append(labels[0] if len(labels) == 1 else None)
        if len(labels) > 1:
            result.ambiguous.append((path, f"the label file gives it {', '.join(map(repr, labels))}"))
        elif not labels:
            result.unmatched.append(path)
    return result


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)
