"""ENVI reader: round trips in every interleave, byte order and data type; hostile headers and files."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchloom.errors import DecodeError, HeaderError, MissingFileError, UnsafeFileError
from torchloom.io.envi import MAX_HEADER_BYTES, open_envi, read_header, write_envi
from torchloom.io.envi_header import ENVI_DTYPES, INTERLEAVES, parse_header

SHAPE = (5, 4, 3)  # lines, samples, bands


def cube_of(kind: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(kind)
    if dtype.kind == "c":
        return (rng.normal(size=SHAPE) + 1j * rng.normal(size=SHAPE)).astype(dtype)
    if dtype.kind == "f":
        return rng.normal(size=SHAPE).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=SHAPE, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("kind", sorted(set(ENVI_DTYPES.values())))
@pytest.mark.parametrize("byte_order", [0, 1])
@pytest.mark.parametrize("interleave", INTERLEAVES)
def test_round_trip_matches_numpy(tmp_path: Path, kind: str, byte_order: int, interleave: str) -> None:
    expected = cube_of(kind)
    path = write_envi(tmp_path / "cube.img", expected, interleave=interleave, byte_order=byte_order)
    cube = open_envi(tmp_path / "cube.hdr")
    assert cube.shape == SHAPE and cube.interleave == interleave and cube.path == path
    assert cube.dtype == np.dtype(kind)
    assert cube.header.dtype == np.dtype(kind).newbyteorder("<" if byte_order == 0 else ">")
    whole = cube.read()
    assert whole.dtype == np.dtype(kind).newbyteorder("=") and whole.flags.c_contiguous
    np.testing.assert_array_equal(whole, expected)
    window = cube.read(rows=slice(1, 4), cols=slice(2, None), bands=[2, 0])
    np.testing.assert_array_equal(window, expected[1:4, 2:][:, :, [2, 0]])
    np.testing.assert_array_equal(cube.read(bands=slice(1, 3)), expected[:, :, 1:3])
    np.testing.assert_array_equal(cube.read(rows=slice(0, 5, 2), cols=slice(3, 9)), expected[0:5:2, 3:9])


def test_header_offset_wavelengths_band_names_and_the_data_path(tmp_path: Path) -> None:
    expected = cube_of("int16")
    names = [f"Band {i}" for i in range(3)]
    path = write_envi(
        tmp_path / "scene.raw",
        expected,
        interleave="bil",
        header_offset=100,
        wavelengths=[450.5, 550, 650],
        band_names=names,
    )
    cube = open_envi(path)  # from the data file: the header is found beside it
    assert cube.header_path == str(tmp_path / "scene.hdr")
    assert cube.wavelengths.tolist() == [450.5, 550.0, 650.0] and cube.wavelength_units == "Nanometers"
    assert cube.band_names == tuple(names) and cube.header.header_offset == 100
    np.testing.assert_array_equal(cube.read(), expected)


def test_data_file_without_extension_upper_case_or_named_by_the_header(tmp_path: Path) -> None:
    expected = cube_of("float32")
    write_envi(tmp_path / "bare", expected)
    np.testing.assert_array_equal(open_envi(tmp_path / "bare.hdr").read(), expected)
    write_envi(tmp_path / "upper.IMG", expected, interleave="bip")
    assert open_envi(tmp_path / "upper.hdr").path.endswith("upper.IMG")
    os.makedirs(tmp_path / "data")
    write_envi(tmp_path / "data" / "x.dat", expected)
    text = (tmp_path / "data" / "x.hdr").read_text() + "data file = x.dat\n"
    (tmp_path / "data" / "named.hdr").write_text(text)
    np.testing.assert_array_equal(open_envi(tmp_path / "data" / "named.hdr").read(), expected)


def test_the_memmap_is_not_pickled_and_reopens(tmp_path: Path) -> None:
    expected = cube_of("uint16")
    cube = open_envi(write_envi(tmp_path / "c.img", expected))
    cube.read()
    state = pickle.dumps(cube)
    assert len(state) < expected.nbytes + 2000 and cube._memmap is not None
    copy = pickle.loads(state)
    assert copy._memmap is None
    np.testing.assert_array_equal(copy.read(), expected)


# --- hostile files ---------------------------------------------------------------------------------


def test_wrong_data_size_names_the_file_and_both_sizes(tmp_path: Path) -> None:
    path = write_envi(tmp_path / "c.img", cube_of("int16"))
    with open(path, "ab") as handle:
        handle.write(b"\0")
    with pytest.raises(DecodeError, match=r"c\.img.*121 bytes.*declares 120") as error:
        open_envi(path)
    assert error.value.path == path
    os.truncate(path, 7)
    with pytest.raises(DecodeError, match="holds 7 bytes"):
        open_envi(tmp_path / "c.hdr")


def test_a_file_truncated_after_opening_is_refused_at_first_read(tmp_path: Path) -> None:
    path = write_envi(tmp_path / "c.img", cube_of("int16"))
    cube = open_envi(path)
    os.truncate(path, 10)
    with pytest.raises(DecodeError, match="holds 10 bytes"):
        cube.read()


@pytest.mark.timeout(30)
def test_fifos_are_refused_never_block(tmp_path: Path) -> None:
    write_envi(tmp_path / "c.img", cube_of("uint8"))
    os.remove(tmp_path / "c.img")
    os.mkfifo(tmp_path / "c.img")
    with pytest.raises(UnsafeFileError, match="FIFO"):
        open_envi(tmp_path / "c.hdr")
    os.mkfifo(tmp_path / "pipe.hdr")
    with pytest.raises(UnsafeFileError, match="FIFO"):
        open_envi(tmp_path / "pipe.hdr")


def test_missing_files_and_unsafe_data_file_keys(tmp_path: Path) -> None:
    write_envi(tmp_path / "c.img", cube_of("uint8"))
    os.remove(tmp_path / "c.img")
    with pytest.raises(MissingFileError, match=r"c\.hdr.*data file"):
        open_envi(tmp_path / "c.hdr")
    with pytest.raises(MissingFileError, match="no ENVI header"):
        open_envi(tmp_path / "elsewhere.img")
    header = (tmp_path / "c.hdr").read_text()
    for name in ("../secret.img", "/etc/passwd"):
        (tmp_path / "c.hdr").write_text(header + f"data file = {name}\n")
        with pytest.raises(HeaderError, match="relative path inside"):
            open_envi(tmp_path / "c.hdr")


def test_a_huge_header_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "huge.hdr"
    with open(path, "wb") as handle:
        handle.write(b"ENVI\n")
        handle.truncate(MAX_HEADER_BYTES + 1)
    with pytest.raises(DecodeError, match="larger than"):
        read_header(path)


VALID = b"ENVI\nsamples = 4\nlines = 5\nbands = 3\ndata type = 2\ninterleave = bsq\nbyte order = 0\n"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (b"", "first line must be 'ENVI'"),
        (b"\xff\xfe\x00garbage", "first line must be 'ENVI'"),
        (VALID.replace(b"samples = 4", b"samples = 4.0"), "line 2: samples = '4.0' is not a whole number"),
        (VALID.replace(b"lines = 5", b"lines = 0"), "line 3: lines = '0'"),
        (VALID.replace(b"bands = 3", b"bands = 99999999999999999999"), "bands = '9999"),
        (VALID.replace(b"data type = 2", b"data type = 7"), "data type = 7 is not one of"),
        (VALID.replace(b"interleave = bsq", b"interleave = bqs"), "interleave = 'bqs'"),
        (VALID.replace(b"byte order = 0", b"byte order = 2"), "byte order = 2 must be 0 or 1"),
        (VALID.replace(b"bands = 3\n", b""), "required key 'bands' is missing"),
        (VALID + b"wavelength = {1, 2\n", "the '{' of 'wavelength' is never closed"),
        (VALID + b"wavelength = {1, 2}\n", "'wavelength' lists 2 values for 3 bands"),
        (VALID + b"wavelength = {1, nan, 3}\n", "wavelength 'nan' is not a finite number"),
        (VALID + b"band names = {a, b, c, d}\n", "'band names' lists 4 values for 3 bands"),
        (VALID + b"this line has no equals sign\n", "line 8: expected 'key = value'"),
        (VALID + b"samples = 4\n", "'samples' is given twice"),
        (VALID + b"wavelength = {1, 2, 3} trailing\n", "unexpected text after the '}'"),
    ],
)
def test_malformed_headers_name_the_line_or_key(text: bytes, reason: str) -> None:
    with pytest.raises(HeaderError, match=reason.replace("(", r"\(").replace("{", r"\{")) as error:
        parse_header(text, "bad.hdr")
    assert error.value.path == "bad.hdr" and "bad.hdr" in str(error.value)
    assert pickle.loads(pickle.dumps(error.value)).reason == error.value.reason


def test_comments_blank_lines_and_multi_line_braces_parse() -> None:
    text = VALID + b"; a comment\n\ndescription = {\n  made by hand,\n  two lines }\nWavelength Units = um\n"
    header = parse_header(b"\xef\xbb\xbf\n" + text + b"wavelength = {\n 0.4,\n 0.5,\n 0.6\n}\n", "ok.hdr")
    assert header.shape == (5, 4, 3) and header.wavelength_units == "um"
    assert header.wavelengths.tolist() == [0.4, 0.5, 0.6] and "two lines" in header.fields["description"]


# --- fuzzing: a typed error or the declared shape, never anything else ------------------------------

FIELD_VALUES = {
    "samples": st.one_of(st.integers(-2, 40).map(str), st.text(max_size=6)),
    "lines": st.one_of(st.integers(-2, 40).map(str), st.sampled_from(["", "1e3", "+3", "0x10", "٣"])),
    "bands": st.one_of(st.integers(0, 6).map(str), st.text(max_size=4)),
    "data type": st.one_of(
        st.sampled_from([str(code) for code in ENVI_DTYPES]), st.integers(-1, 20).map(str)
    ),
    "interleave": st.sampled_from(["bsq", "BIL", " bip ", "bis", "", "{bsq}"]),
    "byte order": st.sampled_from(["0", "1", "2", "-1", "x"]),
    "header offset": st.one_of(st.integers(-5, 64).map(str), st.just("1.5")),
    "wavelength": st.lists(st.sampled_from(["400", "500.5", "nan", "x", "", "1e400"]), max_size=7).map(
        lambda items: "{" + ",".join(items) + "}"
    ),
    "band names": st.sampled_from(["{a, b, c}", "{a}", "{", "{}", "{a,,b}"]),
}


BASE = {"samples": "4", "lines": "3", "bands": "3", "data type": "2", "interleave": "bsq"}


@st.composite
def headers(draw: st.DrawFn) -> bytes:
    """Mostly valid headers with a few fields replaced, dropped, repeated or garbled."""
    lines = [draw(st.sampled_from(["ENVI"] * 8 + ["ENVI ", "envi", ""]))]
    fields = dict(BASE)
    for key in draw(st.lists(st.sampled_from(sorted(FIELD_VALUES)), max_size=4)):
        fields[key] = draw(FIELD_VALUES[key])
    for key in draw(st.lists(st.sampled_from(sorted(BASE)), max_size=1)):
        del fields[key]
    for key, value in fields.items():
        lines.append(f"{draw(st.sampled_from([key, key, key.upper(), ' ' + key]))} = {value}")
        if draw(st.integers(0, 40)) == 0:
            lines.append(draw(st.text(max_size=20)))
    text = "\n".join(lines).encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 3)) == 0:  # mutate a few bytes too
        data = bytearray(text)
        for _ in range(draw(st.integers(1, 4))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        text = bytes(data)
    return text


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=headers())
def test_fuzzed_headers_give_a_header_or_a_header_error(text: bytes) -> None:
    try:
        header = parse_header(text, "fuzz.hdr")
    except HeaderError as error:
        assert error.path == "fuzz.hdr" and error.reason
        return
    assert min(header.shape) >= 1 and header.byte_order in (0, 1) and header.interleave in INTERLEAVES
    assert header.wavelengths is None or header.wavelengths.shape == (header.bands,)
    assert header.band_names is None or len(header.band_names) == header.bands


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=headers(), extra=st.integers(-3, 3))
def test_fuzzed_cubes_open_with_the_declared_shape_or_a_typed_error(
    tmp_path: Path, text: bytes, extra: int
) -> None:
    folder = tmp_path / f"case{abs(hash(text)) % 10**9}"
    folder.mkdir(exist_ok=True)
    (folder / "c.hdr").write_bytes(text)
    try:
        declared = parse_header(text, folder / "c.hdr").data_bytes
    except HeaderError:
        declared = 16
    if declared > 1 << 20:
        return
    (folder / "c.img").write_bytes(b"\x01" * max(0, declared + extra))
    try:
        cube = open_envi(folder / "c.hdr")
    except (HeaderError, DecodeError, MissingFileError) as error:
        assert str(folder / "c.") in str(error)
        return
    assert extra == 0
    assert cube.read().shape == cube.header.shape
