"""The public API imports, the README's quick start runs, and the demo reports what it planted."""

from __future__ import annotations

import doctest
import importlib
import importlib.metadata
import inspect
import json
import pkgutil
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import torchloom
import torchloom.errors
from torchloom.tools.cli import main
from torchloom.tools.demo.run import run_demo

README = Path(__file__).resolve().parents[1] / "README.md"


SUBPACKAGES = (
    "torchloom.io",
    "torchloom.datasets",
    "torchloom.transforms",
    "torchloom.collation",
    "torchloom.samplers",
    "torchloom.fusion",
    "torchloom.streaming",
    "torchloom.cache",
    "torchloom.loader",
    "torchloom.resume",
    "torchloom.errors",
    "torchloom.faults",
    "torchloom.seeding",
    "torchloom.testing",
    "torchloom.tools.doctor",
    "torchloom.tools.prepare",
    "torchloom.tools.show",
    "torchloom.tools.bench",
    "torchloom.tools.demo",
    "torchloom.tools.check_resume",
)


def test_the_core_api_is_small_and_every_name_imports() -> None:
    assert len(torchloom.__all__) <= 40
    assert len(set(torchloom.__all__)) == len(torchloom.__all__)
    for name in torchloom.__all__:
        assert getattr(torchloom, name) is not None, name


@pytest.mark.parametrize("module_name", SUBPACKAGES)
def test_every_subpackage_name_imports(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert module.__all__, module_name
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{module_name}.{name}"


#: The core, pinned: a name joins or leaves it on purpose, with this list and the changelog.
CORE = {
    "datasets": ["FolderDataset", "ManifestDataset", "TableDataset", "MixedDataset", "StreamDataset"],
    "fields": ["Image", "Label", "Numeric", "Text"],
    "transforms": ["Compose", "RandomResizedCrop", "HorizontalFlip", "Resize", "CenterCrop", "Normalize"],
    "batches": ["collate", "Collate", "PadImages", "PadSequences"],
    "samplers": ["IndexSampler", "BalancedSampler", "WeightedSampler", "MixtureSampler"],
    "loading": ["Loader", "LoaderProfiler", "tune", "DecodedCache", "read_image"],
    "resume": ["check_resume", "ResumeReport"],
    "randomness": ["SampleKey", "sample_rng"],
    "faults": ["FaultPolicy", "FaultReport", "Skipped"],
    "errors": ["TorchloomError", "ConfigError", "DataError", "SampleError"],
    "version": ["__version__"],
}


def test_the_core_is_what_training_scripts_import() -> None:
    assert sorted(torchloom.__all__) == sorted(name for names in CORE.values() for name in names)


def test_domain_names_live_in_their_subpackages_not_the_core() -> None:
    homes = {
        "EnviCube": "torchloom.io",
        "HyperspectralDataset": "torchloom.datasets",
        "VideoClipDataset": "torchloom.datasets",
        "WindowDataset": "torchloom.datasets",
        "spatial_block_split": "torchloom.datasets",
        "PCA": "torchloom.transforms",
        "WindowSampler": "torchloom.samplers",
        "Stack": "torchloom.collation",
        "AsList": "torchloom.collation",
        "CropOrPadVolumes": "torchloom.collation",
        "LRUCache": "torchloom.cache",
        "TimeSync": "torchloom.fusion",
        "diagnose": "torchloom.tools.doctor",
        "write_class_folders": "torchloom.testing",
    }
    for name, home in homes.items():
        assert name not in torchloom.__all__
        assert name in importlib.import_module(home).__all__


def test_the_core_transforms_are_the_transforms_subpackage_ones() -> None:
    import torchloom.transforms

    for name in CORE["transforms"]:
        assert getattr(torchloom, name) is getattr(torchloom.transforms, name)


def test_no_core_name_shadows_a_module_of_the_package() -> None:
    """``import torchloom.<module>`` and ``torchloom.<module>.<name>`` both reach the module."""
    for info in pkgutil.iter_modules(torchloom.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"torchloom.{info.name}")
        assert info.name not in torchloom.__all__, info.name
        assert getattr(torchloom, info.name) is module, info.name
    import torchloom.collation as collation

    assert collation.PadImages is torchloom.collation.PadImages is torchloom.PadImages


def test_internal_helpers_are_not_exported() -> None:
    internal = {
        "torchloom.collation": ["stack_tensors", "collate_values"],
        "torchloom.loader": ["default_threads"],
        "torchloom.streaming": ["assignment"],
        "torchloom.datasets": ["WindowIndex"],
    }
    for module_name, names in internal.items():
        exported = importlib.import_module(module_name).__all__
        assert not set(names) & set(exported), module_name


def test_subpackages_export_the_errors_their_users_catch() -> None:
    errors = {
        "torchloom.io": [
            "DecodeError",
            "HeaderError",
            "MissingFileError",
            "UnreadableFileError",
            "UnsafeFileError",
        ],
        "torchloom.datasets": [
            "EmptyDatasetError",
            "FieldNotFoundError",
            "ManifestError",
            "PathOutsideRootError",
            "ValidationFailedError",
        ],
        "torchloom.collation": ["CollateError"],
        "torchloom.transforms": ["TransformError"],
        "torchloom.faults": ["SampleError", "SkippedSampleError"],
        "torchloom.resume": ["StateMismatchError", "DistributedSetupError"],
        "torchloom.fusion": ["JoinError", "TimestampError"],
        "torchloom.cache": ["CacheError", "StaleCacheError"],
    }
    for module_name, names in errors.items():
        module = importlib.import_module(module_name)
        for name in names:
            assert name in module.__all__, f"{module_name}.{name}"
            assert getattr(module, name) is getattr(torchloom.errors, name)


def _public_values() -> dict[int, str]:
    """Every value a public module exports, by identity, with one place that exports it."""
    exported: dict[int, str] = {}
    for module_name in ("torchloom", *SUBPACKAGES):
        module = importlib.import_module(module_name)
        for name in module.__all__:
            exported.setdefault(id(getattr(module, name)), f"{module_name}.{name}")
    return exported


def _classes_in(hint: object) -> set[type]:
    found = {hint} if isinstance(hint, type) else set()
    for argument in typing.get_args(hint):
        found |= _classes_in(argument)
    return found


def _hinted_classes(value: object) -> set[type]:
    """The classes named by the type hints of a public function, or of a class's attributes and
    public methods (its constructor included)."""
    functions = [value] if inspect.isfunction(value) else []
    hinted: set[type] = set()
    if inspect.isclass(value):
        hinted |= {cls for hint in typing.get_type_hints(value).values() for cls in _classes_in(hint)}
        for name, member in vars(value).items():
            if name.startswith("_") and name != "__init__":
                continue
            member = member.fget if isinstance(member, property) else member
            member = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
            if inspect.isfunction(member):
                functions.append(member)
    for function in functions:
        hinted |= {cls for hint in typing.get_type_hints(function).values() for cls in _classes_in(hint)}
    return hinted


def test_every_type_in_a_public_signature_is_exported() -> None:
    """A parameter, return value or attribute of a public name is of a type a user can import."""
    exported = _public_values()
    unexported: dict[str, str] = {}
    for module_name in ("torchloom", *SUBPACKAGES):
        module = importlib.import_module(module_name)
        for name in module.__all__:
            for cls in _hinted_classes(getattr(module, name)):
                if cls.__module__.startswith("torchloom") and id(cls) not in exported:
                    unexported[f"{cls.__module__}.{cls.__qualname__}"] = f"{module_name}.{name}"
    assert not unexported, unexported


def _package_modules() -> list[str]:
    return [info.name for info in pkgutil.walk_packages(torchloom.__path__, "torchloom.")]


def test_every_error_type_is_exported_from_torchloom_errors() -> None:
    defined: set[type[BaseException]] = set()
    for module_name in _package_modules():
        module = importlib.import_module(module_name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, torchloom.TorchloomError):
                defined.add(value)
    exported = {getattr(torchloom.errors, name) for name in torchloom.errors.__all__}
    assert defined <= exported, sorted(error.__name__ for error in defined - exported)
    assert all(error.__module__ == "torchloom.errors" for error in defined)


def _has_example(doc: str | None) -> bool:
    """A Google-style ``Example:`` section holding a doctest."""
    return bool(doc) and re.search(r"^\s*Examples?:\s*$", doc, flags=re.M) is not None and ">>>" in doc


def _public_callables() -> dict[str, object]:
    """Every public class and function, once, under the first public name that exports it."""
    return {
        name: value
        for value_id, name in _public_values().items()
        if inspect.isclass(value := _value_of(name)) or inspect.isfunction(value)
    }


def _value_of(dotted: str) -> object:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_every_public_class_and_function_has_an_example() -> None:
    """Its own docstring shows typical use in an ``Example:`` doctest. An error type instead says
    what raises it (``Raised by ...``) and shares the Example of :mod:`torchloom.errors`."""
    assert _has_example(torchloom.errors.__doc__)
    missing = []
    for name, value in _public_callables().items():
        doc = value.__doc__  # its own, not inherited
        if isinstance(value, type) and issubclass(value, BaseException):
            if not doc or "Raised by" not in doc:
                missing.append(name)
        elif not _has_example(doc):
            missing.append(name)
    assert not missing, missing


def _shown_modules() -> list[str]:
    """The public modules and, below each, the modules defining what it exports: the reference shows
    their docstrings."""
    shown = {"torchloom", *SUBPACKAGES}
    for page in ("torchloom", *SUBPACKAGES):
        for name in importlib.import_module(page).__all__:
            defined_in = getattr(getattr(importlib.import_module(page), name), "__module__", None)
            if isinstance(defined_in, str) and defined_in.startswith(page + "."):
                shown.add(defined_in)
    return sorted(shown)


@pytest.mark.parametrize("module_name", _shown_modules())
def test_module_examples_import_what_they_use(module_name: str) -> None:
    """A module docstring's example runs with nothing but its own imports, so every name it calls
    is one a reader can import (the module's private helpers show theirs in their own docstrings)."""
    module = importlib.import_module(module_name)
    for test in doctest.DocTestFinder(recurse=False).find(module, module_name, globs={}):
        runner = doctest.DocTestRunner()
        failures: list[str] = []
        runner.run(test, out=failures.append)
        assert runner.failures == 0, "".join(failures)


def test_the_version_is_written_once() -> None:
    assert importlib.metadata.version("torchloom") == torchloom.__version__


def test_readme_examples_run(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's one example, run as a script; it is docs/examples/quick_start.py, word for word."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 1
    script = (README.parent / "docs" / "examples" / "quick_start.py").read_text(encoding="utf-8")
    assert blocks[0] == script.split('"""\n', 1)[1].lstrip("\n")  # the guide shows the same code
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    printed = capsys.readouterr().out
    assert "{'class_0': 60, 'class_1': 21} 160 torch.float32" in printed  # two epochs, one file skipped
    assert "1 sample(s) skipped" in printed and "broken_truncated_0.jpg" in printed


def test_demo_finds_what_it_planted_splits_without_leaks_and_trains(tmp_path: Path) -> None:
    result = run_demo(
        counts=(40, 20, 8),
        image_size=64,
        crop_size=48,
        batch_size=16,
        num_workers=2,
        out=tmp_path,
        quiet=True,
    )
    assert result.leaks_found_before == result.leaks_planted == 2
    assert result.broken_found == result.broken_planted == 3
    assert result.leaks_found_after == 0
    train = sum(result.split_counts["train"].values())
    assert sum(result.split_counts["val"].values()) + train == 68 + 2  # the images and 2 planted copies
    assert result.samples_trained == train and not result.skipped  # prepare kept broken files out
    assert 0 <= result.wait_share <= 1 and result.final_loss == result.final_loss
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert report["leaks_found_before"] == 2 and report["samples_trained"] == train
    for name in ("first-batch.png", "doctor-given/classes.png", "doctor-prepared/report.json"):
        assert (tmp_path / name).stat().st_size > 0


def test_demo_command_writes_its_report(tmp_path: Path) -> None:
    out = tmp_path / "report"
    completed = subprocess.run(
        [sys.executable, "-m", "torchloom", "demo", "--images", "80", "--workers", "0", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert "LEAK" in completed.stdout and (out / "report.json").exists()


def test_cli_rejects_too_few_images(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--images", "1"])
    assert exit_info.value.code == 2 and "--images must be at least 8" in capsys.readouterr().err
