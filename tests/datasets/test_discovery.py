"""The one walker: which files under a folder are samples, the same for every reader of folders."""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image as PILImage

from conftest import refuse_listing, write_jpeg
from torchloom import FolderDataset
from torchloom.datasets import VolumeDataset
from torchloom.datasets import folder as folder_module
from torchloom.datasets.discovery import (
    REASON_BESIDE_SPLITS,
    REASON_EXTENSION,
    REASON_HIDDEN,
    REASON_LOOP,
    REASON_METADATA,
    REASON_MISSING_FOLDER,
    REASON_NOT_IN_CLASS,
    REASON_OUTSIDE_ROOT,
    REASON_UNLISTABLE,
    find_every_split,
    find_samples,
    find_tree,
)
from torchloom.datasets.index import MAX_IGNORED_EXAMPLES
from torchloom.errors import ConfigError, EmptyDatasetError, UnreadableFileError, ValidationFailedError
from torchloom.tools.cli import main
from torchloom.tools.doctor import diagnose
from torchloom.tools.prepare.pipeline import prepare_dataset


def _a_locked_folder_is_unlistable() -> bool:
    """Whether chmod 000 stops this process listing a folder (root, with its capability to read
    any folder, lists it anyway: then the case cannot be planted, and is left out)."""
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0)
        try:
            os.listdir(folder)
            return False
        except PermissionError:
            return True
        finally:
            os.chmod(folder, 0o700)


LOCKABLE = _a_locked_folder_is_unlistable()
#: The sample files of the fixture, in walking order (the FIFO dog/x.jpg is listed, then refused).
SAMPLES = [
    ("cat/1.jpg", "cat"),
    ("cat/2.JPG", "cat"),
    ("cat/3.Png", "cat"),
    ("cat/link_inside.jpg", "cat"),
    ("cat/more/7.jpg", "cat"),
    ("cat/nested/deeper/5.jpg", "cat"),
    ("dog/6.jpg", "dog"),
    ("dog/x.jpg", "dog"),
]
#: What the walker leaves out of the fixture read as class folders, in walking order.
EXCLUDED = [
    (".store", REASON_HIDDEN),
    ("README.md", REASON_NOT_IN_CLASS),
    ("cat/.cache", REASON_HIDDEN),
    ("cat/.hidden.jpg", REASON_HIDDEN),
    ("cat/link_outside.jpg", REASON_OUTSIDE_ROOT),
    *([("cat/locked", REASON_UNLISTABLE)] if LOCKABLE else []),
    ("cat/loop", REASON_LOOP),
    ("cat/notes.txt", REASON_EXTENSION),
    ("stray.jpg", REASON_NOT_IN_CLASS),
]
CLASSES = ["cat", "dog", "empty"]


def _png(path: Path) -> None:
    buffer = io.BytesIO()
    PILImage.fromarray(np.full((40, 30, 3), 90, np.uint8)).save(buffer, format="PNG")
    path.write_bytes(buffer.getvalue())


@pytest.fixture
def every_case(tmp_path: Path) -> Iterator[Path]:
    """A class folder root holding every case the walker has a rule for."""
    root = tmp_path / "data"
    write_jpeg(root / "cat" / "1.jpg", seed=1)
    write_jpeg(root / "cat" / "2.JPG", seed=2)
    _png(root / "cat" / "3.Png")
    write_jpeg(root / "cat" / ".hidden.jpg", seed=3)
    write_jpeg(root / "cat" / ".cache" / "4.jpg", seed=4)
    write_jpeg(root / "cat" / "nested" / "deeper" / "5.jpg", seed=5)
    (root / "cat" / "notes.txt").write_text("not an image")
    write_jpeg(root / "dog" / "6.jpg", seed=6)
    os.mkfifo(root / "dog" / "x.jpg")
    write_jpeg(root / ".store" / "more" / "7.jpg", seed=7)
    write_jpeg(tmp_path / "outside" / "secret.jpg", seed=8)
    (root / "cat" / "link_inside.jpg").symlink_to(root / "dog" / "6.jpg")
    (root / "cat" / "link_outside.jpg").symlink_to(tmp_path / "outside" / "secret.jpg")
    (root / "cat" / "more").symlink_to(root / ".store" / "more", target_is_directory=True)
    (root / "cat" / "loop").symlink_to(root, target_is_directory=True)
    (root / "empty").mkdir()
    (root / "README.md").write_text("about")
    write_jpeg(root / "stray.jpg", seed=9)
    locked = root / "cat" / "locked"
    if LOCKABLE:
        write_jpeg(locked / "8.jpg", seed=10)
        locked.chmod(0)
    yield root
    if locked.exists():
        locked.chmod(0o755)


def _relative(root: Path, path: str) -> str:
    return Path(path).relative_to(root).as_posix()


def _reason(text: str) -> str:
    """The reason a report's text starts with (its detail, after ': ', dropped)."""
    return text.split(": ")[0]


def _reasons(root: Path, items: list[tuple[str, str]]) -> set[tuple[str, str]]:
    return {(_relative(root, path), _reason(text)) for path, text in items}


def test_the_walker_applies_every_rule(every_case: Path) -> None:
    found = find_samples(every_case)
    assert found.layout == "classes" and found.classes == CLASSES
    assert list(zip(found.relative_paths(), [found.classes[i] for i in found.labels], strict=True)) == SAMPLES
    assert [(_relative(every_case, e.path), e.reason) for e in found.excluded] == EXCLUDED
    assert found.empty_classes == ["empty"]
    assert found.labels.dtype == np.int64 and found.splits.tolist() == [0] * len(SAMPLES)
    outside = next(e for e in found.excluded if e.reason == REASON_OUTSIDE_ROOT)
    assert outside.refused and "secret.jpg" in outside.text


def test_folder_dataset_doctor_and_prepare_agree_file_by_file(every_case: Path, tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match="empty"):
        dataset = FolderDataset(every_case, progress=False)
    doctor = diagnose(every_case, num_threads=1)
    labels = [(path, label) for path, label in SAMPLES]
    prepared = prepare_dataset(
        str(every_case), str(tmp_path / "out"), label_entries=labels, fractions=(0.5, 0.5)
    )

    fifo = str(every_case / "dog" / "x.jpg")
    usable = [path for path, _ in SAMPLES if path != "dog/x.jpg"]
    assert [_relative(every_case, p) for p in dataset.index.paths.to_list()] == usable
    assert [dataset.classes[i] for i in dataset.targets] == [
        label for path, label in SAMPLES if path in usable
    ]
    assert [_relative(every_case, p) for p in doctor.layout.paths.to_list()] == [p for p, _ in SAMPLES]
    assert sorted(prepared.manifest.column("source").to_pylist()) == sorted(usable)
    assert dict(
        zip(*(prepared.manifest.column(c).to_pylist() for c in ("source", "label")), strict=True)
    ) == {path: label for path, label in SAMPLES if path in usable}
    assert dataset.classes == doctor.document["data"]["classes"] == CLASSES
    assert prepared.classes == ["cat", "dog"]  # prepare labels from the map: it never sees the empty class

    # The same exclusions, with the same reasons: a dataset's report, the doctor's, prepare's.
    fifo_reason = dict(dataset.report.invalid)[fifo]
    in_report = _reasons(every_case, dataset.report.ignored + dataset.report.invalid)
    # The doctor lists the refused entries (and the files it could not read) as bad files.
    doctor_items = doctor.document["data"]["ignored"] + doctor.document["bad_files"]
    in_doctor = _reasons(every_case, [(item["path"], item["reason"]) for item in doctor_items])
    in_prepare = {(path, _reason(text)) for path, text in prepared.problems["unreadable"]}
    in_prepare |= {(item.path, item.reason) for item in prepared.ignored}
    assert in_report == set(EXCLUDED) | {("dog/x.jpg", fifo_reason)}
    assert in_doctor == set(EXCLUDED) | {("dog/x.jpg", fifo_reason)}
    # A raw tree has no class folders: files at its root are images or not by their extension.
    tree = {(path, reason) for path, reason in EXCLUDED if reason != REASON_NOT_IN_CLASS}
    assert in_prepare == tree | {("README.md", REASON_EXTENSION), ("dog/x.jpg", fifo_reason)}
    assert ("stray.jpg", "no label for this image") in prepared.problems["unmatched"]

    # The FIFO is listed by all three and refused by each reader before a byte is read.
    assert "FIFO" in dict(dataset.report.invalid)[fifo]
    assert "FIFO" in dict(prepared.problems["unreadable"])["dog/x.jpg"]
    assert any(f["path"] == fifo and "FIFO" in f["reason"] for f in doctor.document["bad_files"])


def test_an_unlistable_folder_is_refused_alike_everywhere(
    every_case: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nested = str(every_case / "cat" / "nested")
    real_scandir = os.scandir

    def scandir(path: str) -> object:
        if os.fspath(path) == nested:
            raise PermissionError(13, "Permission denied", nested)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.warns(UserWarning):
        dataset = FolderDataset(every_case, validate="none", progress=False)
    doctor = diagnose(every_case, num_threads=1)
    tree = find_tree(every_case)
    for paths in (dataset.index.paths.to_list(), doctor.layout.paths.to_list(), tree.paths.to_list()):
        assert not [path for path in paths if path.startswith(nested)]
    reason = f"{REASON_UNLISTABLE}: PermissionError: [Errno 13] Permission denied: {nested!r}"
    assert (nested, reason) in dataset.report.invalid
    refused = {"path": nested, "split": "all", "kind": "refused", "reason": reason}
    assert refused in doctor.document["bad_files"]
    assert [e.text for e in tree.refused if e.path == nested] == [reason]
    with pytest.raises(ValidationFailedError, match="nested"):
        FolderDataset(every_case, strict=True, progress=False)


def test_links_outside_the_root_are_followed_only_when_allowed(every_case: Path) -> None:
    with pytest.raises(ValidationFailedError, match="link_outside"):
        FolderDataset(every_case, validate="none", strict=True, progress=False)
    found = find_samples(every_case, allow_outside_root=True)
    assert "cat/link_outside.jpg" in found.relative_paths()
    assert REASON_OUTSIDE_ROOT not in found.counts()


def test_order_follows_path_components_and_a_dangling_link_is_listed(tmp_path: Path) -> None:
    for name in ("a/sub.jpg", "a/sub/c.jpg", "a/B.jpg", "a/a.jpg", "b/z.jpg"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "b" / "gone.jpg").symlink_to(tmp_path / "nowhere.jpg")
    found = find_samples(tmp_path)
    assert found.relative_paths() == [
        "a/B.jpg",
        "a/a.jpg",
        "a/sub/c.jpg",
        "a/sub.jpg",
        "b/gone.jpg",
        "b/z.jpg",
    ]
    assert found.excluded == []


def test_files_directly_in_root_are_unlabelled_for_sources_and_refused_by_folder_dataset(
    tmp_path: Path,
) -> None:
    np.save(tmp_path / "a.npy", np.zeros((2, 3, 3), np.int16))
    np.save(tmp_path / "b.NPY", np.zeros((2, 3, 3), np.int16))
    (tmp_path / ".c.npy").write_bytes(b"x")
    volumes = VolumeDataset(tmp_path, progress=False)
    assert volumes.classes is None and len(volumes) == 2 and volumes.report.ignored_count == 1
    assert find_every_split(tmp_path).layout == "files"
    write_jpeg(tmp_path / "d.jpg")
    with pytest.raises(EmptyDatasetError, match=r"no class folders \(1 file"):
        FolderDataset(tmp_path, progress=False)


def test_extensions_must_start_with_a_dot(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"start with '\.'"):
        find_samples(tmp_path, extensions=["jpg"])


def test_a_report_keeps_some_ignored_names_and_the_exact_count(clean_folders: Path) -> None:
    for i in range(MAX_IGNORED_EXAMPLES + 50):
        (clean_folders / "class_0" / f"notes_{i}.txt").write_text("x")
    dataset = FolderDataset(clean_folders, validate="none", progress=False)
    assert dataset.report.ignored_count == MAX_IGNORED_EXAMPLES + 50
    assert len(dataset.report.ignored) == MAX_IGNORED_EXAMPLES
    assert len(find_samples(clean_folders).excluded) == MAX_IGNORED_EXAMPLES + 50


# --- split roots ---------------------------------------------------------------------------------------


@pytest.fixture
def split_root(tmp_path: Path) -> Path:
    """train/ with cat, dog and an empty bird; Val/ with cat and an extra class, eel."""
    root = tmp_path / "splits"
    for i, name in enumerate(["train/cat/1.jpg", "train/dog/2.jpg", "Val/cat/3.jpg", "Val/eel/4.jpg"]):
        write_jpeg(root / name, seed=i)
    (root / "train" / "bird").mkdir()
    (root / "train" / "loose.jpg").write_bytes(b"x")
    (root / "extra").mkdir()
    (root / "notes.txt").write_text("x")
    return root


def test_a_split_root_is_never_read_as_classes(split_root: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        FolderDataset(split_root, progress=False)
    message = str(caught.value)
    assert "['Val', 'train']" in message and "split='train'" in message and "torchloom doctor" in message
    with pytest.raises(ConfigError, match="split="):
        VolumeDataset(split_root, progress=False)


def test_split_reads_one_split_with_the_classes_of_all(split_root: Path) -> None:
    with pytest.warns(UserWarning, match="bird"):
        train = FolderDataset(split_root, split="train", progress=False)
    with pytest.warns(UserWarning, match="'bird', 'dog'"):
        val = FolderDataset(split_root, split="val", progress=False)  # the folder is Val: any case
    assert train.classes == val.classes == ["bird", "cat", "dog", "eel"]
    assert train.split == "train" and val.split == "Val"
    assert [train.classes[i] for i in train.targets] == ["cat", "dog"]
    assert [val.classes[i] for i in val.targets] == ["cat", "eel"]
    ignored = {
        (Path(path).relative_to(split_root).as_posix(), reason) for path, reason in train.report.ignored
    }
    assert ignored == {
        ("extra", REASON_BESIDE_SPLITS),
        ("notes.txt", REASON_NOT_IN_CLASS),
        ("train/loose.jpg", REASON_NOT_IN_CLASS),
    }
    with pytest.raises(ConfigError, match=r"'test' is not one of the split folders \['Val', 'train'\]"):
        FolderDataset(split_root, split="test", progress=False)
    with pytest.raises(ConfigError, match="has none"):
        FolderDataset(split_root / "train", split="train", progress=False)
    every = find_every_split(split_root)
    assert every.split_names == ["Val", "train"] and every.splits.tolist() == [0, 0, 1, 1]


@pytest.mark.filterwarnings("ignore:.*hold no usable images")
def test_show_and_cache_take_a_split(
    split_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A split root without --split is a usage error (2), alike in every command that reads DATA.
    assert main(["show", str(split_root), "--out", str(tmp_path / "grid.png")]) == 2
    assert "--split train" in capsys.readouterr().err
    for command, options in (("cache", ["--out", str(tmp_path / "cache")]), ("bench", ["--plot", ""])):
        assert main([command, str(split_root), *options]) == 2
        assert f"torchloom {command}: ConfigError:" in capsys.readouterr().err
    assert main(["show", str(split_root), "--split", "train", "--out", str(tmp_path / "grid.png")]) == 0
    assert main(["cache", str(split_root), "--split", "val", "--out", str(tmp_path / "cache")]) == 0
    assert "2 samples" in capsys.readouterr().out


# --- folders as real sources make them ------------------------------------------------------------------


def test_a_link_out_of_the_root_is_refused_before_its_target_exists(tmp_path: Path) -> None:
    """Judged by where it leads, not by whether that exists yet: never listed, so never read once
    the file appears (with validate="none" nothing else would stop it)."""
    root = tmp_path / "data"
    write_jpeg(root / "cat" / "1.jpg")
    (tmp_path / "mnt").mkdir()
    (root / "cat" / "2.jpg").symlink_to(tmp_path / "mnt" / "photo.jpg")
    dataset = FolderDataset(root, validate="none", progress=False)
    write_jpeg(tmp_path / "mnt" / "photo.jpg", seed=5)
    assert dataset.index.paths.to_list() == [str(root / "cat" / "1.jpg")]
    assert [(_relative(root, path), _reason(text)) for path, text in dataset.report.invalid] == [
        ("cat/2.jpg", REASON_OUTSIDE_ROOT)
    ]


def test_a_class_folder_on_a_disk_not_mounted_keeps_its_class_and_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "data"
    write_jpeg(root / "cat" / "1.jpg")
    write_jpeg(root / "dog" / "2.jpg")
    (root / "birds").symlink_to(tmp_path / "disk2" / "birds")  # the disk is not there
    (root / "notes.txt").symlink_to(tmp_path / "disk2" / "notes.txt")  # a stray file's link: no class
    with pytest.warns(UserWarning, match="birds"):
        unmounted = FolderDataset(root, allow_outside_root=True, progress=False)
    write_jpeg(tmp_path / "disk2" / "birds" / "3.jpg")
    mounted = FolderDataset(root, allow_outside_root=True, progress=False)
    assert unmounted.classes == mounted.classes == ["birds", "cat", "dog"]
    assert unmounted.class_to_idx["dog"] == mounted.class_to_idx["dog"] == 2
    assert [(_relative(root, path), _reason(text)) for path, text in unmounted.report.invalid] == [
        ("birds", REASON_MISSING_FOLDER)
    ]
    assert "disk2/birds' does not exist" in unmounted.report.invalid[0][1]
    assert ("notes.txt", REASON_NOT_IN_CLASS) in _reasons(root, unmounted.report.ignored)
    with pytest.warns(UserWarning, match="birds"):  # confined, it is refused for leading outside
        confined = FolderDataset(root, progress=False)
    assert confined.classes == mounted.classes
    assert _reasons(root, confined.report.invalid) == {("birds", REASON_OUTSIDE_ROOT)}


@pytest.mark.filterwarnings("ignore:.*hold no usable images")
def test_a_split_that_cannot_be_listed_for_its_classes_is_an_error(tmp_path: Path) -> None:
    """The labels of one split are numbered by the classes of every split: without those of a split
    kept elsewhere, train's label numbers would silently differ from val's."""
    root = tmp_path / "data"
    for name in (
        "data/train/cat/1.jpg",
        "data/train/dog/2.jpg",
        "disk2/val/bird/3.jpg",
        "disk2/val/cat/4.jpg",
    ):
        write_jpeg(tmp_path / name)
    (root / "val").symlink_to(tmp_path / "disk2" / "val")
    with pytest.raises(ConfigError, match=r"split folder .*val.* cannot be read \(symlink leading outside"):
        FolderDataset(root, split="train", progress=False)
    train = FolderDataset(root, split="train", allow_outside_root=True, progress=False)
    val = FolderDataset(root, split="val", allow_outside_root=True, progress=False)
    assert train.classes == val.classes == ["bird", "cat", "dog"]
    (root / "val").unlink()
    (root / "val").symlink_to(tmp_path / "gone" / "val")
    with pytest.raises(ConfigError, match="mount the disk"):
        FolderDataset(root, split="train", allow_outside_root=True, progress=False)
    doctor = find_every_split(root)  # doctor reads every split: the refusal is reported, not raised
    assert [e.reason for e in doctor.refused] == [REASON_OUTSIDE_ROOT]


def test_macos_and_nas_metadata_folders_are_never_classes(tmp_path: Path) -> None:
    """An unzipped macOS archive's __MACOSX would be class 0 and shift every label (torchvision's
    ImageFolder refuses such a root); Synology's @eaDir holds thumbnails named .jpg."""
    root = tmp_path / "data"
    write_jpeg(root / "cat" / "1.jpg")
    write_jpeg(root / "dog" / "2.jpg")
    (root / "__MACOSX" / "cat").mkdir(parents=True)
    (root / "__MACOSX" / "cat" / "._1.jpg").write_bytes(b"\x00\x05\x16\x07")
    write_jpeg(root / "dog" / "@eaDir" / "2.jpg" / "SYNOPHOTO_THUMB_XL.jpg")
    dataset = FolderDataset(root, progress=False)
    assert dataset.classes == ["cat", "dog"] and dataset.class_to_idx["cat"] == 0
    assert [_relative(root, path) for path in dataset.index.paths.to_list()] == ["cat/1.jpg", "dog/2.jpg"]
    assert _reasons(root, dataset.report.ignored) == {
        ("__MACOSX", REASON_METADATA),
        ("dog/@eaDir", REASON_METADATA),
    }
    assert [e.reason for e in find_tree(root).excluded] == [REASON_METADATA, REASON_METADATA]


def test_a_root_that_cannot_be_listed_is_a_typed_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "data"
    write_jpeg(root / "cat" / "1.jpg")
    refuse_listing(monkeypatch, root)
    for read in (FolderDataset, find_tree, find_every_split):
        with pytest.raises(UnreadableFileError, match=r"cannot read .*data'.*fix its permissions"):
            read(root)


@pytest.mark.parametrize("validate", ["exists", "header", "full"])
def test_validation_reads_are_confined_to_the_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, validate: str
) -> None:
    """A file swapped for a link out of the root after the walk is refused by validation too."""
    root = tmp_path / "data"
    write_jpeg(root / "cat" / "1.jpg")
    write_jpeg(root / "cat" / "2.jpg")
    write_jpeg(tmp_path / "secret.jpg", seed=3)
    walk = folder_module.find_samples

    def walk_then_swap(*args: Any, **kwargs: Any) -> Any:
        found = walk(*args, **kwargs)
        (root / "cat" / "2.jpg").unlink()
        (root / "cat" / "2.jpg").symlink_to(tmp_path / "secret.jpg")
        return found

    monkeypatch.setattr(folder_module, "find_samples", walk_then_swap)
    dataset = FolderDataset(root, validate=validate, progress=False)
    assert [os.path.basename(path) for path in dataset.index.paths.to_list()] == ["1.jpg"]
    assert "outside the dataset root" in dict(dataset.report.invalid)[str(root / "cat" / "2.jpg")]
