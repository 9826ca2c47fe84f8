"""Every assumption torchloom makes beyond the public APIs of CPython, torch, numpy and Accelerate
(``torchloom._compat``, and the few public hooks whose effect depends on torch's code), asserted so
that an upgrade that breaks one fails here, saying which, the version tested and what breaks."""

from __future__ import annotations

import gc
import importlib.metadata
import platform
import sys
from collections.abc import Callable, Iterator

import numpy as np
import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, Sampler, default_collate

from torchloom import BalancedSampler, _compat, seeding
from torchloom._compat import (
    TESTED_WITH,
    accelerate_shard_processes,
    new_shared_storage,
    references_beyond,
    register_seed_sequence,
    storage_objects_live_with_their_storage,
    storage_users,
    user_stacklevel,
    view_base,
)
from torchloom.errors import SkippedSampleError
from torchloom.faults import Skipped
from torchloom.resume import distributed
from torchloom.resume.distributed import outer_batch_splitter
from torchloom.seeding import SampleKey, _seed_states, sample_rng, sample_rngs


def running(package: str) -> str:
    if package == "python":
        return platform.python_version()
    return importlib.metadata.version(package)


def broken(assumption: str, consequence: str, *packages: str) -> str:
    """The failure message: what no longer holds, what breaks, the versions tested and running."""
    tested = ", ".join(f"{package} {TESTED_WITH[package]}" for package in packages)
    now = ", ".join(f"{package} {running(package)}" for package in packages)
    return f"{assumption}: {consequence}. Tested with {tested}; running {now}. See torchloom/_compat.py"


# --- CPython frames ------------------------------------------------------------------------------

FRAMES = (
    "CPython's frames no longer lead from a warning inside torchloom to the line that called it",
    "a warning about resume (a set_epoch or load that loses) would name a line inside torchloom instead "
    "of the user's",
    "python",
)


def test_a_warning_from_deep_inside_torchloom_names_the_users_line() -> None:
    from torchloom import Loader
    from torchloom.samplers import IndexSampler

    assert user_stacklevel() == 1, broken(*FRAMES)  # called from here: this frame
    sampler = IndexSampler(4)
    sampler.set_epoch(2)
    loader = Loader(list(range(4)), batch_size=2, sampler=IndexSampler(4), collate_fn=list)
    loader.load_state_dict({"sampler": sampler.state_dict(), "batches": 0, "epoch": 2})
    with pytest.warns(UserWarning, match="the later epoch wins") as caught:
        loader.set_epoch(0)  # Loader -> its position -> IndexSampler -> the epoch rules -> warn
    assert caught[0].filename == __file__, broken(*FRAMES)


# --- CPython reference counts --------------------------------------------------------------------

REFCOUNT = (
    "CPython no longer counts references the way _compat.references_beyond expects",
    "a pooled buffer (decode target, batch buffer) would be handed out again while a caller still holds "
    "it, overwriting the caller's data (or never reused, if it counts too many)",
    "python",
)


class Holder:
    def __init__(self, value: object) -> None:
        self.value = value


@pytest.mark.parametrize(
    "make", [object, lambda: bytearray(8), lambda: np.empty(8, np.uint8), lambda: torch.empty(8)]
)
def test_references_beyond_sees_every_other_holder_and_nothing_else(make: Callable[[], object]) -> None:
    items = [make()]
    assert references_beyond(items, 0) == 0, broken(*REFCOUNT)
    local = items[0]
    assert references_beyond(items, 0) == 1, broken(*REFCOUNT)
    other, holder = [local], Holder(local)
    del local
    assert references_beyond(items, 0) == 2, broken(*REFCOUNT)
    del other, holder
    assert references_beyond(items, 0) == 0, broken(*REFCOUNT)


@pytest.mark.parametrize("shift", [-1, 1])
def test_an_interpreter_holding_other_references_during_the_call_changes_nothing(
    monkeypatch: pytest.MonkeyPatch, shift: int
) -> None:
    """CPython 3.14 borrows some references a call held before: counts read lower, by as much for
    the measurement as for the baseline."""
    # The stand-in's own parameter holds one reference more than a direct call sees.
    monkeypatch.setattr(_compat, "getrefcount", lambda value: sys.getrefcount(value) - 1 + shift)
    _compat._reference_baseline.cache_clear()
    try:
        items = [torch.empty(2)]
        assert references_beyond(items, 0) == 0
        kept = items[0]
        assert references_beyond(items, 0) == 1
        del kept
    finally:
        _compat._reference_baseline.cache_clear()


def test_a_numpy_view_holds_its_base_array() -> None:
    items = [np.empty(8, np.uint8)]
    view = items[0][2:].reshape(2, 3)
    assert references_beyond(items, 0) == 1, broken(*REFCOUNT)
    del view
    assert references_beyond(items, 0) == 0, broken(*REFCOUNT)


# --- torch storages ------------------------------------------------------------------------------

STORAGE_USERS = (
    "torch no longer counts the users of a storage the way _compat.storage_users expects "
    "(torch._C._storage_Use_Count)",
    "batch-buffer reuse would overwrite batches a user keeps (or never reuse a buffer)",
    "torch",
)


def test_torch_counts_the_tensors_and_kept_storage_objects_of_a_storage() -> None:
    assert hasattr(torch._C, "_storage_Use_Count"), broken(*STORAGE_USERS)
    tensor = torch.zeros(4, 3)
    assert storage_users(tensor) == 1, broken(*STORAGE_USERS)
    views = [tensor[1], tensor.view(12), tensor.t()]
    assert storage_users(tensor) == 4, broken(*STORAGE_USERS)
    del views
    assert storage_users(tensor) == 1, broken(*STORAGE_USERS)
    over = torch.empty(0).set_(tensor.untyped_storage(), 0, (12,), (1,))  # not a view: same storage
    assert storage_users(tensor) == 2, broken(*STORAGE_USERS)
    del over
    kept = tensor.untyped_storage()
    assert storage_users(tensor) == 2, broken(*STORAGE_USERS)
    del kept
    gc.collect()
    assert storage_users(tensor) == 1, broken(*STORAGE_USERS)


def test_a_numpy_array_of_a_tensor_holds_the_tensor_or_its_storage() -> None:
    buffers = [torch.zeros(6)]
    array = buffers[0].numpy()
    held = references_beyond(buffers, 0) > 0 or storage_users(buffers[0]) != 1
    assert held, broken(*STORAGE_USERS)
    del array
    assert references_beyond(buffers, 0) == 0 and storage_users(buffers[0]) == 1, broken(*STORAGE_USERS)


def test_a_shared_storage_is_allocated_in_one_step() -> None:
    assumption = "torch.UntypedStorage._new_shared no longer allocates a shared storage"
    consequence = "every worker batch buffer is allocated, then copied into shared memory (slower)"
    assert callable(getattr(torch.UntypedStorage, "_new_shared", None)), broken(
        assumption, consequence, "torch"
    )
    storage = new_shared_storage(24)
    assert storage.nbytes() == 24 and storage.is_shared(), broken(assumption, consequence, "torch")


def test_without_the_private_allocator_a_shared_storage_comes_from_the_public_route(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.UntypedStorage, "_new_shared", None)
    storage = new_shared_storage(24)
    assert storage.nbytes() == 24 and storage.is_shared()


def test_every_view_of_a_tensor_knows_the_tensor_it_views() -> None:
    assumption = "Tensor._base no longer gives the tensor a view was taken of"
    consequence = "collate copies every batch that a dataset wrote into batch slots (slower)"
    buffer = torch.zeros(4, 3, 2)
    for view in [*buffer.unbind(0), buffer[1][1:], buffer.view(24)[3:9], buffer[2].view(3, 2)]:
        assert view_base(view) is buffer, broken(assumption, consequence, "torch")
    assert view_base(buffer) is None, broken(assumption, consequence, "torch")
    over = torch.empty(0).set_(buffer.untyped_storage(), 0, (4, 3, 2), (6, 2, 1))
    assert view_base(over) is None, broken(assumption, consequence, "torch")


def test_torch_keeps_a_storage_object_alive_with_its_storage() -> None:
    assumption = "torch no longer keeps a storage's Python object alive as long as the storage"
    consequence = "a worker never learns that the main process let go of a batch: no worker buffer is reused"
    assert storage_objects_live_with_their_storage(), broken(assumption, consequence, "torch")


# --- numpy seed sequences ------------------------------------------------------------------------

SEEDING = (
    "numpy no longer seeds PCG64 from a registered seed sequence's generate_state(4, uint64), or its "
    "SeedSequence mixes entropy differently from torchloom.seeding._seed_states",
    "sample_rngs (a batch's generators) would differ from sample_rng, so augmentations would depend on "
    "whether a sample was loaded alone or in a batch",
    "numpy",
)


def test_numpy_takes_a_registered_seed_sequence_through_generate_state() -> None:
    calls: list[tuple[int, object]] = []

    class Recording:
        def generate_state(self, n_words: int, dtype: type = np.uint32) -> np.ndarray:
            calls.append((n_words, dtype))
            return np.random.SeedSequence(9).generate_state(n_words, dtype)

        def spawn(self, n_children: int) -> list[np.random.SeedSequence]:
            return np.random.SeedSequence(9).spawn(n_children)

    assert register_seed_sequence(Recording), broken(*SEEDING)
    generator = np.random.PCG64(Recording())
    assert calls == [(4, np.uint64)], broken(*SEEDING)
    assert generator.random_raw() == np.random.PCG64(np.random.SeedSequence(9)).random_raw(), broken(*SEEDING)
    assert seeding._BATCH_SEEDING, broken(*SEEDING)


def test_the_batch_seed_states_are_numpys_seed_sequence_states() -> None:
    rng = np.random.default_rng(20)
    triples = np.concatenate(
        [rng.integers(0, 1 << 32, (300, 3)), rng.integers(0, 50, (100, 3))]  # words, and small numbers
    ).astype(np.uint32)
    expected = np.array(
        [np.random.SeedSequence([int(word) for word in row]).generate_state(4, np.uint64) for row in triples]
    )
    assert np.array_equal(_seed_states(triples), expected), broken(*SEEDING)
    keys = [SampleKey(int(index), epoch=int(epoch)) for _, epoch, index in triples[:50]]
    for seed in (0, 7, (1 << 40) + 3):
        batch = [int(g.integers(1 << 62)) for g in sample_rngs(seed, keys)]
        alone = [int(sample_rng(seed, key.epoch, int(key)).integers(1 << 62)) for key in keys]
        assert batch == alone, broken(*SEEDING)


def test_without_numpys_interface_a_batch_is_seeded_key_by_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(np.random.bit_generator, "ISpawnableSeedSequence")
    assert not register_seed_sequence(type("Seeds", (), {}))
    monkeypatch.setattr(seeding, "_BATCH_SEEDING", False)
    keys = [SampleKey(i, epoch=1) for i in (0, 5, 9)]
    assert [int(g.integers(1 << 62)) for g in sample_rngs(3, keys)] == [
        int(sample_rng(3, 1, int(key)).integers(1 << 62)) for key in keys
    ]


# --- Accelerate ----------------------------------------------------------------------------------

ACCELERATE = (
    "Accelerate no longer iterates the sampler it wraps from a method of its BatchSamplerShard a few "
    "frames above the sampler (or CPython's frames changed)",
    "a torchloom sampler under accelerator.prepare(loader) splits by rank a second time: each process "
    "trains on half its share",
    "accelerate",
    "python",
)


class SplitterProbe(Sampler[int]):
    """Records what a torchloom sampler learns about a wrapper at its first step."""

    def __init__(self) -> None:
        self.found: list[int | None] = []

    def __len__(self) -> int:
        return 8

    def __iter__(self) -> Iterator[int]:
        self.found.append(outer_batch_splitter())
        yield from range(8)


def test_a_sampler_sees_accelerates_batch_shard_above_it() -> None:
    shard_module = pytest.importorskip("accelerate.data_loader")
    probe = SplitterProbe()
    shard = shard_module.BatchSamplerShard(BatchSampler(probe, 2, False), num_processes=2, process_index=1)
    assert [batch for batch in shard] == [[2, 3], [6, 7]]
    loader = DataLoader(list(range(8)), batch_sampler=shard)  # as a prepared loader iterates it
    assert [batch.tolist() for batch in loader] == [[2, 3], [6, 7]]
    assert probe.found == [2, 2], broken(*ACCELERATE)
    single = shard_module.BatchSamplerShard(BatchSampler(probe, 2, False), num_processes=1, process_index=0)
    list(single)
    list(BatchSampler(probe, 2, False))
    assert probe.found[2:] == [None, None]


def test_a_sampler_built_for_the_whole_world_needs_no_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    """The documented way around the frame walk: ``rank=0, world_size=1`` gives the global order."""
    shard_module = pytest.importorskip("accelerate.data_loader")
    monkeypatch.setattr(distributed, "accelerate_shard_processes", lambda frames: None)
    monkeypatch.setenv("RANK", "1")  # as torchrun sets them: a sampler left to look would split by rank
    monkeypatch.setenv("WORLD_SIZE", "2")
    labels = np.repeat([0, 1], [12, 6])
    order = BalancedSampler(labels, seed=0).global_order(0).tolist()
    shares = []
    for process in range(2):
        sampler = BalancedSampler(labels, seed=0, rank=0, world_size=1)
        shard = shard_module.BatchSamplerShard(
            BatchSampler(sampler, 3, False), num_processes=2, process_index=process
        )
        shares.append([int(key) for batch in shard for key in batch])
    assert sorted(shares[0] + shares[1]) == sorted(order)


def test_without_accelerate_loaded_nothing_splits_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "accelerate.data_loader", raising=False)
    assert accelerate_shard_processes(frames=8) is None


# --- torch's collate and pinning, and torchloom's Skipped marker ---------------------------------

SKIPPED = Skipped(3, "a.jpg", "DecodeError", "truncated")


@pytest.mark.parametrize("batch", [[SKIPPED, SKIPPED], [SKIPPED, {"x": 1}], [{"x": 1}, SKIPPED]])
def test_default_collate_of_a_skipped_marker_raises_the_markers_error(batch: list[object]) -> None:
    message = broken(
        "torch's default_collate no longer treats a registered Sequence as one (len, iteration or indexing)",
        "a DataLoader without torchloom's collate fails with 'found <class Skipped>' instead of saying to "
        "pass collate_fn=torchloom.collate",
        "torch",
    )
    try:
        default_collate(batch)
    except SkippedSampleError as error:
        assert "collate_fn=torchloom.collate" in str(error), message
    except Exception as error:
        pytest.fail(f"{message} (it raised {error!r})")
    else:
        pytest.fail(message)


def test_dataloader_pinning_asks_an_object_to_pin_itself_before_walking_it() -> None:
    from torch.utils.data._utils.pin_memory import pin_memory  # what DataLoader(pin_memory=True) runs

    message = broken(
        "torch's DataLoader pinning no longer asks an object for pin_memory() before treating it as a "
        "sequence",
        "DataLoader(pin_memory=True) fails on a batch holding skipped samples (batch['skipped'])",
        "torch",
    )
    pinned = pin_memory({"label": [1, 2], "skipped": [SKIPPED]})
    assert pinned["skipped"][0] is SKIPPED, message
