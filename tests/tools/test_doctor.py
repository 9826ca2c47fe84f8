"""torchloom doctor: planted faults found (and nothing else), end to end through the CLI."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import simplejpeg
from PIL import Image

from conftest import refuse_listing
from torchloom.testing import synthetic_image
from torchloom.tools.cli import main
from torchloom.tools.doctor import diagnose
from torchloom.tools.doctor import layout as layout_module
from torchloom.tools.doctor.duplicates import duplicate_groups, hash_pairs, near_pairs
from torchloom.tools.doctor.examine import examine_files
from torchloom.tools.doctor.perceptual import hamming
from torchloom.tools.doctor.schema import REPORT_SCHEMA, validate

COUNTS = {"train": {"a": 10, "b": 5, "c": 3}, "val": {"a": 3, "b": 3, "c": 2}}


def _image(seed: int) -> np.ndarray:
    rng = np.random.default_rng([7, seed])
    height, width = (int(v) for v in rng.integers(88, 120, 2))
    return synthetic_image(rng, height, width, label=seed)


def _write(path: Path, data: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


def _plant(root: Path) -> dict[str, object]:
    """Distinct images per split and class, then one fault of each kind; returns where."""
    seed = 0
    for split, classes in COUNTS.items():
        for name, count in classes.items():
            for i in range(count):
                seed += 1
                _write(root / split / name / f"{i:03d}.jpg", simplejpeg.encode_jpeg(_image(seed), quality=90))
    whole = simplejpeg.encode_jpeg(_image(1000), quality=90)
    png = io.BytesIO()
    Image.fromarray(_image(1001)).save(png, format="PNG")
    bad = {
        "truncated": _write(root / "train" / "a" / "truncated.jpg", whole[: len(whole) // 2]),
        "empty": _write(root / "train" / "b" / "empty.jpg", b""),
        "not_an_image": _write(root / "val" / "a" / "notes.jpg", b"this is a text file, not a JPEG\n"),
    }
    wrong = _write(root / "train" / "c" / "really_a_png.jpg", png.getvalue())
    exact = (str(root / "train" / "a" / "000.jpg"), str(root / "val" / "a" / "copy.jpg"))
    Path(exact[1]).write_bytes(Path(exact[0]).read_bytes())
    original = _image(int(COUNTS["train"]["a"]) + 1)  # train/b/000.jpg
    smaller = cv2.resize(original, None, fx=0.8, fy=0.8, interpolation=cv2.INTER_AREA)
    reencoded = _write(root / "val" / "b" / "reencoded.jpg", simplejpeg.encode_jpeg(smaller, quality=55))
    cropped_source = _image(COUNTS["train"]["a"] + COUNTS["train"]["b"] + 1)  # train/c/000.jpg
    h, w = cropped_source.shape[:2]
    crop = cropped_source[h * 4 // 100 : h - h * 3 // 100, w * 3 // 100 : w - w * 4 // 100]
    cropped = _write(root / "val" / "c" / "cropped.jpg", simplejpeg.encode_jpeg(crop, quality=85))
    leaks = {
        frozenset(exact),
        frozenset({str(root / "train" / "b" / "000.jpg"), reencoded}),
        frozenset({str(root / "train" / "c" / "000.jpg"), cropped}),
    }
    return {"bad": bad, "wrong": wrong, "leaks": leaks}


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    root = tmp_path_factory.mktemp("doctor") / "data"
    return root, _plant(root)


def _doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchloom", "doctor", *args], capture_output=True, text=True, timeout=120
    )


def test_cli_finds_every_planted_fault_and_nothing_else(
    planted: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    root, faults = planted
    out = tmp_path / "report"
    result = _doctor(str(root), "--json", "--out", str(out), "--threads", "2")
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    assert validate(document, REPORT_SCHEMA) == []
    assert json.loads((out / "report.json").read_text()) == document
    bad = {f["kind"]: f["path"] for f in document["bad_files"]}
    assert bad == faults["bad"]
    assert [f["path"] for f in document["wrong_extension"]] == [faults["wrong"]]
    assert document["wrong_extension"][0]["format"] == "PNG"
    pairs = document["duplicates"]["pairs"]
    assert {frozenset({p["a"]["path"], p["b"]["path"]}) for p in pairs} == faults["leaks"]
    assert all(p["leak"] and {p["a"]["split"], p["b"]["split"]} == {"train", "val"} for p in pairs)
    assert sorted(p["exact"] for p in pairs) == [False, False, True]
    assert document["problems"]["by_kind"] == {
        "truncated": 1,
        "empty": 1,
        "not_an_image": 1,
        "wrong_extension": 1,
        "exact_leak": 1,
        "near_leak": 2,
    }
    assert document["problems"]["count"] == 7
    classes = document["classes"]
    assert classes["counts"]["train"] == {"a": 11, "b": 6, "c": 4}  # files, bad ones included
    assert classes["imbalance_ratio"] == pytest.approx(11 / 4)
    assert classes["sampler"].startswith("BalancedSampler(dataset.targets")
    assert len(document["normalize"]["mean"]) == 3 and "Normalize(mean=(" in document["normalize"]["call"]
    assert document["images"]["modes"] == {"RGB": document["images"]["readable"]}
    for name in document["plots"]:
        pixels = np.asarray(Image.open(out / name).convert("L"))
        assert pixels.std() > 5, f"{name} looks blank"
    assert "classes.png" in document["plots"] and "image_sizes.png" in document["plots"]
    assert sum(name.startswith("duplicates") for name in document["plots"]) == 3


def test_cli_tables_clean_data_and_usage_errors(
    planted: tuple[Path, dict[str, object]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = planted
    clean = tmp_path / "clean"
    for i in range(6):
        _write(clean / f"class_{i % 2}" / f"{i}.jpg", simplejpeg.encode_jpeg(_image(500 + i)))
    assert main(["doctor", str(clean), "--out", str(tmp_path / "clean_report"), "--no-plots"]) == 0
    printed = capsys.readouterr().out
    assert "no problems found" in printed and "Normalize(mean=(" in printed
    assert "\x1b[" not in printed  # output that is not a terminal is plain text
    assert main(["doctor", str(root), "--out", str(tmp_path / "tables"), "--no-plots"]) == 1
    printed = capsys.readouterr().out
    assert "LEAK" in printed and "PROBLEMS: 7" in printed
    assert f"report written to {tmp_path / 'tables'}/" in printed
    missing = _doctor(str(tmp_path / "nope"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_the_hints_doctor_prints_run_as_printed(
    planted: tuple[Path, dict[str, object]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Normalize and BalancedSampler lines are code a user pastes: each runs as printed."""
    from torchloom import FolderDataset

    root, _ = planted
    assert main(["doctor", str(root), "--out", str(tmp_path / "report"), "--no-plots"]) == 1
    lines = capsys.readouterr().out.splitlines()
    normalize = next(line.strip() for line in lines if "import Normalize" in line)
    namespace: dict[str, object] = {}
    exec(normalize, namespace)
    assert type(namespace["normalize"]).__name__ == "Normalize"
    at = next(i for i, line in enumerate(lines) if "balance it with:" in line)
    sampler = [lines[at].split("balance it with:", 1)[1].strip(), lines[at + 1].strip()]
    namespace = {"dataset": FolderDataset(root / "train", on_error="skip", progress=False)}
    exec("\n".join(sampler), namespace)
    assert type(namespace["sampler"]).__name__ == "BalancedSampler"


def test_json_writes_no_folder_unless_out_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(4):
        _write(tmp_path / "data" / f"class_{i % 2}" / f"{i}.jpg", simplejpeg.encode_jpeg(_image(700 + i)))
    monkeypatch.chdir(tmp_path)
    assert main(["doctor", "data", "--json", "--no-plots"]) == 0
    printed = capsys.readouterr()
    assert json.loads(printed.out)["problems"]["count"] == 0 and "report written" not in printed.err
    assert sorted(os.listdir(tmp_path)) == ["data"]
    assert main(["doctor", "data", "--json", "--no-plots", "--out", "asked"]) == 0
    assert (tmp_path / "asked" / "report.json").exists()
    assert main(["doctor", "data", "--no-plots"]) == 0  # tables: written to the default folder
    assert (tmp_path / "torchloom-doctor" / "report.json").exists()


def test_near_duplicates_take_the_api_word(tmp_path: Path) -> None:
    from torchloom.tools.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["doctor", "data", "--near-max-distance", "3"]).near_max_distance == 3
    with pytest.raises(SystemExit):
        parser.parse_args(["doctor", "data", "--near-threshold", "3"])


def test_diagnose_api_and_manifest_layout(tmp_path: Path) -> None:
    rows = ["image,label,split"]
    for i in range(4):
        _write(tmp_path / "img" / f"{i}.jpg", simplejpeg.encode_jpeg(_image(900 + i)))
        rows.append(f"img/{i}.jpg,{'cat' if i % 2 else 'dog'},{'train' if i < 3 else 'val'}")
    (tmp_path / "img" / "dup.jpg").write_bytes((tmp_path / "img" / "0.jpg").read_bytes())
    rows.append("img/dup.jpg,dog,train")
    (tmp_path / "m.csv").write_text("\n".join(rows) + "\n")
    report = diagnose(tmp_path / "m.csv", num_threads=1)
    assert report.document["data"]["layout"] == "manifest"
    assert report.document["classes"]["counts"] == {
        "train": {"cat": 1, "dog": 3},
        "val": {"cat": 1, "dog": 0},
    }
    assert len(report.problems) == 1 and "duplicate in train" in report.problems[0]
    assert validate(json.loads(report.to_json()), REPORT_SCHEMA) == []
    out = tmp_path / "report"
    report.write(str(out))
    assert (out / "duplicates" / "pair_000.png").exists()
    (tmp_path / "img" / "dup.jpg").unlink()  # fixed: a rerun leaves no picture of the old pair
    (tmp_path / "m.csv").write_text("\n".join(rows[:-1]) + "\n")
    diagnose(tmp_path / "m.csv", num_threads=1).write(str(out))
    assert not list((out / "duplicates").glob("*.png")) and (out / "classes.png").exists()


def test_fifo_is_refused_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jpg"
    os.mkfifo(fifo)
    facts = examine_files([str(fifo)])
    assert facts.problem.tolist() == ["unreadable"] and "FIFO" in str(facts.reason[0])


def test_duplicate_groups_for_prepare(tmp_path: Path) -> None:
    paths = [_write(tmp_path / f"{i}.jpg", simplejpeg.encode_jpeg(_image(300 + i))) for i in range(4)]
    paths.append(_write(tmp_path / "copy.jpg", Path(paths[2]).read_bytes()))
    smaller = cv2.resize(_image(300), None, fx=0.7, fy=0.7, interpolation=cv2.INTER_AREA)
    paths.append(_write(tmp_path / "small.jpg", simplejpeg.encode_jpeg(smaller, quality=60)))
    assert duplicate_groups(paths) == [[0, 5], [2, 4]]
    assert duplicate_groups(paths, near=False) == [[2, 4]]


@pytest.mark.parametrize("max_distance", [0, 3, 8, 12])
def test_near_search_matches_brute_force(max_distance: int) -> None:
    rng = np.random.default_rng(max_distance)
    base = rng.integers(0, 2**63, 400, dtype=np.int64).astype(np.uint64)
    flips = [
        np.bitwise_or.reduce(np.uint64(1) << rng.choice(64, k, replace=False).astype(np.uint64))
        for k in range(14)
    ]
    planted = np.array([base[i] ^ flips[i % 14] for i in range(60)], dtype=np.uint64)
    hashes = np.unique(np.concatenate([base, planted]))
    distances = hamming(hashes[:, None], hashes[None, :])
    expected = {
        (int(i), int(j)) for i, j in zip(*np.nonzero(np.triu(distances <= max_distance, 1)), strict=True)
    }
    assert {tuple(pair) for pair in hash_pairs(hashes, max_distance).tolist()} == expected
    with_copies = np.concatenate([hashes, hashes[:2]])
    assert len(near_pairs(with_copies, max_distance=max_distance)) == len(expected) + 2


def test_same_grey_layout_in_other_colours_is_not_a_near_duplicate(tmp_path: Path) -> None:
    # The grey hash alone pairs different pictures that share where light and dark lie; the
    # colour thumbnail must keep them apart, while a re-encoded copy still pairs.
    rng = np.random.default_rng(7)
    layout = cv2.resize(rng.integers(0, 256, (8, 8), dtype=np.uint8), (96, 96), interpolation=cv2.INTER_CUBIC)
    red = np.stack([layout, layout // 4, layout // 4], axis=2)
    green = np.stack([layout // 4, layout, layout // 4], axis=2)
    paths = []
    for name, image, quality in (("red", red, 95), ("green", green, 95), ("red-copy", red, 60)):
        path = tmp_path / f"{name}.jpg"
        path.write_bytes(simplejpeg.encode_jpeg(np.ascontiguousarray(image), quality=quality))
        paths.append(str(path))
    facts = examine_files(paths)
    assert int(hamming(facts.phash[0], facts.phash[1])) <= 10  # the hash alone would pair them
    assert duplicate_groups(paths) == [[0, 2]]


def test_chunked_examination_matches_the_one_image_functions(tmp_path: Path) -> None:
    # examine_files measures a chunk of images in a few stacked calls; each row must equal what the
    # one-image functions give that image (shrunk or not, grey, PNG, odd sizes, a broken file).
    from torchloom.io import read_image
    from torchloom.tools.doctor.perceptual import colour_thumbnail, phash
    from torchloom.tools.doctor.quality import is_grayscale, pixel_scores, shrink

    rng = np.random.default_rng(3)
    paths = []
    for number, (height, width) in enumerate(
        [(64, 64), (64, 64), (200, 150), (97, 131), (48, 64), (300, 300)]
    ):
        image = synthetic_image(rng, height, width, number % 3)
        if number == 4:
            image = np.repeat(image.mean(axis=2, keepdims=True).astype(np.uint8), 3, axis=2)
        path = tmp_path / f"{number}.{'png' if number == 3 else 'jpg'}"
        if number == 3:
            Image.fromarray(image).save(path)
        else:
            path.write_bytes(simplejpeg.encode_jpeg(np.ascontiguousarray(image), quality=90))
        paths.append(str(path))
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff" + b"\0" * 50)
    paths.append(str(tmp_path / "broken.jpg"))
    facts = examine_files(paths, num_threads=2)
    assert not facts.readable[-1]
    for row, path in enumerate(paths[:-1]):
        full = read_image(path)
        small = shrink(read_image(path, min_size=(64, 64)))
        assert facts.phash[row] == phash(full) or int(hamming(facts.phash[row], np.uint64(phash(full)))) <= 2
        np.testing.assert_allclose(facts.scores[row], pixel_scores(small), atol=1e-5)
        assert facts.grayscale[row] == is_grayscale(small)
        assert np.abs(facts.thumbnail[row].astype(int) - colour_thumbnail(small)).max() <= 1


# --- what every other reader refuses is a problem -----------------------------------------------------


def _jpeg(path: Path, seed: int) -> None:
    _write(path, simplejpeg.encode_jpeg(_image(seed)))


def test_refused_entries_are_problems_with_their_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "data"
    _jpeg(root / "cat" / "1.jpg", 1)
    _jpeg(tmp_path / "elsewhere" / "dog" / "2.jpg", 2)
    (root / "dog").symlink_to(tmp_path / "elsewhere" / "dog")  # a class folder on another disk
    (root / "cat" / "gone.jpg").symlink_to(root / "cat" / "nothing.jpg")
    document = diagnose(root).document
    assert document["data"]["ignored"] == []
    refused = [f for f in document["bad_files"] if f["kind"] == "refused"]
    assert [(f["path"], f["split"]) for f in refused] == [(str(root / "dog"), "all")]
    assert refused[0]["reason"].startswith("symlink leading outside the root: resolves to")
    missing = next(f for f in document["bad_files"] if f["path"].endswith("gone.jpg"))
    assert (missing["kind"], missing["reason"]) == (
        "unreadable",
        "file does not exist",
    )  # as FolderDataset says
    assert document["problems"]["by_kind"] == {
        "refused": 1,
        "unreadable": 1,
    }  # dog is not also an empty class
    assert "--allow-outside-root" in document["problems"]["messages"][0]
    out = str(tmp_path / "report")
    assert main(["doctor", str(root), "--out", out, "--no-plots"]) == 1
    printed = capsys.readouterr().out
    assert "refused" in printed and "PROBLEMS: 2" in printed
    trusting = ["doctor", str(root), "--out", out, "--no-plots", "--allow-outside-root", "--json"]
    assert main(trusting) == 1  # only the missing file is left
    assert json.loads(capsys.readouterr().out)["problems"]["by_kind"] == {"unreadable": 1}


@pytest.mark.parametrize(
    ("files", "kinds"),
    [
        # a class named like a split: read as a split root, the real classes beside it
        (["cat/1.jpg", "dog/2.jpg", "Val/3.jpg"], {"beside_splits": 2, "no_images": 1}),
        # an export of phone photos: nothing doctor can examine
        (["cat/.DS_Store", "cat/IMG_1.HEIC"], {"empty_class": 1, "no_images": 1}),
        (["cat/1.jpg", "dog/.keep"], {"empty_class": 1}),
    ],
)
def test_a_dataset_every_reader_refuses_is_not_clean(
    tmp_path: Path, files: list[str], kinds: dict[str, int]
) -> None:
    for seed, name in enumerate(files):
        if name.endswith(".jpg"):
            _jpeg(tmp_path / name, seed)
        else:
            _write(tmp_path / name, b"\x00\x00\x00\x18ftypheic")
    report = diagnose(tmp_path)
    assert report.document["problems"]["by_kind"] == kinds
    assert validate(json.loads(report.to_json()), REPORT_SCHEMA) == []


def test_a_heic_photo_named_jpg_is_a_wrong_extension(tmp_path: Path) -> None:
    _jpeg(tmp_path / "cat" / "1.jpg", 1)
    _write(tmp_path / "cat" / "2.jpg", b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic")
    _write(tmp_path / "cat" / "3.heic", b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic")
    manifest = tmp_path / "m.csv"
    manifest.write_text("image\ncat/1.jpg\ncat/2.jpg\ncat/3.heic\n")
    document = diagnose(manifest).document
    assert document["wrong_extension"] == [
        {
            "path": str(tmp_path / "cat" / "2.jpg"),
            "split": "all",
            "extension": ".jpg",
            "format": "HEIC",
            "reason": "HEIC image named .jpg: not supported; convert it (e.g. with `heif-convert`)",
        }
    ]
    assert [(f["kind"], f["reason"]) for f in document["bad_files"]] == [
        ("unsupported", "HEIC image: not supported; convert it (e.g. with `heif-convert`)")
    ]
    assert (
        f"wrong extension: {tmp_path / 'cat' / '2.jpg'} (HEIC image named .jpg: not supported; convert it "
        "(e.g. with `heif-convert`))"
    ) in document["problems"]["messages"]
    assert validate(document, REPORT_SCHEMA) == []


def test_names_that_are_not_utf8_are_examined_and_named(tmp_path: Path) -> None:
    root = os.fsencode(tmp_path / "data")
    for seed, name in enumerate([b"cat/ok.jpg", b"cat/caf\xe9.jpg", b"caf\xe9/x.jpg", b"caf\xe9/copy.jpg"]):
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(simplejpeg.encode_jpeg(_image(min(seed, 2))))
    out = tmp_path / "report"
    result = _doctor(os.fsdecode(root), "--json", "--out", str(out))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    document = json.loads(result.stdout)
    assert document == json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert document["data"]["classes"] == ["caf\udce9", "cat"] and document["data"]["files"] == 4
    pair = document["duplicates"]["pairs"][0]
    assert {os.fsencode(pair[side]["path"]) for side in "ab"} == {
        os.path.join(root, b"caf\xe9/copy.jpg"),
        os.path.join(root, b"caf\xe9/x.jpg"),
    }
    assert "classes.png" in document["plots"] and "duplicates/pair_000.png" in document["plots"]
    tables = _doctor(os.fsdecode(root), "--out", str(out), "--no-plots")
    assert tables.returncode == 1 and "caf\\xe9" in tables.stdout


def test_examined_files_are_confined_to_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "data"
    _jpeg(root / "cat" / "1.jpg", 1)
    _jpeg(root / "cat" / "2.jpg", 2)
    _jpeg(tmp_path / "secret.jpg", 3)
    walk = layout_module.find_every_split

    def walk_then_swap(*args: object, **kwargs: bool) -> object:
        found = walk(*args, **kwargs)  # type: ignore[arg-type]
        (root / "cat" / "2.jpg").unlink()
        (root / "cat" / "2.jpg").symlink_to(tmp_path / "secret.jpg")
        return found

    monkeypatch.setattr(layout_module, "find_every_split", walk_then_swap)
    bad = diagnose(root).document["bad_files"]
    assert [(f["path"], f["kind"]) for f in bad] == [(str(root / "cat" / "2.jpg"), "unreadable")]
    assert "outside the dataset root" in bad[0]["reason"]


def test_data_that_cannot_be_read_is_one_line_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "data"
    _jpeg(root / "cat" / "1.jpg", 1)
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    (tmp_path / "file").write_text("x")
    argv = ["--no-plots", "--out", str(tmp_path / "report")]
    assert main(["doctor", str(fifo), *argv]) == 1
    assert capsys.readouterr().err == (
        f"torchloom doctor: UnsafeFileError: refusing to read {str(fifo)!r}: it is a FIFO (named pipe), "
        "not a regular file\n"
    )
    assert main(["doctor", str(root), "--no-plots", "--out", str(tmp_path / "file" / "report")]) == 1
    assert capsys.readouterr().err.startswith("torchloom doctor: NotADirectoryError: ")
    refuse_listing(monkeypatch, root)
    assert main(["doctor", str(root), *argv]) == 1
    error = capsys.readouterr().err
    assert error.startswith(
        f"torchloom doctor: UnreadableFileError: cannot read {str(root)!r}: permission denied"
    )
    assert error.count("\n") == 1
