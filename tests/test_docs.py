"""The documentation: a strict build with an entry for every public name, examples that print what
their pages say, and a README that stays a landing page."""

from __future__ import annotations

import importlib
import os
import re
import runpy
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

import torchloom
import torchloom.transforms

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"
README = ROOT / "README.md"
README_MAX_BYTES = 12 * 1024
# Set by `make test`, which has just built the docs strictly there: no second build.
BUILT_ENV = "TORCHLOOM_DOCS_HTML"

# What each example under docs/examples prints, as the comments on its page show.
PRINTS = {
    "apply_tune.py": ["[(16, 3, 64, 64), (16, 3, 64, 64)]"],
    "balanced_resume.py": ["33 [40.5 40.5]"],
    "check_resume.py": ["True 21", "resume exact: 21 of 21 cases"],
    "doctor_api.py": [
        "['empty', 'not_an_image', 'train/val leak', 'truncated'] 2",
        'BalancedSampler(dataset.targets, mode="inverse", seed=0)',
        "['dent', 'scratch'] [[11, 3], [25, 7]] {'unreadable': 3}",
        "0 ['duplicate in train']",
    ],
    "elastic_resume.py": ["28 1 True"],
    "fast_path.py": ["80 1", "81 torch.Size([3, 64, 64])"],
    "fault_policy.py": [
        "21 2",
        "2 invalid sample(s) listed",
        "True DecodeError",
        "20 1",
        "TransformError True",
    ],
    "from_imagefolder.py": [
        "['image', 'index', 'label', 'path'] torch.uint8 (3, 64, 64)",
        "['cat', 'dog'] {'cat': 0, 'dog': 1} [0, 0, 0] {'cat': 5, 'dog': 5}",
        "ignored (1): metadata folder of an OS or an archiver",
    ],
    "gpu_batches.py": ["DataLoader torch.uint8 True", "Loader torch.uint8 True"],
    "joined_batch.py": [
        "torch.Size([2, 3, 96, 96]) torch.Size([2, 96, 96]) [2.0, 4.5]",
        "[[17, 4, 9], [0, 0, 0]] [True, False]",
    ],
    "manifest_fields.py": ["torch.Size([3, 96, 96]) 0 tensor([3.]) clean part", "PathOutsideRootError row 1"],
    "mixture.py": ["[0, 0, 0, 0, 0, 0, 1, 1] 10", "14 torch.Size([14, 8]) []"],
    "profile_and_tune.py": ["data-bound: ", "True 16"],
    "quick_start.py": [
        "{'class_0': 60, 'class_1': 21} 160 torch.float32",
        "FaultReport: 1 sample(s) skipped",
        "broken_truncated_0.jpg': DecodeError",
    ],
    "sample_keys.py": ["True True"],
    "stream_resume.py": ["40 True"],
    "time_sync.py": ["20 [0.8, 0.9, 1.0, 1.1, 1.2] 24"],
    "transform_protocol.py": ["(64, 64, 3) True True", "(135, 240)"],
    "typed_errors.py": ["Invalid mode='log'; must be one of ('inverse', 'sqrt', 'effective')", "True False"],
    "validation_pipeline.py": ["True {'cat': 0, 'dog': 1}", "24 True"],
    "volumes.py": [
        "6 ['healthy', 'lesion']",
        "torch.Size([3, 32, 64, 64]) torch.int16 torch.Size([3, 32, 64, 64]) [0, 0, 0]",
    ],
    "wrap_transforms.py": ["torch.Size([3, 64, 64]) True False"],
}


@pytest.mark.parametrize("name", sorted(PRINTS))
def test_a_docs_example_prints_what_its_page_shows(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    printed = capsys.readouterr().out
    for expected in PRINTS[name]:
        assert expected in printed, f"{name} did not print {expected!r}:\n{printed}"


def _pages() -> dict[Path, str]:
    return {
        page: page.read_text(encoding="utf-8")
        for page in sorted(DOCS.rglob("*"))
        if page.suffix in (".md", ".rst") and "_build" not in page.parts and "reference" not in page.parts
    }


def test_every_docs_example_is_run_here_and_shown_on_a_page() -> None:
    examples = {path.name for path in EXAMPLES.iterdir() if path.suffix in (".py", ".sh")}
    assert {name for name in examples if name.endswith(".py")} == set(PRINTS)
    shown = {
        match.split("/")[-1]
        for text in _pages().values()
        for match in re.findall(r"literalinclude[}:]*\s+(\S+)", text)
        if match.startswith("../examples/")
    }
    assert examples <= shown, sorted(examples - shown)


def test_the_transforms_guide_names_every_transform() -> None:
    text = (DOCS / "guides" / "transforms.md").read_text(encoding="utf-8")
    missing = [name for name in torchloom.transforms.__all__ if f"torchloom.transforms.{name}`" not in text]
    assert not missing, f"docs/guides/transforms.md does not name {missing}"


def test_the_readme_is_a_landing_page_linking_every_guide() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.encode("utf-8")) <= README_MAX_BYTES
    links = re.findall(r"\]\(([^)#]+)\)", text)
    relative = [link for link in links if "://" not in link]
    missing = [link for link in relative if not (ROOT / link).exists()]
    assert not missing, missing
    guides = {f"docs/guides/{page.name}" for page in (DOCS / "guides").iterdir()}
    assert guides <= set(relative), sorted(guides - set(relative))
    for path in ("LICENSE", "CHANGELOG.md", "BENCHMARKS.md"):
        assert path in relative


def _sphinx_build(source: Path, out: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-n",
            "-E",
            "-q",
            *options,
            "-d",
            str(out / "doctrees"),
            str(source),
            str(out / "html"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        cwd=ROOT,
    )


@pytest.fixture(scope="module")
def built_docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The HTML of a strict build: `make test`'s own, or one made here."""
    pytest.importorskip("sphinx", reason="the docs extra is not installed (make install installs it)")
    if os.environ.get(BUILT_ENV):
        return Path(os.environ[BUILT_ENV])
    out = tmp_path_factory.mktemp("docs")
    done = _sphinx_build(DOCS, out)
    assert done.returncode == 0, done.stderr[-5000:]
    return out / "html"


def _inventory(html: Path) -> set[str]:
    """The names objects.inv lists (4 header lines, then zlib-compressed ``name domain:role ...``)."""
    body = (html / "objects.inv").read_bytes().split(b"\n", 4)[4]
    return {line.split(" ", 1)[0] for line in zlib.decompress(body).decode("utf-8").splitlines()}


def test_every_public_name_has_an_entry_in_the_reference(built_docs: Path) -> None:
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        from api_pages import public_modules
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    modules = public_modules()
    assert {"torchloom", "torchloom.io", "torchloom.errors", "torchloom.tools.doctor"} <= set(modules)
    assert len(modules) >= 17 and "torchloom.fusion.sync" not in modules  # deeper modules are not pages
    documented = _inventory(built_docs)
    missing = [
        f"{module}.{name}"
        for module in modules
        for name in importlib.import_module(module).__all__
        if f"{module}.{name}" not in documented
    ]
    assert not missing, f"no entry in the built reference for {missing}"


def test_the_guides_and_generated_pages_are_built(built_docs: Path) -> None:
    for page in ("guides/gpu.html", "guides/cli.html", "guides/errors.html", "reference/torchloom.io.html"):
        assert (built_docs / page).stat().st_size > 10_000, page
    cli = (built_docs / "guides/cli.html").read_text(encoding="utf-8")
    for command in ("doctor", "prepare", "show", "bench", "cache", "demo"):
        assert f"usage: torchloom {command}" in cli
    errors = (built_docs / "guides/errors.html").read_text(encoding="utf-8")
    assert all(name in errors for name in torchloom.errors.__all__)


def test_a_reference_page_carries_the_docstrings_of_the_modules_defining_its_names(built_docs: Path) -> None:
    # tune() and collate() say "see the module docstring": that text must be on their page.
    loader = (built_docs / "reference/torchloom.loader.html").read_text(encoding="utf-8")
    assert "Rules of thumb" in loader and "How they work" in loader
    collation = (built_docs / "reference/torchloom.collation.html").read_text(encoding="utf-8")
    assert "numbers become tensors; strings stay lists" in collation


def _api_pages():
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        return importlib.import_module("api_pages")
    finally:
        sys.path.remove(str(DOCS / "_ext"))


def test_the_reference_index_gives_each_module_its_whole_first_sentence() -> None:
    api_pages = _api_pages()
    assert api_pages.first_sentence("Exact resume: the protocol,\nthe rules.\n\nMore.") == (
        "Exact resume: the protocol, the rules."
    )
    assert api_pages.first_sentence("Draw, e.g. a crop. Then more.") == "Draw, e.g. a crop."
    text = api_pages.index_text(["torchloom.resume"])
    assert "the reading process, consumer streams, and :func:`check_resume`, which proves" in text


def test_a_reference_page_lists_datasets_first_and_protocols_after_classes(built_docs: Path) -> None:
    page = (built_docs / "reference/torchloom.datasets.html").read_text(encoding="utf-8")
    names = ("FolderDataset", "Manifest", "CacheableDataset")
    order = [page.index(f'id="torchloom.datasets.{name}"') for name in names]
    assert order == sorted(order)
    assert 'href="#notes-torchloom-datasets-folder"' in page  # FolderDataset's entry links its notes
    assert 'id="notes-torchloom-datasets-folder"' in page


def test_the_attributes_the_guides_name_have_entries(built_docs: Path) -> None:
    documented = _inventory(built_docs)
    for dataset in ("torchloom.datasets.FolderDataset", "torchloom.datasets.ManifestDataset"):
        for attribute in ("classes", "targets", "report", "index"):
            assert f"{dataset}.{attribute}" in documented, f"{dataset}.{attribute}"
    assert "torchloom.datasets.FolderDataset.class_to_idx" in documented
    assert "torchloom.datasets.FolderDataset.class_counts" in documented
    assert "torchloom.cache.DecodedCache.report" in documented


def test_the_doctor_report_page_lists_every_key_of_the_schema(built_docs: Path) -> None:
    from torchloom.tools.doctor.schema import REPORT_SCHEMA

    page = (built_docs / "guides/doctor-report.html").read_text(encoding="utf-8")
    assert all(f"<code class=\"docutils literal notranslate\"><span class=\"pre\">{key}</span>" in page
               for key in REPORT_SCHEMA["properties"])


def test_a_reference_to_nothing_fails_the_build_and_one_to_the_outside_does_not(tmp_path: Path) -> None:
    pytest.importorskip("sphinx", reason="the docs extra is not installed (make install installs it)")
    source = tmp_path / "source"
    source.mkdir()
    (source / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(DOCS / '_ext')!r})\n"
        "extensions = ['sphinx.ext.autodoc', 'xref']\nnitpicky = True\n",
        encoding="utf-8",
    )
    (source / "index.rst").write_text(
        "Page\n====\n\n:py:class:`numpy.ndarray`, :py:class:`torch.Tensor`,"
        " :py:class:`torchloom.NoSuchThing`, :py:class:`torchloom.FolderDataset`\n",
        encoding="utf-8",
    )
    done = _sphinx_build(source, tmp_path / "out")
    assert done.returncode != 0
    assert "torchloom.NoSuchThing" in done.stderr  # a typo or a removed name
    assert "torchloom.FolderDataset" in done.stderr  # a public name with no entry
    assert "numpy" not in done.stderr and "torch.Tensor" not in done.stderr  # the outside: shown as text
