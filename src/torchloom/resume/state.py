"""The one state protocol of everything resumable in torchloom.

:class:`Resumable` owns ``state_dict()`` / ``load_state_dict()``: plain dicts (ints, strings,
bools, nested dicts), keys as class constants, a version number, and a ``kind`` naming the class.
A state carries what it must match (seed, sizes, shard lists, shuffle settings); loading it into
an object built differently is a :class:`StateMismatchError` naming the field. Older checkpoints
load with defaults for the keys they lack.

The rules every implementation keeps:

- a state equals what was delivered: right after ``load_state_dict`` it is the loaded position;
  after ``set_epoch(e)`` it is the start of epoch ``e``;
- ``set_epoch`` and ``load_state_dict`` may come in either order before the next iteration (torchdata's
  ``StatefulDataLoader`` loads lazily, when the next iterator starts): the later epoch wins;
- a position at the end of an epoch resumes into the whole next epoch (samplers), or into nothing
  more of that epoch (one consumer of a stream, which cannot know that the others are done).

:class:`SharedInts` carries ``set_epoch`` into DataLoader workers, persistent ones included.

Example:
    >>> from torchloom.resume import Resumable
    >>> class Counter(Resumable):
    ...     KEY_COUNT = "count"
    ...     def __init__(self): self.count = 0
    ...     def _get_state(self): return {self.KEY_COUNT: self.count}
    ...     def _set_state(self, state): self.count = state[self.KEY_COUNT]
    >>> counter = Counter(); counter.count = 5
    >>> state = counter.state_dict(); state
    {'count': 5, 'version': 1, 'kind': 'Counter'}
    >>> fresh = Counter(); fresh.load_state_dict(state); fresh.count
    5
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import torch

from torchloom.errors import ConfigError, StateMismatchError

KEY_VERSION = "version"
KEY_KIND = "kind"


@runtime_checkable
class Stateful(Protocol):
    """Saves and restores its position as a plain dict: every :class:`Resumable`, torchdata's stateful
    samplers, anything a ``StatefulDataLoader`` checkpoints.

    Example:
        >>> from torchloom.resume import Stateful
        >>> from torchloom.samplers import IndexSampler
        >>> def checkpoint(parts: dict[str, Stateful]) -> dict:
        ...     return {name: part.state_dict() for name, part in parts.items()}
        >>> checkpoint({"sampler": IndexSampler(10, seed=1)})["sampler"]["kind"]
        'IndexSampler'
    """

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class Resumable(Stateful):
    """Base of torchloom's resumable objects: subclasses give ``_get_state`` and ``_set_state``.

    ``STATE_VERSION`` is bumped when the state's meaning changes; ``_upgrade`` fills in what older
    versions lack. A state from a newer torchloom, or from another class, is refused.

    Example:
        >>> from torchloom.resume import Resumable, StateMismatchError
        >>> class Cursor(Resumable):
        ...     KEY_ROW = "row"
        ...     def __init__(self):
        ...         self.row = 0
        ...     def _get_state(self):
        ...         return {self.KEY_ROW: self.row}
        ...     def _set_state(self, state):
        ...         self.row = state.get(self.KEY_ROW, 0)  # a default for older checkpoints
        >>> cursor = Cursor()
        >>> cursor.row = 7
        >>> resumed = Cursor()
        >>> resumed.load_state_dict(cursor.state_dict())
        >>> resumed.row
        7
        >>> try:
        ...     resumed.load_state_dict({"row": 1, "version": 1, "kind": "Sampler"})
        ... except StateMismatchError as error:
        ...     print(error)
        checkpoint state was written by a Sampler, not a Cursor; load it into the same kind of object
    """

    STATE_VERSION: ClassVar[int] = 1

    def _get_state(self) -> dict[str, Any]:
        raise NotImplementedError

    def _set_state(self, state: dict[str, Any]) -> None:
        raise NotImplementedError

    def _upgrade(self, state: dict[str, Any], version: int) -> dict[str, Any]:
        """Fill in keys an older version lacked (the default keeps the state as it is)."""
        return state

    def state_dict(self) -> dict[str, Any]:
        """The position as a plain dict, safe in any checkpoint (``torch.save``, JSON)."""
        state = plain(self._get_state())
        state[KEY_VERSION] = self.STATE_VERSION
        state[KEY_KIND] = type(self).__name__
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state``; a state that does not fit is a :class:`StateMismatchError`."""
        if not isinstance(state, Mapping):
            raise StateMismatchError(
                f"{type(self).__name__}.load_state_dict needs the dict that state_dict() returned, "
                f"got {type(state).__name__}"
            )
        state = dict(state)
        version = int(state.pop(KEY_VERSION, 0))
        if version > self.STATE_VERSION:
            raise StateMismatchError(
                f"checkpoint state has version {version}, this torchloom's {type(self).__name__} reads up "
                f"to {self.STATE_VERSION}; upgrade torchloom to load it"
            )
        kind = state.pop(KEY_KIND, type(self).__name__)
        if kind != type(self).__name__:
            raise StateMismatchError(
                f"checkpoint state was written by a {kind}, not a {type(self).__name__}; "
                "load it into the same kind of object"
            )
        self._set_state(self._upgrade(state, version))


def plain(value: Any) -> Any:
    """``value`` with numpy scalars and arrays turned into Python numbers and lists (a seed given as
    ``np.int64`` must not make a checkpoint that JSON or ``torch.load(weights_only=True)`` refuses).

    Example:
        >>> import numpy as np
        >>> plain({"seed": np.int64(3), "weights": [np.float32(0.5)]})
        {'seed': 3, 'weights': [0.5]}
    """
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    if isinstance(value, tuple):
        return tuple(plain(item) for item in value)
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    return value


def check_field(owner: object, state: Mapping[str, Any], key: str, expected: Any, hint: str = "") -> None:
    """Raise :class:`StateMismatchError` when ``state[key]`` (if present) differs from ``expected``.

    Example:
        >>> try:
        ...     check_field(object(), {"seed": 3}, "seed", 4)
        ... except StateMismatchError as error:
        ...     print(str(error)[:46])
        checkpoint field 'seed' is 3 but this object h
    """
    if key not in state or state[key] == expected:
        return
    fix = hint or "build it as it was when the checkpoint was written"
    raise StateMismatchError(
        f"checkpoint field {key!r} is {state[key]!r} but this {type(owner).__name__} has {expected!r}; {fix}"
    )


def fingerprint(*parts: Any) -> int:
    """A stable 32-bit checksum of arrays, strings and numbers (not a security hash).

    Example:
        >>> fingerprint(["a.jsonl", "b.jsonl"]) == fingerprint(["a.jsonl", "b.jsonl"])
        True
    """
    crc = 0
    for part in parts:
        if isinstance(part, np.ndarray):
            data = np.ascontiguousarray(part).tobytes() + str(part.dtype).encode()
        elif isinstance(part, (str, bytes)):
            data = part.encode() if isinstance(part, str) else part
        elif isinstance(part, Iterable):
            data = "\x1f".join(map(str, part)).encode()
        else:
            data = repr(part).encode()
        crc = zlib.crc32(data + b"\x1e", crc)
    return crc


class SharedInts:
    """A few integers in shared memory: written in the main process, read in any DataLoader worker.

    DataLoader workers hold copies of the dataset; a persistent worker's copy never sees a later
    ``set_epoch`` on the main process's object, and a worker has no process group to ask its rank.
    One small shared tensor carries both: fork, spawn and forkserver workers map the same page.

    Example:
        >>> shared = SharedInts([0, 0])
        >>> shared[1] = 3; shared[1]
        3
    """

    def __init__(self, values: Sequence[int]) -> None:
        self._values = torch.tensor(list(values), dtype=torch.int64).share_memory_()

    def __getitem__(self, slot: int) -> int:
        return int(self._values[slot])

    def __setitem__(self, slot: int, value: int) -> None:
        self._values[slot] = value


def check_epoch(epoch: int) -> int:
    """``epoch`` as an int, refusing negatives with a message naming the value."""
    if int(epoch) != epoch or epoch < 0:
        raise ConfigError(f"epoch must be an integer >= 0, got {epoch=}")
    return int(epoch)
