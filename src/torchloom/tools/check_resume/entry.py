"""A Python function named on the command line: ``package.module:function`` or ``file.py:function``."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from torchloom.errors import ConfigError


def load_entry(entry: str) -> Callable[..., Any]:
    """The function ``entry`` names: ``module:function`` (imported as ``python -m`` would, the
    current folder first on the path) or ``file.py:function``.

    Example:
        >>> load_entry("os.path:join")("a", "b") == os.path.join("a", "b")
        True
    """
    module_name, colon, function_name = entry.rpartition(":")
    if not colon or not module_name or not function_name:
        raise ConfigError(
            f"entry point {entry!r} is not module:function; write it as my_project.data:make_loader "
            "or path/to/data.py:make_loader"
        )
    module = _module(module_name)
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ConfigError(
            f"entry point {entry!r}: {module_name} has no function {function_name!r}; name a function "
            "make_loader(rank, world_size, num_workers) that returns a loader"
        )
    return function


def _module(name: str) -> ModuleType:
    if name.endswith(".py") or os.sep in name:
        if not os.path.isfile(name):
            raise ConfigError(f"entry point file {name!r} does not exist")
        spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(name))[0], name)
        if spec is None or spec.loader is None:
            raise ConfigError(f"entry point file {name!r} is not a Python module")
        module = importlib.util.module_from_spec(spec)
        # Registered before it runs, as an import does: dataclasses and pickling (spawned workers)
        # look the module up by name.
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name is not None and name.startswith(error.name):
            raise ConfigError(
                f"entry point module {name!r} cannot be imported ({error}); run from the folder that "
                "holds it, or set PYTHONPATH"
            ) from error
        raise
