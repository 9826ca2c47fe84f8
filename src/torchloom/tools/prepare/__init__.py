"""A labelled, reproducible train/val(/test) split of a raw image folder, written as a manifest.

Labels come from a map (:func:`read_label_map`: JSON or CSV) or from filename rules
(:func:`parse_rules`); :func:`prepare_dataset` labels, checks, splits and writes.

Example:
    >>> from torchloom.tools.prepare import parse_rules
    >>> [rule.label for rule in parse_rules(["scratch:scr,scratch", "ok:good"])]
    ['scratch', 'ok']
"""

from torchloom.tools.prepare.labels import Rule, parse_rules, read_label_map
from torchloom.tools.prepare.pipeline import PrepareResult, prepare_dataset
from torchloom.tools.prepare.split import SplitResult, stratified_split

__all__ = [
    "PrepareResult",
    "Rule",
    "SplitResult",
    "parse_rules",
    "prepare_dataset",
    "read_label_map",
    "stratified_split",
]
