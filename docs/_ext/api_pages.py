"""Reference pages generated from each public module's ``__all__`` when the build starts.

Every name a module exports gets an entry: a full autodoc entry on the page of the module it is
defined under (its home), and on every other page that re-exports it a line linking there. Each
re-exported name is also registered as an alias of its home entry, so ``torchloom.FolderDataset``
and ``torchloom.datasets.FolderDataset`` resolve to the same entry, in pages and in objects.inv.
A name added to an ``__all__`` appears in the next build, and a new public module gets its page,
with no edit here.

A page lists its entries by kind (datasets first, then the other classes, protocols, errors,
functions, constants: :data:`GROUPS`), and ends with "How they work": the docstrings of the modules
defining its names, each under a label (``notes-<module>``, e.g.
``:ref:`notes-torchloom.loader.autotune```) that each entry defined there links to, and that a
docstring can link to as well. A class's entry also lists the attributes it gets from unexported
base classes (``attributes.py``).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import re
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attributes import attribute_lines
from sphinx.application import Sphinx
from sphinx.domains.python import ObjectEntry
from sphinx.environment import BuildEnvironment
from sphinx.pycode import ModuleAnalyzer

import torchloom

#: Where the generated pages go, relative to the documentation's source folder (not in git).
FOLDER = "reference"


@functools.cache
def public_modules() -> list[str]:
    """``torchloom``, then by name every module right under it or under ``torchloom.tools`` that
    declares an ``__all__``: the public API. Deeper modules are implementation, re-exported by
    their package as it chooses."""
    walked = [info.name for info in pkgutil.walk_packages(torchloom.__path__, "torchloom.")]
    shallow = [
        name
        for name in walked
        if not any(part.startswith("_") for part in name.split("."))
        and (name.count(".") == 1 or (name.startswith("torchloom.tools.") and name.count(".") == 2))
    ]
    return [
        "torchloom",
        *sorted(name for name in shallow if "__all__" in vars(importlib.import_module(name))),
    ]


_NOTHING = object()


@dataclass(frozen=True)
class Entry:
    """One exported name: the module exporting it, and the page whose entry documents it."""

    module: str
    name: str
    home: str
    directive: str  # autoclass, autoexception, autofunction, or "data" for a constant

    @property
    def full_name(self) -> str:
        return f"{self.module}.{self.name}"

    @property
    def home_name(self) -> str:
        return f"{self.home}.{self.name}"


def _directive(value: object) -> str:
    if inspect.isclass(value):
        return "autoexception" if issubclass(value, BaseException) else "autoclass"
    if inspect.isfunction(value) or inspect.isbuiltin(value):
        return "autofunction"
    return "data"


def _home(module: str, value: object, exporters: list[str]) -> str:
    """The exporting module that documents ``value``: the deepest one its ``__module__`` lies in.

    A constant (no ``__module__``) is documented by every module that exports it.
    """
    defined_in = getattr(value, "__module__", None)
    if not isinstance(defined_in, str) or _directive(value) == "data":
        return module
    inside = [page for page in exporters if defined_in == page or defined_in.startswith(page + ".")]
    return max(inside, key=len) if inside else exporters[0]


def public_entries() -> list[Entry]:
    """Every ``(module, name)`` the public modules export, with the page that documents it."""
    exported: list[tuple[str, str, object]] = []
    exporters: dict[int, list[str]] = {}
    for page in public_modules():
        module = importlib.import_module(page)
        for name in module.__all__:
            value = getattr(module, name)
            exported.append((page, name, value))
            exporters.setdefault(id(value), []).append(page)
    return [
        Entry(page, name, _home(page, value, exporters[id(value)]), _directive(value))
        for page, name, value in exported
    ]


def first_sentence(doc: str | None) -> str:
    """The first sentence of a docstring: its first paragraph up to the first full stop that ends
    a sentence (not the one of ``e.g.`` or a dotted name), on one line."""
    first = doc.split("\n\n")[0].replace("\n", " ").strip() if doc else ""
    match = re.search(r"(?<!\be\.g)(?<!\bi\.e)\.\s", first + " ")
    sentence = first[: match.start()] if match else first
    return sentence.rstrip(".") + "." if sentence else ""


def _summary(value: object) -> str:
    """The first sentence of ``value``'s own docstring (none for a constant)."""
    return first_sentence(inspect.getdoc(value) if inspect.isclass(value) or callable(value) else None)


def _constant_doc(page: str, name: str, value: object) -> list[str]:
    """The ``#:`` comment above the assignment that defines a constant, in the page's package."""
    for module_name, module in sorted(sys.modules.items()):
        inside = module_name == page or module_name.startswith(page + ".")
        if inside and module is not None and vars(module).get(name, _NOTHING) is value:
            comment = ModuleAnalyzer.for_module(module_name).find_attr_docs().get(("", name))
            if comment:
                return [line for line in comment if line]
    return []


def _entry_text(entry: Entry, notes: str | None, entries: list[Entry]) -> list[str]:
    value = getattr(importlib.import_module(entry.module), entry.name)
    if entry.directive != "data":
        lines = [f".. {entry.directive}:: {entry.full_name}"]
        if entry.directive in ("autoclass", "autoexception"):
            lines += ["   :members:", "   :show-inheritance:"]
        lines.append("")
        if entry.directive == "autoclass":
            lines += [f"   {line}" if line else "" for line in attribute_lines(value, entries)]
        if notes:
            lines += [f"   How it works: :ref:`{notes} <{notes_label(notes)}>`.", ""]
        return lines
    doc = _constant_doc(entry.module, entry.name, value)
    lines = [f".. py:data:: {entry.name}", f"   :module: {entry.module}", f"   :value: {value!r}", ""]
    return [*lines, *(f"   {line}" for line in doc), ""]


#: The groups a page lists its entries in, in this order, each under its title.
GROUPS = ("Datasets", "Classes", "Protocols", "Errors", "Functions", "Constants")


def group_of(value: object, name: str) -> str:
    """Which of :data:`GROUPS` an exported value is listed under.

    Datasets (a class named ``...Dataset``) come first, being what a reader of a page looks for;
    then the other classes; then the protocols (a class naming ``typing.Protocol`` among its
    bases: the contracts, not things to build); errors; functions; constants.
    """
    if inspect.isclass(value):
        if typing.Protocol in value.__bases__:
            return "Protocols"
        if issubclass(value, BaseException):
            return "Errors"
        return "Datasets" if name.endswith("Dataset") else "Classes"
    return "Functions" if _directive(value) == "autofunction" else "Constants"


def notes_label(module: str) -> str:
    """The label of a defining module's notes (its docstring) under a page's "How they work"."""
    return f"notes-{module}"


def _defined_in(page: str, value: object) -> str | None:
    """The module under ``page`` that defines ``value`` and has notes (a docstring), if any."""
    defined_in = getattr(value, "__module__", None)
    if (
        isinstance(defined_in, str)
        and defined_in != page
        and defined_in.startswith(page + ".")
        and inspect.getdoc(importlib.import_module(defined_in))
    ):
        return defined_in
    return None


def page_text(page: str, entries: list[Entry]) -> str:
    """The reStructuredText of one module's reference page."""
    mine = [entry for entry in entries if entry.module == page]
    title = f"``{page}``"
    lines = [title, "=" * len(title), "", f".. automodule:: {page}", "   :no-members:", ""]
    module = importlib.import_module(page)
    elsewhere = [entry for entry in mine if entry.home != page]
    if elsewhere:
        lines += [
            "Exported here and documented with the module that defines them:",
            "",
            ".. list-table::",
            "   :widths: 25 55 20",
            "",
        ]
        for entry in elsewhere:
            summary = _summary(getattr(module, entry.name)) or " "
            lines += [
                f"   * - :py:obj:`~{entry.home_name}`",
                f"     - {summary}",
                f"     - :py:mod:`{entry.home}`",
            ]
        lines.append("")
    homed = [entry for entry in mine if entry.home == page]
    grouped = {
        group: [entry for entry in homed if group_of(getattr(module, entry.name), entry.name) == group]
        for group in GROUPS
    }
    several = sum(1 for members in grouped.values() if members) > 1
    for group, members in grouped.items():
        if members and several:
            lines += [group, "-" * len(group), ""]
        for entry in members:
            lines += _entry_text(entry, _defined_in(page, getattr(module, entry.name)), entries)
    lines += _module_notes(page, homed)
    return "\n".join(lines)


def _module_notes(page: str, homed: list[Entry]) -> list[str]:
    """The docstrings of the modules that define this page's entries (how a name works is often
    written there, once for all of a module's names), each under its module's name and a label
    (:func:`notes_label`) that entries and docstrings link to."""
    module = importlib.import_module(page)
    defining = sorted(
        {name for entry in homed if (name := _defined_in(page, getattr(module, entry.name))) is not None}
    )
    if not defining:
        return []
    lines = ["How they work", "-------------", ""]
    for name in defining:
        lines += [
            f".. _{notes_label(name)}:",
            "",
            f"``{name}``",
            "~" * (len(name) + 4),
            "",
            f".. automodule:: {name}",
            "   :no-members:",
            "   :no-index:",
            "",
        ]
    return lines


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def write_pages(app: Sphinx) -> None:
    """Write the reference pages and their index into the source folder before it is read."""
    entries = public_entries()
    app.env.torchloom_aliases = {  # type: ignore[attr-defined]
        entry.full_name: entry.home_name for entry in entries if entry.home != entry.module
    }
    folder = Path(app.srcdir) / FOLDER
    folder.mkdir(exist_ok=True)
    pages = public_modules()
    for stale in set(folder.glob("*.rst")) - {folder / f"{page}.rst" for page in [*pages, "index"]}:
        stale.unlink()  # a module that is no longer public: its old page would be an orphan
    for page in pages:
        _write_if_changed(folder / f"{page}.rst", page_text(page, entries))
    _write_if_changed(folder / "index.rst", index_text(pages))


def index_text(pages: list[str]) -> str:
    """The reference's first page: each module with the first sentence of its docstring."""
    lines = ["API reference", "=============", ""]
    lines += ["One page per public module, generated from its ``__all__``.", ""]
    lines += [".. list-table::", "   :widths: 30 70", ""]
    for page in pages:
        summary = first_sentence(inspect.getdoc(importlib.import_module(page))) or " "
        lines += [f"   * - :doc:`{page}`", f"     - {summary}"]
    lines += ["", ".. toctree::", "   :hidden:", "", *(f"   {page}" for page in pages), ""]
    return "\n".join(lines)


def register_aliases(app: Sphinx, env: BuildEnvironment) -> None:
    """Point every re-exported name at its home entry, once every page has been read."""
    domain = env.get_domain("py")
    objects: dict[str, ObjectEntry] = domain.objects  # type: ignore[attr-defined]
    for alias, home in getattr(env, "torchloom_aliases", {}).items():
        entry = objects.get(home)
        if entry is not None and alias not in objects:
            objects[alias] = ObjectEntry(entry.docname, entry.node_id, entry.objtype, aliased=True)


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("builder-inited", write_pages)
    app.connect("env-updated", register_aliases)
    return {"parallel_read_safe": False, "parallel_write_safe": True}
