"""The file layer: one open, checked on the descriptor, confined to a root, size-guarded; a backend seam."""

from __future__ import annotations

import errno
import io
import os
import pickle
import socket
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import pytest

from conftest import point_link, swap_before_open, write_jpeg
from torchloom.errors import (
    ConfigError,
    DataError,
    DecodeError,
    MissingFileError,
    UnreadableFileError,
    UnsafeFileError,
    UnsupportedURLError,
)
from torchloom.io import local_files
from torchloom.io.file_errors import REASON_MISSING, failure_reason, file_error
from torchloom.io.files import (
    LOCAL_FILES,
    FileBackend,
    FileInfo,
    backend_for,
    file_info,
    lies_inside,
    open_file,
    read_bytes,
    read_range,
    refuse_size,
    reopenable_name,
)
from torchloom.io.image import decode_image, read_image
from torchloom.io.local_files import _read_all
from torchloom.io.table import read_table
from torchloom.io.volume import read_volume

READS: dict[str, Callable[..., object]] = {
    "read_bytes": read_bytes,
    "read_range": lambda path, **kw: read_range(path, 0, 16, **kw),
    "open_file": lambda path, **kw: open_file(path, **kw).close(),
}


# --- regular files ------------------------------------------------------------------------------


def test_a_regular_file_reads_whole_and_by_range(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    data = bytes(range(256)) * 40
    path.write_bytes(data)
    assert read_bytes(path) == data and read_bytes(str(path), max_bytes=len(data)) == data
    assert read_range(path, 0, 10) == data[:10]
    assert read_range(path, 1000, 300) == data[1000:1300]
    assert read_range(path, len(data) - 5, 100) == data[-5:]  # a short read at the end
    assert read_range(path, len(data), 10) == read_range(path, 10**9, 10) == b""
    assert read_range(path, 3, 0) == b""
    with open_file(path) as handle:
        assert handle.read() == data and handle.seekable()
        assert os.get_blocking(handle.fileno())  # libraries handed it expect a blocking file
    info = file_info(path)
    assert info == FileInfo(len(data), path.stat().st_mtime_ns)
    with pytest.raises(ConfigError, match="offset >= 0"):
        read_range(path, -1, 4)


def test_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.jpg"
    path.write_bytes(b"")
    with pytest.raises(DecodeError, match=r"empty\.jpg.*file is empty \(0 bytes\)"):
        read_bytes(path)
    assert read_range(path, 0, 64) == b""
    assert file_info(path).size == 0
    with open_file(path) as handle:
        assert handle.read() == b""


def test_a_missing_file_is_a_missing_file_error_naming_it(tmp_path: Path) -> None:
    for read in (*READS.values(), file_info):
        with pytest.raises(MissingFileError, match=r"gone\.jpg.*does not exist") as error:
            read(tmp_path / "gone.jpg")
        assert isinstance(error.value, FileNotFoundError)


def test_a_size_guard_refuses_a_larger_file_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.bin"
    path.write_bytes(b"x" * 100)
    with pytest.raises(DecodeError, match=r"file is 100 bytes, more than max_bytes=99"):
        read_bytes(path, max_bytes=99)
    with pytest.raises(DecodeError, match="file is 100 bytes, not an image"):
        read_bytes(path, max_bytes=99, too_large="not an image")


def test_a_file_that_grows_while_read_is_refused_past_max_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fstat said 10 bytes; 100 are there by the time the reads run (appended meanwhile)."""
    path = tmp_path / "growing.bin"
    path.write_bytes(b"g" * 100)
    real_fstat = os.fstat

    def fstat_before_growth(descriptor: int) -> os.stat_result:
        status = real_fstat(descriptor)
        fields = list(status[:10])
        fields[6] = 10  # st_size
        return os.stat_result(fields)

    monkeypatch.setattr(os, "fstat", fstat_before_growth)
    with pytest.raises(DecodeError, match="grew past 50 bytes while being read"):
        read_bytes(path, max_bytes=50)
    assert read_bytes(path, max_bytes=100) == b"g" * 100  # within the guard: what was appended is read
    assert read_bytes(path) == b"g" * 100


def test_reading_a_file_that_grew_or_shrank_since_its_size_was_taken() -> None:
    """read_bytes takes the size from fstat, then reads: what was appended meanwhile is read too
    (within max_bytes), and a file cut short meanwhile gives what is left."""
    for written, expected, whole, most, result in [
        (b"0123456789", 4, True, None, b"0123456789"),  # grew from 4 to 10 bytes
        (b"0123456789", 20, True, None, b"0123456789"),  # shrank from 20 to 10
        (b"0123456789", 4, False, None, b"0123"),  # a header probe's limit
    ]:
        read_end, write_end = os.pipe()
        os.write(write_end, written)
        os.close(write_end)
        try:
            assert _read_all(read_end, expected, whole=whole, most=most) == result
        finally:
            os.close(read_end)
    read_end, write_end = os.pipe()
    os.write(write_end, b"x" * 100)
    os.close(write_end)
    with pytest.raises(ValueError, match="grew past 50"):
        _read_all(read_end, 10, whole=True, most=50)
    os.close(read_end)


# --- what is not a regular file -----------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("call", [*READS, "file_info"])
def test_fifo_device_socket_and_folder_are_refused_without_blocking(tmp_path: Path, call: str) -> None:
    read = READS.get(call, file_info)
    fifo = tmp_path / "pipe.jpg"
    os.mkfifo(fifo)  # no writer: an open without O_NONBLOCK, or a read, would wait forever
    sock_path = tmp_path / "s.jpg"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock_path))
    try:
        for path, kind in [
            (fifo, "a FIFO"),
            (Path("/dev/zero"), "a character device"),  # never ends
            (sock_path, "a socket"),
            (tmp_path, "a folder"),
        ]:
            with pytest.raises(UnsafeFileError, match=f"it is {kind}.*not a regular file") as error:
                read(path)
            assert error.value.path == str(path)
    finally:
        listener.close()


# --- confinement to a root -----------------------------------------------------------------------


def _rooted(tmp_path: Path) -> tuple[str, Path, Path]:
    """A real root holding ``inside.bin``, and ``secret.bin`` outside it."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "inside.bin").write_bytes(b"inside")
    (tmp_path / "secret.bin").write_bytes(b"secret")
    return os.path.realpath(root), root / "inside.bin", tmp_path / "secret.bin"


@pytest.mark.parametrize("call", READS)
def test_a_symlink_inside_the_root_is_read(tmp_path: Path, call: str) -> None:
    root, inside, _ = _rooted(tmp_path)
    (Path(root) / "link.bin").symlink_to(inside)
    (Path(root) / "sub").mkdir()
    (Path(root) / "folder_link").symlink_to(Path(root) / "sub")
    (Path(root) / "sub" / "deep.bin").write_bytes(b"deep")
    READS[call](Path(root) / "link.bin", inside=root)
    READS[call](Path(root) / "folder_link" / "deep.bin", inside=root)
    assert read_bytes(Path(root) / "link.bin", inside=root) == b"inside"


@pytest.mark.parametrize("proc", [True, False], ids=["proc-fd", "no-proc"])
@pytest.mark.parametrize("call", READS)
def test_a_symlink_out_of_the_root_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str, proc: bool
) -> None:
    root, _, secret = _rooted(tmp_path)
    monkeypatch.setattr(local_files, "_HAS_FD_NAMES", proc)
    (Path(root) / "escape.bin").symlink_to(secret)
    (Path(root) / "folder_escape").symlink_to(tmp_path)
    for path in (Path(root) / "escape.bin", Path(root) / "folder_escape" / "secret.bin", secret):
        with pytest.raises(UnsafeFileError, match="outside the dataset root"):
            READS[call](path, inside=root)


@pytest.mark.parametrize("proc", [True, False], ids=["proc-fd", "no-proc"])
def test_a_symlink_swapped_between_validation_and_open_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proc: bool
) -> None:
    """The race: a reader that resolves the path, then opens it, reads the file swapped in between."""
    root, inside, secret = _rooted(tmp_path)
    monkeypatch.setattr(local_files, "_HAS_FD_NAMES", proc)
    link = Path(root) / "link.bin"
    link.symlink_to(inside)
    swap_before_open(monkeypatch, link, point_link(link, secret))
    with pytest.raises(UnsafeFileError, match="outside the dataset root"):
        read_bytes(link, inside=root)


def test_lies_inside_is_the_one_confinement_rule() -> None:
    """The rule the file layer, the walker, manifest fields, prepare and cache all apply."""
    assert lies_inside("/data/train", "/data/train")
    assert lies_inside("/data/train/cat/1.jpg", "/data/train")
    assert lies_inside("/data/train/cat/1.jpg", "/data/train/")
    assert lies_inside("/etc/passwd", "/")
    assert not lies_inside("/data/trainer/1.jpg", "/data/train")
    assert not lies_inside("/data", "/data/train")


def test_without_proc_a_file_swapped_back_after_the_open_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback resolves the path after the open: an outside file opened, then the link pointed
    back inside, resolves inside but names another file than the one opened."""
    root, inside, secret = _rooted(tmp_path)
    monkeypatch.setattr(local_files, "_HAS_FD_NAMES", False)
    link = Path(root) / "link.bin"
    link.symlink_to(secret)
    real_open = os.open

    def open_then_swap_back(target: str, *args: int) -> int:
        descriptor = real_open(target, *args)
        point_link(link, inside)()
        return descriptor

    monkeypatch.setattr(os, "open", open_then_swap_back)
    with pytest.raises(UnsafeFileError, match="changed while it was opened"):
        read_bytes(link, inside=root)


def test_reopenable_name_opens_the_file_held_even_after_the_path_changed(tmp_path: Path) -> None:
    path = tmp_path / "x.bin"
    path.write_bytes(b"first")
    with open_file(path) as handle:
        name = reopenable_name(handle)
        if name is None:
            pytest.skip("no /proc/self/fd on this system")
        path.unlink()
        path.write_bytes(b"second")
        with open(name, "rb") as again:
            assert again.read() == b"first"
    assert reopenable_name(io.BytesIO(b"")) is None


# --- URLs and other backends -----------------------------------------------------------------------


@pytest.mark.parametrize("url", ["nosuchstore://bucket/cat/1.jpg", "file:///x"])
def test_a_url_no_store_serves_is_refused_with_a_typed_error(url: str) -> None:
    for read in (*READS.values(), file_info, read_image, read_volume, lambda url: read_table(url + ".csv")):
        with pytest.raises(UnsupportedURLError, match=r"cannot reach nosuchstore:// URLs|is a file:// URL"):
            read(url)
    assert isinstance(UnsupportedURLError("x"), ConfigError)


def test_an_s3_url_without_credentials_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(UnreadableFileError, match=r"access denied \(no credentials\).*storage_options"):
        read_bytes("s3://bucket/cat/1.jpg")


def test_a_colon_slash_slash_inside_a_local_path_is_no_url(tmp_path: Path) -> None:
    assert backend_for(f"{tmp_path}/odd://name.jpg")[0] is LOCAL_FILES
    with pytest.raises(MissingFileError):
        read_bytes(f"{tmp_path}/odd://name.jpg")


class MemoryFiles:
    """Files held in a dict: the same four calls as local files, served from memory."""

    def __init__(self, contents: dict[str, bytes]) -> None:
        self.contents = contents

    def _get(self, path: str, inside: str | None = None) -> bytes:
        if path not in self.contents:
            raise MissingFileError(f"file {path!r} does not exist")
        if inside is not None and not path.startswith(inside.rstrip("/") + "/"):
            raise UnsafeFileError(path, f"outside the dataset root {inside!r}")
        return self.contents[path]

    def read(self, path: str, *, inside: str | None, max_bytes: int | None, too_large: str | None) -> bytes:
        data = self._get(path, inside)
        if max_bytes is not None and len(data) > max_bytes:
            raise refuse_size(path, len(data), max_bytes, too_large)
        return data

    def read_range(self, path: str, offset: int, length: int, *, inside: str | None) -> bytes:
        return self._get(path, inside)[offset : offset + length]

    def open(self, path: str, *, inside: str | None) -> BinaryIO:
        return io.BytesIO(self._get(path, inside))

    def info(self, path: str) -> FileInfo:
        return FileInfo(len(self._get(path)), 0)


def test_a_backend_given_explicitly_serves_the_same_calls(tmp_path: Path) -> None:
    jpeg = write_jpeg(tmp_path / "a.jpg", height=8, width=16)
    memory: FileBackend = MemoryFiles({"mem://bucket/a.jpg": jpeg, "mem://bucket/empty": b""})
    url = "mem://bucket/a.jpg"
    with pytest.raises(UnsupportedURLError):
        read_bytes(url)  # without the backend, a URL is refused
    data = read_bytes(url, backend=memory, inside="mem://bucket", max_bytes=1 << 20)
    assert decode_image(data, url).shape == (8, 16, 3)
    assert read_range(url, 2, 4, backend=memory) == jpeg[2:6]
    with open_file(url, backend=memory) as handle:
        assert handle.read(3) == jpeg[:3]
    assert file_info(url, backend=memory).size == len(jpeg)
    with pytest.raises(DecodeError, match="more than max_bytes=10"):
        read_bytes(url, backend=memory, max_bytes=10)
    with pytest.raises(DecodeError, match="file is empty"):
        read_bytes("mem://bucket/empty", backend=memory)
    with pytest.raises(UnsafeFileError, match="outside the dataset root"):
        read_bytes(url, backend=memory, inside="mem://other")
    with pytest.raises(MissingFileError):
        read_range("mem://bucket/none", 0, 1, backend=memory)
    assert backend_for(url, memory)[0] is memory and backend_for(str(tmp_path))[0] is LOCAL_FILES


# --- files that are there but cannot be read ---------------------------------------------------------


def _refuse_opens_of(monkeypatch: pytest.MonkeyPatch, path: Path, code: int) -> None:
    """Make every open and stat of ``path`` fail with the system error ``code`` (the tests run as
    root, whom permissions do not stop)."""
    real_open, real_stat = os.open, os.stat

    def refuse(real: Callable[..., object]) -> Callable[..., object]:
        def call(target: str | os.PathLike[str], *args: object, **kwargs: object) -> object:
            if os.fspath(target) == str(path):
                raise OSError(code, os.strerror(code), str(path))
            return real(target, *args, **kwargs)

        return call

    monkeypatch.setattr(os, "open", refuse(real_open))
    monkeypatch.setattr(os, "stat", refuse(real_stat))


@pytest.mark.parametrize("name", ["read_bytes", "read_range", "open_file", "file_info"])
def test_a_file_that_cannot_be_read_is_a_typed_error_naming_it_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    path = tmp_path / "locked.jpg"
    write_jpeg(path)
    _refuse_opens_of(monkeypatch, path, errno.EACCES)
    read = {**READS, "file_info": file_info}[name]
    with pytest.raises(UnreadableFileError) as caught:
        read(path)
    error = caught.value
    assert isinstance(error, DataError) and isinstance(error, OSError) and error.errno == errno.EACCES
    assert str(error) == f"cannot read {str(path)!r}: {error.why}"
    assert "permission denied" in error.why and "fix its permissions" in error.why
    assert failure_reason(error, str(path)) == error.why


def test_a_symlink_loop_and_a_path_too_long_are_typed_errors_too(tmp_path: Path) -> None:
    (tmp_path / "a.jpg").symlink_to(tmp_path / "b.jpg")
    (tmp_path / "b.jpg").symlink_to(tmp_path / "a.jpg")
    with pytest.raises(UnreadableFileError, match="symbolic links") as loop:
        read_bytes(tmp_path / "a.jpg")
    assert loop.value.errno == errno.ELOOP
    with pytest.raises(UnreadableFileError, match="longer than the system allows") as long:
        read_bytes(tmp_path / ("x" * 300 + ".jpg"))
    assert long.value.errno == errno.ENAMETOOLONG and "x" * 300 in long.value.path


def test_a_system_error_that_says_nothing_of_the_file_is_left_as_it_is() -> None:
    busy = OSError(errno.EMFILE, "Too many open files")
    assert file_error("/data/a.jpg", busy) is busy
    assert isinstance(file_error("/data/a.jpg/b", NotADirectoryError(errno.ENOTDIR, "x")), MissingFileError)


def test_a_refusal_survives_pickling_and_a_rebuild_from_its_message() -> None:
    error = UnreadableFileError("/data/a.jpg", "permission denied; fix it", errno.EACCES)
    again = pickle.loads(pickle.dumps(error))
    assert (again.path, again.why, again.errno, str(again)) == (
        error.path,
        error.why,
        error.errno,
        str(error),
    )
    assert str(UnreadableFileError("a message alone")) == "a message alone"


def test_one_wording_of_why_a_file_cannot_be_a_sample(tmp_path: Path) -> None:
    """What every report says of a missing file, with a hint when its path looks mistyped."""
    missing = MissingFileError("file 'x' does not exist; check the path (and the dataset's root)")
    assert failure_reason(missing, str(tmp_path / "cat" / "1.jpg")) == REASON_MISSING == "file does not exist"
    assert "'\\'" in failure_reason(missing, str(tmp_path / "dog\\2.jpg"))
    assert "whitespace" in failure_reason(missing, str(tmp_path / "dog" / "2.jpg "))
    fifo = UnsafeFileError("/data/x.jpg", "it is a FIFO (named pipe), not a regular file")
    assert failure_reason(fifo, "/data/x.jpg") == fifo.why
    assert (
        failure_reason(DecodeError("/data/x.jpg", "file is empty (0 bytes)"), "") == "file is empty (0 bytes)"
    )
    assert failure_reason(ValueError("odd"), "/data/x.jpg") == "ValueError: odd"


def test_arrow_reads_a_manifest_from_its_own_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Arrow's threads drop a reader's last references after the read returns; a Python file they
    held would need the GIL then, and at interpreter exit the process aborts ("terminate called
    without an active exception": `torchloom show` failing fast on a manifest, 1 run in ~15)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from torchloom.io import table as table_module

    sources: list[object] = []
    for module in (table_module.pa_csv, table_module.pa_json, table_module.pa_parquet):
        name = (
            "read_table" if module is table_module.pa_parquet else f"read_{module.__name__.rsplit('.', 1)[1]}"
        )
        real = getattr(module, name)

        def recording(
            source: object, *args: object, _real: Callable[..., object] = real, **kwargs: object
        ) -> object:
            sources.append(source)
            return _real(source, *args, **kwargs)

        monkeypatch.setattr(module, name, recording)
    (tmp_path / "m.csv").write_text("image\na.jpg\n")
    (tmp_path / "m.jsonl").write_text('{"image": "a.jpg"}\n')
    pq.write_table(pa.table({"image": ["a.jpg"]}), tmp_path / "m.parquet")
    for name in ("m.csv", "m.jsonl", "m.parquet"):
        assert read_table(tmp_path / name).column("image").to_pylist() == ["a.jpg"]
    assert len(sources) == 3 and all(isinstance(source, pa.NativeFile) for source in sources), sources


def test_a_bug_under_an_object_store_read_surfaces_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    import fsspec

    from torchloom.io import ObjectStore

    fsspec.filesystem("memory").pipe("memory://bugs/a.bin", b"abc")
    store = ObjectStore()
    fs = store.filesystem("memory://bugs")

    def broken(*args: object, **kwargs: object) -> bytes:
        raise KeyError("a bug in code, not the store's failure")

    monkeypatch.setattr(fs, "cat_file", broken)
    with pytest.raises(KeyError, match="a bug in code"):
        store.get("memory://bugs/a.bin")
    assert store.stats.failed["KeyError"] == 1 and not store.stats.retried
