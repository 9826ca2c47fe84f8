"""What is wrong with an image dataset, before training on it: :func:`diagnose` and its report.

DATA is a class folder (``DATA/<class>/<image>``), a root of split folders
(``DATA/train/<class>/...``, ``DATA/val/...``) or a manifest, local or in an object store (see
:mod:`torchloom.tools.doctor.layout`). Every file is read and decoded once (in parallel); the report
lists bad files, wrong extensions, exact and near duplicates within and across splits (leakage,
pair by pair), class counts with the sampler that balances them, image sizes and modes, the
per-channel mean/std for ``Normalize``, and cleanvision's quality issues. It is printed as
tables, written to ``OUT/report.json`` (schema: :mod:`torchloom.tools.doctor.schema`, keys:
:mod:`torchloom.tools.doctor.report`) with PNG plots beside it, and ``--json`` prints it.

Exit status: 0 when no problem was found, 1 when one was (a bad or refused file, a wrong
extension, an exact duplicate, a near duplicate across splits, an empty class, a folder beside the
split folders, no image at all: see :mod:`torchloom.tools.doctor.report`) or DATA could not be
read, 2 on a usage error.

Example:
    >>> import numpy as np, os, simplejpeg, tempfile
    >>> from torchloom.testing import synthetic_image
    >>> from torchloom.tools.doctor import diagnose
    >>> root = tempfile.mkdtemp()
    >>> for split, name, seed in [("train", "cat", 0), ("train", "dog", 1), ("val", "cat", 0)]:
    ...     os.makedirs(os.path.join(root, split, name))
    ...     image = synthetic_image(np.random.default_rng(seed), 64, 64, 0)
    ...     _ = open(os.path.join(root, split, name, "1.jpg"), "wb").write(simplejpeg.encode_jpeg(image))
    >>> report = diagnose(root)
    >>> [message.replace(root, "DATA") for message in report.problems]
    ['train/val leak: DATA/train/cat/1.jpg = DATA/val/cat/1.jpg (identical bytes)']
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from torchloom.datasets.discovery import Discovery
from torchloom.datasets.options import IndexingSettings, object_store
from torchloom.errors import ConfigError
from torchloom.io.files import Inside, is_url
from torchloom.io.objects import ObjectStore
from torchloom.tools.doctor.duplicates import NEAR_MAX_DISTANCE, examination_groups
from torchloom.tools.doctor.examine import Examination, examine_files
from torchloom.tools.doctor.layout import data_root, find_layout, object_root
from torchloom.tools.doctor.perceptual import HASH_BITS
from torchloom.tools.doctor.plots import plots_available, write_plots
from torchloom.tools.doctor.report import build_document, duplicate_pairs
from torchloom.tools.output_files import write_atomically
from torchloom.tools.terminal import json_text

DEFAULT_OUT = "torchloom-doctor"
REPORT_NAME = "report.json"


@dataclass
class DoctorReport:
    """The result of :func:`diagnose`: the report ``document`` (what ``report.json`` holds) and
    the examined files (``layout``, ``facts``) it was built from.

    Example:
        >>> import json, tempfile
        >>> from torchloom.testing import write_class_folders
        >>> root = tempfile.mkdtemp()
        >>> _ = write_class_folders(root, [3, 3], size=(32, 32), empty=1, progress=False)
        >>> report = diagnose(root)
        >>> json.loads(report.to_json())["problems"]["by_kind"]
        {'empty': 1}
    """

    document: dict[str, Any]
    layout: Discovery
    facts: Examination

    @property
    def problems(self) -> list[str]:
        """One message per problem; empty when the dataset is clean."""
        messages: list[str] = self.document["problems"]["messages"]
        return messages

    def to_json(self) -> str:
        """The report as indented JSON text (:func:`~torchloom.tools.terminal.json_text`: a file name
        that is not valid UTF-8 as ``\\udcNN`` escapes, which :func:`json.loads` turns back into it)."""
        return json_text(self.document)

    def write(self, out: str, *, plots: bool = True) -> list[str]:
        """Write ``report.json`` (atomically: whole or not at all) and (with matplotlib) the plots
        into ``out``; return the paths."""
        os.makedirs(out, exist_ok=True)
        if plots and plots_available():
            readable = self.facts.readable
            sizes = np.stack([self.facts.height[readable], self.facts.width[readable]], axis=1)
            self.document["plots"] = write_plots(self.document, out, sizes, inside=self.facts.inside)
        path = os.path.join(out, REPORT_NAME)
        text = (self.to_json() + "\n").encode("utf-8")
        write_atomically(path, lambda handle: handle.write(text))  # a failed run keeps the last report
        return [path] + [os.path.join(out, name) for name in self.document["plots"]]


def diagnose(
    data: str | os.PathLike[str],
    *,
    num_threads: int | None = None,
    progress: bool = True,
    near_max_distance: int = NEAR_MAX_DISTANCE,
    allow_outside_root: bool = False,
    storage_options: Mapping[str, Any] | ObjectStore | None = None,
) -> DoctorReport:
    """Examine the dataset at ``data`` (a class folder, split root or manifest) and report.

    ``num_threads``: threads reading files (default: the one rule for file work, see
    :class:`~torchloom.datasets.IndexingOptions`). ``progress``: a progress bar while they run, shown
    on a terminal once the work has taken a second. ``near_max_distance``: perceptual
    hashes at most this many bits apart (of 64) are near duplicates. ``allow_outside_root``: follow
    symlinks and manifest paths that lead outside ``data`` (refused, and reported, by default);
    every file read is otherwise confined to it, as a dataset's reads are. ``storage_options``:
    how to reach a ``data`` given as a URL (``s3://bucket/train``), as datasets take it.

    Example:
        >>> import tempfile
        >>> from torchloom.testing import write_class_folders
        >>> root = tempfile.mkdtemp()
        >>> _ = write_class_folders(root, [4, 2], size=(32, 32), progress=False)
        >>> diagnose(root).problems, diagnose(root).document["classes"]["imbalance_ratio"]
        ([], 2.0)
    """
    if not 0 <= near_max_distance < HASH_BITS:
        raise ConfigError(f"near_max_distance must be in 0..{HASH_BITS - 1}, got {near_max_distance}")
    text = os.fspath(data)
    inside: Inside = None
    if is_url(text):
        inside = object_root(text, object_store(storage_options), allow_outside_root=allow_outside_root)
        layout = find_layout(text, allow_outside_root=allow_outside_root, inside=inside, progress=progress)
        # Each read waits on the network, not on a core: as many threads as requests in flight.
        num_threads = IndexingSettings(num_threads=num_threads).threads_for(inside)
    else:
        layout = find_layout(text, allow_outside_root=allow_outside_root)
        inside = None if allow_outside_root else data_root(layout)
    facts = examine_files(layout.paths.to_list(), num_threads=num_threads, progress=progress, inside=inside)
    groups = examination_groups(facts, near_max_distance=near_max_distance)
    pairs = duplicate_pairs(layout, facts, groups)
    document = build_document(layout, facts, groups, pairs, near_max_distance=near_max_distance)
    return DoctorReport(document, layout, facts)
