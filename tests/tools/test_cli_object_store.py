"""The commands on a real S3 server (SeaweedFS on loopback, behind the counting proxy): DATA as an
``s3://`` folder or manifest, reached with ``--storage-option``; outputs stay local."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pa_parquet
import pytest

from s3proxy import FaultProxy
from s3server import S3Bucket, S3Server
from torchloom import Image, Label, ManifestDataset
from torchloom.testing import write_class_folders
from torchloom.tools.cli import main

CLASSES = ("cat", "dog")


def upload(fs: Any, local: Path, bucket: S3Bucket, prefix: str) -> list[str]:
    """Every file below ``local`` as an object below ``prefix``; their keys, sorted."""
    keys = sorted(path.relative_to(local).as_posix() for path in local.rglob("*") if path.is_file())
    fs.pipe({bucket.path(f"{prefix}/{key}"): (local / key).read_bytes() for key in keys})
    return keys


def put_images(fs: Any, bucket: S3Bucket, count: int, tmp_path: Path, prefix: str = "train") -> list[str]:
    """``count`` JPEGs in two class folders below ``prefix``, and ``manifest.csv`` of them; their
    keys relative to ``prefix``."""
    local = tmp_path / "images"
    write_class_folders(local, [count - count // 2, count // 2], size=(24, 24), progress=False)
    keys = upload(fs, local, bucket, prefix)
    rows = "".join(f"{key},{key.split('/')[0]}\n" for key in keys)
    fs.pipe(bucket.path(f"{prefix}/manifest.csv"), f"image,label\n{rows}".encode())
    return keys


def options_for(proxy: FaultProxy) -> list[str]:
    """The command line's ``--storage-option`` arguments that reach the server through ``proxy``."""
    return options_for_server(proxy)


def options_for_server(server: FaultProxy | S3Server) -> list[str]:
    """The ``--storage-option`` arguments of ``server``'s storage options."""
    arguments = []
    for key, value in server.storage_options.items():
        text = value if isinstance(value, str) else json.dumps(value)
        arguments += ["--storage-option", f"{key}={text}"]
    return arguments


def test_show_draws_samples_of_a_bucket_folder(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    put_images(s3_server.filesystem(), s3_bucket, 6, tmp_path)
    out = tmp_path / "grid.png"
    status = main(["show", f"{s3_bucket.url}/train", "--n", "4", "--out", str(out), *options_for(s3_proxy)])
    assert status == 0 and out.stat().st_size > 0
    counts = s3_proxy.requests
    assert counts.lists >= 1 and counts.heads == 0


def test_show_reads_a_manifest_in_the_bucket(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    put_images(s3_server.filesystem(), s3_bucket, 6, tmp_path)
    out = tmp_path / "grid.png"
    data = s3_bucket.url_of("train/manifest.csv")
    assert main(["show", data, "--n", "3", "--out", str(out), *options_for(s3_proxy)]) == 0
    assert s3_proxy.requests.lists == 0


def test_bench_measures_a_bucket_folder(
    s3_server: S3Server,
    s3_proxy: FaultProxy,
    s3_bucket: S3Bucket,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    put_images(s3_server.filesystem(), s3_bucket, 16, tmp_path)
    data = f"{s3_bucket.url}/train"
    arguments = ["--budget", "1", "--batch-size", "8", "--json", "--plot", ""]
    status = main(["bench", data, *arguments, *options_for(s3_proxy)])
    assert status == 0
    assert json.loads(capsys.readouterr().out)["best"]["batch_size"] == 8
    assert s3_proxy.requests.object_gets >= 8


def test_cache_builds_from_a_bucket_into_a_local_folder(
    s3_server: S3Server,
    s3_proxy: FaultProxy,
    s3_bucket: S3Bucket,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    put_images(s3_server.filesystem(), s3_bucket, 6, tmp_path)
    out = tmp_path / "cache"
    data = f"{s3_bucket.url}/train"
    assert main(["cache", data, "--out", str(out), *options_for(s3_proxy)]) == 0
    assert out.is_dir() and any(out.iterdir())
    assert s3_proxy.requests.heads == 0
    s3_proxy.reset_counts()
    assert main(["cache", data, "--out", str(out), *options_for(s3_proxy)]) == 0
    assert "reused" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["show", "cache"])
def test_an_output_url_is_a_usage_error(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "s3://bucket/train", "--out", "s3://bucket/out"]) == 2
    assert "is a URL; outputs are written to a local path" in capsys.readouterr().err


def test_doctor_examines_a_bucket_split_root_and_writes_the_report_locally(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    fs = s3_server.filesystem()
    write_class_folders(tmp_path / "train", [3, 3], size=(24, 24), empty=1, progress=False)
    write_class_folders(tmp_path / "val", [1, 1], size=(24, 24), seed=1, progress=False)
    upload(fs, tmp_path, s3_bucket, "data")
    fs.pipe(s3_bucket.path("data/val/class_0/leak.jpg"), (tmp_path / "train/class_0/000000.jpg").read_bytes())
    out = tmp_path / "report"
    arguments = ["--out", str(out), *options_for(s3_proxy)]
    status = main(["doctor", f"{s3_bucket.url}/data", *arguments])
    assert status == 1  # the empty file and the leak
    document = json.loads((out / "report.json").read_text())
    assert document["data"]["source"] == f"{s3_bucket.url}/data"
    assert document["data"]["splits"] == ["train", "val"]
    assert document["problems"]["by_kind"].keys() >= {"empty"}
    leaks = [pair for pair in document["duplicates"]["pairs"] if pair["leak"]]
    assert [pair["b"]["path"] for pair in leaks] == [s3_bucket.url_of("data/val/class_0/leak.jpg")]
    assert (out / "duplicates" / "pair_000.png").is_file()  # drawn from the two objects, read again
    counts = s3_proxy.requests
    assert counts.heads == 0 and counts.object_gets == 6 + 1 + 2 + 1 + 2  # examined once each, then the pair


def test_doctor_reads_a_manifest_in_the_bucket_without_listing(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    put_images(s3_server.filesystem(), s3_bucket, 4, tmp_path)
    data = s3_bucket.url_of("train/manifest.csv")
    assert main(["doctor", data, "--json", *options_for(s3_proxy)]) == 0
    counts = s3_proxy.requests
    assert (counts.lists, counts.heads, counts.object_gets) == (0, 0, 1 + 4)


def test_doctor_names_a_prefix_that_holds_nothing(
    s3_server: S3Server, s3_bucket: S3Bucket, capsys: pytest.CaptureFixture[str]
) -> None:
    options = options_for_server(s3_server)
    assert main(["doctor", f"{s3_bucket.url}/nothing", "--json", *options]) == 1
    assert f"MissingFileError: '{s3_bucket.url}/nothing'" in capsys.readouterr().err


def test_prepare_writes_a_local_manifest_of_a_bucket_with_sizes_a_dataset_trusts(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    fs = s3_server.filesystem()
    write_class_folders(tmp_path / "raw", [4, 4], size=(24, 24), class_names=CLASSES, progress=False)
    keys = upload(fs, tmp_path / "raw", s3_bucket, "raw")
    fs.pipe(s3_bucket.path("raw/notes.txt"), b"not an image")
    out = tmp_path / "prepared"
    rules = ["--rule", "cat:cat/", "--rule", "dog:dog/", "--fractions", "0.5,0.5"]
    rules += ["--out", str(out), "--json", *options_for(s3_proxy)]
    status = main(["prepare", f"{s3_bucket.url}/raw", *rules])
    assert status == 0
    counts = s3_proxy.requests
    assert counts.heads == 0 and counts.object_gets == len(keys)  # one GET per image: header, hash, size
    table = pa_parquet.read_table(out / "manifest.parquet")
    assert sorted(table.column("image").to_pylist()) == keys
    sizes = dict(zip(table.column("image").to_pylist(), table.column("bytes").to_pylist(), strict=True))
    assert sizes == {key: len(fs.cat(s3_bucket.path(f"raw/{key}"))) for key in keys}
    s3_proxy.reset_counts()
    dataset = ManifestDataset(
        out / "manifest.parquet",
        root=f"{s3_bucket.url}/raw",
        fields=[Image("image"), Label("label")],
        storage_options=s3_proxy.storage_options,
        validate="exists",
        progress=False,
    )
    assert len(dataset) == len(keys) and s3_proxy.requests.total == 0  # the sizes vouch
    assert dataset[0]["image"].shape == (3, 24, 24)


@pytest.mark.parametrize(
    ("option", "refusal"),
    [("--materialize=copy", "--materialize copies"), ("--group-duplicates", "local RAW")],
)
def test_prepare_refuses_what_needs_a_local_raw(
    option: str, refusal: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    command = ["prepare", "s3://bucket/raw", "--rule", "cat:cat", "--out", str(tmp_path / "out"), option]
    assert main(command) == 2
    assert refusal in capsys.readouterr().err


def test_storage_options_from_a_json_file_reach_the_server(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    put_images(s3_server.filesystem(), s3_bucket, 4, tmp_path)
    options = tmp_path / "store.json"
    options.write_text(json.dumps({**s3_proxy.storage_options, "secret": "overridden below"}))
    data = s3_bucket.url_of("train/manifest.csv")
    given = ["--storage-options-json", str(options), "--storage-option", "secret=any"]
    assert main(["show", data, "--n", "2", "--out", str(tmp_path / "grid.png"), *given]) == 0
    assert s3_proxy.requests.object_gets >= 1 + 2


@pytest.mark.parametrize(("content", "why"), [("[1, 2]", "must hold a JSON object"), ("{", "not valid JSON")])
def test_a_storage_options_file_that_is_not_an_object_is_a_usage_error(
    content: str, why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    options = tmp_path / "store.json"
    options.write_text(content)
    assert main(["doctor", "s3://bucket/train", "--json", "--storage-options-json", str(options)]) == 2
    assert why in capsys.readouterr().err
