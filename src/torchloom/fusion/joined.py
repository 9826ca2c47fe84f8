"""JoinedDataset: one sample per key with every modality, joined once at construction.

Sources are datasets that can list their keys (a :class:`torchloom.ManifestDataset` with a
``JoinKey`` field, a :class:`TableDataset`) or tables (a pyarrow table, a CSV/Parquet/JSON path).
The join runs once, vectorised in Arrow, into one row-index array per source; a sample then
costs one lookup per source, with no dictionary of millions of keys in the workers.

Example:
    >>> import pyarrow as pa
    >>> from torchloom.fusion import JoinedDataset
    >>> prices = pa.table({"id": [1, 2, 3], "price": [9.5, 3.0, 4.25]})
    >>> titles = pa.table({"id": [3, 1], "title": ["nut", "bolt"]})
    >>> joined = JoinedDataset({"prices": prices, "titles": titles}, on="id", how="left", missing="mask")
    >>> joined[1]
    {'id': 2, 'index': 1, 'price': 3.0, 'prices_present': True, 'title': '', 'titles_present': False}
    >>> len(JoinedDataset({"prices": prices, "titles": titles}, on="id"))
    2
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from torch.utils.data import Dataset

from torchloom.datasets.index import StringColumn
from torchloom.datasets.options import takes_no_sample_options
from torchloom.datasets.table import TableDataset
from torchloom.errors import ConfigError, JoinError, SampleIndexError, UsageError, check_choice
from torchloom.faults import Skipped
from torchloom.seeding import SampleKey

Source: TypeAlias = Dataset[Any] | pa.Table | str | os.PathLike[str]
HOW_CHOICES = ("inner", "left")
MISSING_CHOICES = ("drop", "mask")
# How many keys a report or an error names before summarising.
KEYS_NAMED = 10


# Samples tried, at most, to find one that loads and shows a source's fields.
FIELD_PROBE_LIMIT = 100


@dataclass
class JoinReport:
    """What the join left out: per reason, the number of keys and the first few of them.

    Example:
        >>> import pyarrow as pa
        >>> from torchloom.fusion import JoinedDataset
        >>> prices = pa.table({"id": [1, 2, 3], "price": [9.5, 3.0, 4.25]})
        >>> titles = pa.table({"id": [3, 1], "title": ["nut", "bolt"]})
        >>> report = JoinedDataset({"prices": prices, "titles": titles}, on="id").report
        >>> report.dropped
        {"keys of 'prices' missing from 'titles'": 1}
        >>> print(report)
        JoinReport: 1 key(s) dropped
          1 keys of 'prices' missing from 'titles', e.g. [2]
    """

    dropped: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[Any]] = field(default_factory=dict)

    def add(self, reason: str, keys: list[Any]) -> None:
        if keys:
            self.dropped[reason] = self.dropped.get(reason, 0) + len(keys)
            self.examples.setdefault(reason, []).extend(keys[:KEYS_NAMED])

    def __str__(self) -> str:
        if not self.dropped:
            return "JoinReport: nothing dropped"
        lines = [f"JoinReport: {sum(self.dropped.values())} key(s) dropped"]
        lines += [
            f"  {count} {reason}, e.g. {self.examples[reason]}" for reason, count in self.dropped.items()
        ]
        return "\n".join(lines)


class JoinedDataset(Dataset["dict[str, Any] | Skipped"]):
    """Join sources on a key column into flat dict samples.

    Args:
        sources: name -> source; the first source is the reference, whose order the samples keep.
        on: the key column (a ``JoinKey`` field of a ManifestDataset, a column of a table).
        how: ``"inner"`` keeps keys every source has; ``"left"`` keeps every key of the first source.
        missing: for a ``"left"`` key that another source lacks: ``"drop"`` the sample (counted in
            ``report``), or ``"mask"``: keep it, with that source's fields zero-filled (zeros of the
            right shape, ``""``, ``False``) and ``<name>_present`` False. With ``"mask"`` every sample
            has a ``<name>_present`` flag per source.

    A sample holds the key under ``on``, ``"index"`` (this dataset's row, carrying the epoch of a
    :class:`torchloom.SampleKey`, which each source receives for its own row), and every field
    of every source; a field name two sources share is prefixed with the source name
    (``image_title``). A source's own ``"index"`` is dropped. A source sample skipped under the
    ``"skip"`` fault policy skips the joined sample.

    Example:
        >>> import pyarrow as pa
        >>> from torchloom.datasets import TableDataset
        >>> from torchloom.fusion import JoinedDataset
        >>> images = TableDataset(pa.table({"id": [1, 2, 3], "pixels": [0.5, 0.25, 0.75]}))
        >>> notes = pa.table({"id": [3, 1], "note": ["cracked", "fine"]})
        >>> joined = JoinedDataset({"images": images, "notes": notes}, on="id")
        >>> len(joined), joined[0]
        (2, {'id': 1, 'index': 0, 'pixels': 0.5, 'note': 'fine'})
    """

    @takes_no_sample_options("its samples join its sources' samples: give the options to each source")
    def __init__(
        self,
        sources: Mapping[str, Source],
        *,
        on: str = "id",
        how: Literal["inner", "left"] = "inner",
        missing: Literal["drop", "mask"] = "drop",
    ) -> None:
        check_choice("how", how, HOW_CHOICES)
        check_choice("missing", missing, MISSING_CHOICES)
        if len(sources) < 2:
            raise ConfigError(f"JoinedDataset needs at least two sources, got {list(sources)}")
        self.on, self.how, self.missing = on, how, missing
        self.sources: dict[str, Dataset[Any]] = {
            name: _as_dataset(source, on) for name, source in sources.items()
        }
        self.report = JoinReport()
        keys = {name: _keys_of(name, dataset, on) for name, dataset in self.sources.items()}
        _check_key_types(keys, on)
        for name, values in keys.items():
            _check_unique(name, values, on)
        self.keys, self.rows = self._join(keys)
        firsts = {name: self._first_sample(name) for name in self.sources}  # loaded once, used twice
        self._names = self._field_names(firsts)
        self._zeros = (
            {name: _zero_like(sample) for name, sample in firsts.items()} if missing == "mask" else {}
        )

    def _join(self, keys: dict[str, pa.Array]) -> tuple[pa.Array, dict[str, np.ndarray]]:
        names = list(keys)
        reference = keys[names[0]]
        rows = {names[0]: np.arange(len(reference), dtype=np.int64)}
        for name in names[1:]:
            positions = pc.index_in(reference, value_set=keys[name])
            rows[name] = positions.fill_null(-1).to_numpy().astype(np.int64)
            only_there = pc.invert(pc.is_in(keys[name], value_set=reference))
            self.report.add(
                f"keys only in {name!r} (not in {names[0]!r})", keys[name].filter(only_there).to_pylist()
            )
        present = np.all([rows[name] >= 0 for name in names], axis=0)
        if self.how == "inner" or self.missing == "drop":
            for name in names[1:]:
                lacking = rows[name] < 0
                reason = f"keys of {names[0]!r} missing from {name!r}"
                self.report.add(reason, reference.filter(pa.array(lacking)).to_pylist())
            keep = np.flatnonzero(present)
        else:
            keep = np.arange(len(reference), dtype=np.int64)
        return reference.take(pa.array(keep)), {name: row[keep] for name, row in rows.items()}

    def _first_sample(self, name: str) -> dict[str, Any]:
        """The first sample of a source that loads (skipped ones, under ``"skip"``, are passed over)."""
        dataset = self.sources[name]
        size = len(dataset)  # type: ignore[arg-type]
        if size == 0:
            raise JoinError(f"source {name!r} is empty")
        failed: list[Skipped] = []
        sample = dataset[0]
        while isinstance(sample, Skipped) and len(failed) + 1 < min(size, FIELD_PROBE_LIMIT):
            failed.append(sample)
            sample = dataset[len(failed)]
        if isinstance(sample, Skipped):
            failed.append(sample)
            reasons = "; ".join(f"#{s.index} {s.path!r}: {s.reason}" for s in failed[:3])
            raise JoinError(
                f"source {name!r}: its first {len(failed)} sample(s) all failed, so its fields cannot be "
                f"learnt ({reasons}); fix those files"
            )
        if not isinstance(sample, Mapping):
            raise JoinError(f"source {name!r} returns {type(sample).__name__}, not dict samples")
        return dict(sample)

    def _field_names(self, firsts: dict[str, dict[str, Any]]) -> dict[str, dict[str, str]]:
        """Per source, its field -> the name that field takes in a joined sample."""
        fields = {name: [k for k in sample if k not in (self.on, "index")] for name, sample in firsts.items()}
        seen: dict[str, int] = {}
        for names in fields.values():
            for key in names:
                seen[key] = seen.get(key, 0) + 1
        reserved = {self.on, "index"} | {f"{name}_present" for name in self.sources}
        result = {}
        for name, names in fields.items():
            result[name] = {
                key: f"{name}_{key}" if seen[key] > 1 or key in reserved else key for key in names
            }
        outputs: dict[str, str] = {}
        for name, mapping in result.items():
            for key, output in mapping.items():
                if output in outputs or output in reserved:
                    first = outputs.get(output, "the join itself")
                    raise JoinError(
                        f"field {key!r} of source {name!r} would be named {output!r}, which {first} already "
                        "uses; rename a field"
                    )
                outputs[output] = f"source {name!r}"
        return result

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, key: int) -> dict[str, Any] | Skipped:
        index = int(key)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise SampleIndexError(f"index {int(key)} out of range for JoinedDataset of {len(self)} samples")
        epoch = key.epoch if isinstance(key, SampleKey) else None
        sample: dict[str, Any] = {self.on: self.keys[index].as_py()}
        sample["index"] = SampleKey(index, epoch) if epoch is not None else index
        for name, dataset in self.sources.items():
            row = int(self.rows[name][index])
            if row < 0:
                part = copy.deepcopy(self._zeros[name])  # a fresh zero value: samples never share tensors
            else:
                part = dataset[SampleKey(row, epoch) if epoch is not None else row]
                if isinstance(part, Skipped):
                    reason = f"source {name!r}: {part.reason}"
                    return Skipped(index, part.path, part.error, reason, part.attempts, repr(self))
            for field_name, output in self._names[name].items():
                sample[output] = part[field_name]
            if self.missing == "mask":
                sample[f"{name}_present"] = row >= 0
        return sample

    def __repr__(self) -> str:
        return f"JoinedDataset({list(self.sources)}, on={self.on!r}, how={self.how!r}, {len(self)} samples)"


def _as_dataset(source: Source, on: str) -> Dataset[Any]:
    if isinstance(source, (pa.Table, str, os.PathLike)):
        return TableDataset(source, id_column=on)
    if isinstance(source, Dataset):
        return source
    raise UsageError(
        f"a join source must be a dataset, a pyarrow table or a table file, got {type(source).__name__}"
    )


def _keys_of(name: str, dataset: Dataset[Any], on: str) -> pa.Array:
    join_keys = getattr(dataset, "join_keys", None)
    if join_keys is not None:
        try:
            keys: pa.Array = join_keys(on)
        except KeyError as exc:
            raise JoinError(f"source {name!r} has no key column {on!r}: {exc}") from exc
        return keys.cast(pa.large_string()) if pa.types.is_string(keys.type) else keys
    column = getattr(dataset, "column", None)
    if column is None:
        raise JoinError(
            f"source {name!r} ({type(dataset).__name__}) cannot list its keys; give a ManifestDataset with "
            f"a JoinKey({on!r}) field, a TableDataset or a table"
        )
    try:
        values = column(on)
    except KeyError as exc:
        raise JoinError(f"source {name!r} has no key column {on!r}: {exc}") from exc
    if isinstance(values, StringColumn):
        return pa.array(values.to_list(), type=pa.large_string())
    if isinstance(values, np.ndarray):
        return pa.array(values)
    return values.cast(pa.large_string()) if pa.types.is_string(values.type) else values


def _check_key_types(keys: dict[str, pa.Array], on: str) -> None:
    def family(array: pa.Array) -> str:
        if pa.types.is_integer(array.type):
            return "integer"
        if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
            return "string"
        return str(array.type)

    families = {name: family(values) for name, values in keys.items()}
    if len(set(families.values())) > 1:
        raise JoinError(
            f"key {on!r} has different types across sources ({families}); make them all integers or all "
            "strings (e.g. read ids as JoinKey fields, which keep integers)"
        )


def _check_unique(name: str, keys: pa.Array, on: str) -> None:
    if keys.null_count:
        raise JoinError(f"source {name!r} has {keys.null_count} empty {on!r} key(s)")
    counts = pc.value_counts(keys)
    repeated = counts.filter(pc.greater(counts.field("counts"), 1)).field("values").to_pylist()
    if repeated:
        raise JoinError(
            f"source {name!r} has duplicate {on!r} keys: {repeated[:KEYS_NAMED]} ({len(repeated)} in all)"
        )


def _zero_like(value: Any) -> Any:
    """A value of the same type and shape with nothing in it."""
    if isinstance(value, torch.Tensor):
        return torch.zeros_like(value)
    if isinstance(value, np.ndarray):
        return np.zeros_like(value)
    if isinstance(value, Mapping):
        return {key: _zero_like(item) for key, item in value.items()}
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, (int, np.integer)):
        return 0
    if isinstance(value, (float, np.floating)):
        return 0.0
    if isinstance(value, str):
        return ""
    if isinstance(value, (list, tuple)):
        return type(value)()
    return None
