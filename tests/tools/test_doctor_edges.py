"""torchloom doctor on data as real sources leave it: unlabelled layouts, unreadable folders, names
that are not UTF-8, an output folder inside the data, a report that fails half-way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import refuse_listing, write_jpeg
from torchloom.tools.cli import main
from torchloom.tools.doctor import diagnose
from torchloom.tools.doctor.diagnosis import DoctorReport

EXPECTED = "expected class folders DATA/<class>/<image>, split folders DATA/<split>/<class>/<image>"


def _doctor(*args: str | bytes) -> subprocess.CompletedProcess[bytes]:
    command = [sys.executable, "-m", "torchloom", "doctor", *args]
    return subprocess.run([os.fsencode(part) for part in command], capture_output=True, timeout=120)


def _flat(root: Path) -> str:
    write_jpeg(root / "1.jpg", seed=1)
    write_jpeg(root / "2.jpg", seed=2)
    return str(root)


def _nothing(root: Path) -> str:
    (root / "cat").mkdir(parents=True)
    (root / "notes.txt").write_text("the photos are on the other disk")
    return str(root)


def _manifest(text: str) -> object:
    def build(root: Path) -> str:
        write_jpeg(root / "1.jpg", seed=1)
        write_jpeg(root / "2.jpg", seed=2)
        (root / "m.csv").write_text(text)
        return str(root / "m.csv")

    return build


@pytest.mark.parametrize(
    ("build", "kinds", "says"),
    [
        (_flat, {"unlabelled": 1}, f"2 image file(s) directly in DATA, no class folders; {EXPECTED}"),
        (_nothing, {"empty_class": 1, "no_images": 1}, "in class folders DATA/<class>/<image>, split"),
        (
            _manifest("image\n1.jpg\n2.jpg\n"),
            {"unlabelled": 1},
            "manifest DATA has no label column; expected one of ['label', 'class', 'category', 'target']",
        ),
        (
            _manifest("image,label\n1.jpg,cat\n2.jpg,\n"),
            {"unlabelled": 1},
            "1 row(s) of manifest DATA have an empty label (first: ROOT/2.jpg); give every row a label",
        ),
    ],
    ids=["flat folder", "no images", "manifest without labels", "manifest row without a label"],
)
def test_data_without_labels_or_images_is_a_problem_naming_what_was_expected(
    tmp_path: Path, build: object, kinds: dict[str, int], says: str
) -> None:
    data = build(tmp_path / "data")  # type: ignore[operator]
    report = diagnose(data)
    assert report.document["problems"]["by_kind"] == kinds
    messages = [m.replace(data, "DATA").replace(str(tmp_path / "data"), "ROOT") for m in report.problems]
    assert any(says in message for message in messages), messages
    out = tmp_path / "report"
    assert main(["doctor", data, "--out", str(out), "--no-plots"]) == 1


def _two_classes(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    write_jpeg(root / "cat" / "1.jpg", seed=1)
    write_jpeg(root / "dog" / "1.jpg", seed=2)
    return root


def test_an_unreadable_class_folder_is_a_problem_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _two_classes(tmp_path)
    refuse_listing(monkeypatch, root / "dog")
    assert main(["doctor", str(root), "--out", str(tmp_path / "report"), "--no-plots"]) == 1
    printed = capsys.readouterr().out
    assert "PROBLEMS: 1 (refused: 1)" in printed, printed


def test_out_inside_data_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _two_classes(tmp_path)
    (tmp_path / "link").symlink_to(root)
    for out in (root / "report", root, tmp_path / "link" / "report"):
        assert main(["doctor", str(root), "--out", str(out)]) == 2
        error = capsys.readouterr().err
        assert "is inside DATA" in error and "choose a folder outside it" in error, error
    monkeypatch.chdir(root)  # the default ./torchloom-doctor would land in DATA too
    assert main(["doctor", "."]) == 2
    assert main(["doctor", ".", "--json", "--no-plots"]) == 0  # writes nothing: nothing to refuse
    assert sorted(os.listdir(root)) == ["cat", "dog"]
    manifest = root / "m.csv"
    manifest.write_text("image,label\ncat/1.jpg,cat\ndog/1.jpg,dog\n")
    # A manifest's rows name its files: a report beside it is never read as data.
    assert main(["doctor", str(manifest), "--out", str(root / "report"), "--no-plots"]) == 0


def test_a_report_that_fails_half_way_leaves_the_last_one_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "data"
    write_jpeg(root / "cat" / "1.jpg", seed=1)
    out = tmp_path / "report"
    report = diagnose(root)
    report.write(str(out), plots=False)
    before = (out / "report.json").read_bytes()

    def broken(self: DoctorReport) -> str:
        raise UnicodeEncodeError("utf-8", "caf\udce9", 3, 4, "surrogates not allowed")

    monkeypatch.setattr(DoctorReport, "to_json", broken)
    with pytest.raises(UnicodeEncodeError):
        report.write(str(out), plots=False)
    assert (out / "report.json").read_bytes() == before and sorted(os.listdir(out)) == ["report.json"]


def test_names_that_are_not_utf8_in_data_out_and_manifests(tmp_path: Path) -> None:
    """Names copied from an old archive (Latin-1 bytes): DATA, --out and a manifest's rows."""
    root = os.path.join(os.fsencode(tmp_path), b"d\xe9p\xf4t")
    for name in (b"caf\xe9/1.jpg", b"caf\xe9/2\xff.jpg", b"dog/1.jpg"):
        write_jpeg(os.fsdecode(os.path.join(root, name)), seed=len(name))
    out = os.path.join(os.fsencode(tmp_path), b"rapport \xe9t\xe9")
    done = _doctor(root, b"--out", out, b"--json")
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
    document = json.loads(done.stdout)
    assert document == json.loads(Path(os.fsdecode(os.path.join(out, b"report.json"))).read_text("utf-8"))
    assert document["data"]["classes"] == ["caf\udce9", "dog"] and document["data"]["files"] == 3
    # On the terminal a name's undecodable bytes read \xNN, in the tables and on stderr alike.
    assert done.stderr == b"report written to " + os.fsencode(printable_path(out)) + b"/report.json\n"
    tables = _doctor(root, b"--out", out)
    assert tables.returncode == 0 and b"d\\xe9p\\xf4t" in tables.stdout and b"Traceback" not in tables.stderr
    manifest = os.path.join(root, b"m.csv")
    with open(manifest, "wb") as handle:
        handle.write(b"image,label\ncaf\xe9/1.jpg,a\ndog/1.jpg,b\n")
    refused = _doctor(manifest, b"--out", out, b"--no-plots")
    assert refused.returncode == 1 and b"Traceback" not in refused.stderr
    error = refused.stderr
    assert error.startswith(b"torchloom doctor: ManifestError: manifest '"), error
    assert error.endswith(b"; save it as UTF-8 text\n"), error


def printable_path(path: bytes) -> str:
    return path.decode("utf-8", "backslashreplace")
