"""pin_batch: the Loader's pin_memory=True walks a batch as torch's DataLoader does, with public API
only. Pinning needs CUDA, so a tensor's pin_memory is replaced by a marked copy here."""

from __future__ import annotations

from collections import OrderedDict, UserDict, UserList, namedtuple
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import torch

from torchloom.faults import Skipped
from torchloom.loader.pinning import pin_batch

Pair = namedtuple("Pair", "left right")


class Frozen(Mapping[str, Any]):
    """A read-only mapping built from a dict."""

    def __init__(self, items: dict[str, Any]) -> None:
        self._items = dict(items)

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


class Tagged(UserDict[str, Any]):
    """A mutable mapping carrying more than its items."""

    tag = "batch"


class Pinned:
    """Marks a tensor as pinned: Tensor.pin_memory replaced by a copy that carries the mark."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def pin_memory(tensor: torch.Tensor, device: Any = None) -> torch.Tensor:
            copy = tensor.clone()
            copy.pinned_here = True  # type: ignore[attr-defined]
            return copy

        monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)

    def __call__(self, value: Any) -> bool:
        return isinstance(value, torch.Tensor) and getattr(value, "pinned_here", False)


@pytest.fixture
def pinned(monkeypatch: pytest.MonkeyPatch) -> Pinned:
    return Pinned(monkeypatch)


def test_every_tensor_of_a_nested_batch_is_pinned_and_the_rest_stays(pinned: Pinned) -> None:
    record = Skipped(3, "a.jpg", "DecodeError", "truncated")
    batch = {
        "image": torch.zeros(2, 3),
        "label": [torch.tensor(1), 2],
        "pair": Pair(torch.ones(1), "x"),
        "shape": (torch.zeros(1), b"raw"),
        "name": "a",
        "skipped": [record],
        "range": range(2),
    }
    out = pin_batch(batch)
    assert type(out) is dict and list(out) == list(batch)
    assert pinned(out["image"]) and torch.equal(out["image"], batch["image"])
    assert pinned(out["label"][0]) and out["label"][1] == 2
    assert type(out["pair"]) is Pair and pinned(out["pair"].left) and out["pair"].right == "x"
    assert type(out["shape"]) is tuple and pinned(out["shape"][0]) and out["shape"][1] == b"raw"
    assert out["name"] == "a" and out["skipped"][0] is record
    assert out["range"] == [0, 1]  # a sequence that cannot be rebuilt becomes a list, as torch's does


def test_mappings_and_sequences_keep_their_type_where_they_allow(pinned: Pinned) -> None:
    ordered = pin_batch(OrderedDict(x=torch.zeros(1)))
    assert type(ordered) is OrderedDict and pinned(ordered["x"])
    tagged = pin_batch(Tagged(x=torch.zeros(1)))
    assert type(tagged) is Tagged and tagged.tag == "batch" and pinned(tagged["x"])
    frozen = pin_batch(Frozen({"x": torch.zeros(1)}))
    assert type(frozen) is Frozen and pinned(frozen["x"])
    listed = pin_batch(UserList([torch.zeros(1)]))
    assert type(listed) is UserList and pinned(listed[0])


def test_pin_batch_walks_a_batch_as_torchs_dataloader_pinning_does(pinned: Pinned) -> None:
    torch_pinning = pytest.importorskip("torch.utils.data._utils.pin_memory")
    batch = {
        "image": torch.zeros(2),
        "pair": Pair(torch.ones(1), [torch.zeros(1), "s"]),
        "nested": OrderedDict(t=(torch.zeros(1), 3)),
        "tagged": Tagged(x=range(3)),
    }

    def shape(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return ("tensor", pinned(value))
        if isinstance(value, Mapping):
            return (type(value), {key: shape(item) for key, item in value.items()})
        if isinstance(value, (list, tuple, UserList)):
            return (type(value), [shape(item) for item in value])
        return value

    assert shape(pin_batch(batch)) == shape(torch_pinning.pin_memory(batch))
