"""ENVI headers as instrument software writes them (ENVI, Headwall, Specim, HySpex): nested braces in
``description``, multi-line values, ``;`` comment lines, inside values too. Each is read with the
metadata and pixels written into it, and, where Spectral Python or GDAL (rasterio) is installed,
with the same values they read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from torchloom.errors import HeaderError
from torchloom.io.envi import open_envi
from torchloom.io.envi_header import parse_header

SHAPE = (5, 6, 4)  # lines, samples, bands
PIXELS = np.arange(np.prod(SHAPE), dtype=np.uint16).reshape(SHAPE) * 37 % 4099


@dataclass(frozen=True)
class Written:
    """A header as a given instrument's software writes it, and what it declares."""

    text: str
    interleave: str
    description: str
    wavelengths: tuple[float, ...]
    band_names: tuple[str, ...] | None = None
    header_offset: int = 0


def dimensions(interleave: str, offset: int = 0) -> str:
    return (
        f"samples = {SHAPE[1]}\nlines   = {SHAPE[0]}\nbands   = {SHAPE[2]}\nheader offset = {offset}\n"
        f"file type = ENVI Standard\ndata type = 12\ninterleave = {interleave}\nbyte order = 0\n"
    )


WRITTEN = {
    "envi": Written(  # ENVI Classic: the description's brace closes on its last line
        "ENVI\ndescription = {\n  ENVI File, Created [Mon Jun 03 10:12:31 2013]}\n"
        + dimensions("bsq")
        + "sensor type = Unknown\nwavelength units = Nanometers\n"
        "band names = {\n Band 1, Band 2, Band 3,\n Band 4}\n"
        "wavelength = {\n  450.000000,  550.000000,  650.000000,  750.000000}\n",
        "bsq",
        "ENVI File, Created [Mon Jun 03 10:12:31 2013]",
        (450.0, 550.0, 650.0, 750.0),
        ("Band 1", "Band 2", "Band 3", "Band 4"),
    ),
    "envi-nested": Written(  # ENVI's processing history: a nested brace ends the description
        "ENVI\ndescription = {\n  Resize Result, x resize factor: 1.000000.\n"
        "  [Tue Oct 08 14:10:30 2019] {Spatial subset: [1, 1, 6, 5]}}\n"
        + dimensions("bip")
        + "wavelength = {0.45, 0.55, 0.65, 0.75}\nwavelength units = Micrometers\n",
        "bip",
        "Resize Result, x resize factor: 1.000000.\n"
        "[Tue Oct 08 14:10:30 2019] {Spatial subset: [1, 1, 6, 5]}",
        (0.45, 0.55, 0.65, 0.75),
    ),
    "headwall": Written(  # Hyperspec: the instrument in nested braces, one wavelength a line
        "ENVI\ndescription = {Headwall Photonics Hyperspec {VNIR} E-Series, SN 1234 {calibrated}}\n"
        + dimensions("bil")
        + "sensor type = Unknown\ndefault bands = {3,2,1}\nwavelength units = Nanometers\n"
        "wavelength = {\n400.345000,\n500.100000,\n600.200000,\n700.300000\n}\nfwhm = {2.5, 2.5, 2.5, 2.5}\n",
        "bil",
        "Headwall Photonics Hyperspec {VNIR} E-Series, SN 1234 {calibrated}",
        (400.345, 500.1, 600.2, 700.3),
    ),
    "specim": Written(  # Lumo: a version in braces, colon-laden values, a commented-out list
        "ENVI\ndescription = {\nSpecim FX10 Lumo Scanner {v2.7}\n}\n"
        + dimensions("bil")
        + "sensor type = FX10\ndefault bands = {3, 2, 1}\nhimg = {1, 1024}\nvimg = {1, 448}\n"
        "fps = 100.0\ntint = 3.0\nbinning = {1, 2}\ntrigger mode = Internal\n"
        "acquisition date = DATE(dd-mm-yyyy): 15-11-2018\nGPS Start Time = UTC TIME: 10:11:12\n"
        "wavelength = {\n397.66,\n400.28,\n402.90,\n405.52\n}\n;temperature = {\n;-10.0}\n",
        "bil",
        "Specim FX10 Lumo Scanner {v2.7}",
        (397.66, 400.28, 402.9, 405.52),
    ),
    "hyspex": Written(  # HySpex: data after a binary file header, comments between the keys
        "ENVI\ndescription = {HySpex NEO VNIR-1800 {serial 1234} converted by HySpex RAD}\n"
        + dimensions("bil", 128)
        + "default bands = {3,2,1}\nwavelength = { 408.81, 412.07, 415.34, 418.6 }\n"
        "fwhm = { 3.26, 3.26, 3.26, 3.26 }\nwavelength units = nm\n; HySpex comment\n"
        "acquisition time = 10:12:13\n",
        "bil",
        "HySpex NEO VNIR-1800 {serial 1234} converted by HySpex RAD",
        (408.81, 412.07, 415.34, 418.6),
        header_offset=128,
    ),
    "comments-inside": Written(  # calibration notes as comment lines inside the list
        "ENVI\ndescription = {Lab scan}\n"
        + dimensions("bsq")
        + "wavelength = {\n; band centres from cal.txt\n450, 550,\n; second detector\n650, 750}\n",
        "bsq",
        "Lab scan",
        (450.0, 550.0, 650.0, 750.0),
    ),
}


def write_cube(folder: Path, written: Written) -> Path:
    """The header and its data file, laid out as the header declares."""
    stored = {"bsq": PIXELS.transpose(2, 0, 1), "bil": PIXELS.transpose(0, 2, 1), "bip": PIXELS}
    data = b"\x7f" * written.header_offset + np.ascontiguousarray(stored[written.interleave], "<u2").tobytes()
    (folder / "scene.img").write_bytes(data)
    (folder / "scene.hdr").write_text(written.text)
    return folder / "scene.hdr"


@pytest.mark.parametrize("software", sorted(WRITTEN))
def test_instrument_headers_read_with_their_metadata_and_pixels(tmp_path: Path, software: str) -> None:
    written = WRITTEN[software]
    cube = open_envi(write_cube(tmp_path, written))
    assert cube.shape == SHAPE and cube.interleave == written.interleave
    assert cube.header.header_offset == written.header_offset
    assert cube.header.fields["description"] == written.description
    assert cube.wavelengths is not None and cube.wavelengths.tolist() == list(written.wavelengths)
    assert cube.band_names == written.band_names
    np.testing.assert_array_equal(cube.read(), PIXELS)


@pytest.mark.parametrize("software", sorted(WRITTEN))
def test_instrument_headers_read_as_spectral_python_reads_them(tmp_path: Path, software: str) -> None:
    envi = pytest.importorskip("spectral.io.envi")
    written = WRITTEN[software]
    path = write_cube(tmp_path, written)
    ours, theirs = open_envi(path), envi.open(str(path), str(tmp_path / "scene.img"))
    assert ours.shape == theirs.shape
    # Spectral strips every brace from the ends of a description ("{calibrated}}" loses both).
    assert ours.header.fields["description"].strip("{}").strip() == theirs.metadata["description"]
    assert ours.wavelengths is not None and ours.wavelengths.tolist() == theirs.bands.centers
    if written.band_names is not None:
        assert list(ours.band_names or ()) == theirs.metadata["band names"]
    np.testing.assert_array_equal(ours.read(), theirs.open_memmap())


@pytest.mark.parametrize("software", sorted(WRITTEN))
def test_instrument_headers_read_as_gdal_reads_them(tmp_path: Path, software: str) -> None:
    rasterio = pytest.importorskip("rasterio")
    written = WRITTEN[software]
    path = write_cube(tmp_path, written)
    ours = open_envi(path)
    with rasterio.open(tmp_path / "scene.img") as theirs:
        assert (theirs.height, theirs.width, theirs.count) == SHAPE
        np.testing.assert_array_equal(ours.read(), theirs.read().transpose(1, 2, 0))
        listed = theirs.tags(ns="ENVI")["wavelength"]
    if software == "comments-inside":  # GDAL keeps comment lines inside a value, glued to the next
        assert "; second detector650" in listed
        return
    wavelengths = [float(item) for item in listed.strip("{}").split(",")]
    assert ours.wavelengths is not None and ours.wavelengths.tolist() == wavelengths


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("{a {b} c", "never closed"),  # one brace left open swallows the rest of the header
        ("{a {b}} c", "unexpected text after"),
    ],
)
def test_unbalanced_braces_are_still_refused_with_the_key(value: str, reason: str) -> None:
    text = "ENVI\n" + dimensions("bsq") + f"description = {value}\n"
    with pytest.raises(HeaderError, match=reason):
        parse_header(text.encode(), "bad.hdr")
