"""Sphinx configuration of the torchloom documentation: ``make docs`` builds it into docs/_build.

The build is strict (``-W -n``): a docstring that does not render, a reference to nothing or a
public name without an entry fails it. The reference pages are generated from each public
module's ``__all__`` (``_ext/api_pages.py``); the guides are Markdown (MyST) and show code from
``docs/examples/``, which the tests run.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "_ext"))

import torchloom

project = "torchloom"
author = "the torchloom authors"
copyright = "the torchloom authors; Apache License 2.0"
release = version = torchloom.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "myst_parser",
    "api_pages",
    "xref",
    "cli_help",
    "error_catalogue",
    "doctor_schema",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "examples", "_ext"]

html_theme = "furo"
html_title = f"torchloom {release}"

nitpicky = True
autodoc_typehints = "description"
autodoc_member_order = "bysource"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
myst_heading_anchors = 3
