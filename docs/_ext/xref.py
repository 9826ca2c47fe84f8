"""Cross-references resolved as Python resolves names, and a strict rule for what must resolve.

A docstring or a type hint names things as its own module sees them: ``FaultPolicy`` imported
into ``torchloom.datasets.folder``, ``torchloom.transforms.pca.PCA`` where the reference page
says ``torchloom.transforms.PCA``. A reference Sphinx cannot find is looked up in the namespace
of the module that defines the documented object; when it names a documented object, it links
to that object's entry.

What stays unresolved is judged by what it names: a reference to the outside (numpy, torch, the
standard library: no inventories are fetched, the build runs offline) or to a torchloom object
no public module exports is shown as text; a reference to nothing at all (a typo, a removed
name) is a warning, and the strict build fails on it.
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import importlib
import inspect
import re
import typing
from typing import Any

from api_pages import public_entries
from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment

_NOTHING = object()
_IDENTIFIER = re.compile(r"[A-Za-z_][\w.]*")
# How autodoc names the source of a docstring's text: "<file>:docstring of <dotted path>".
_DOCSTRING_OF = re.compile(r"docstring of ([\w.]+)")


def _import_path(path: str) -> object:
    """The object a dotted path names, importing the longest module prefix; ``_NOTHING`` if none."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        except Exception:  # a module that fails to import is not what the reference names
            return _NOTHING
        for part in parts[cut:]:
            value = getattr(value, part, _NOTHING)
            if value is _NOTHING:
                return _NOTHING
        return value
    return _NOTHING


def _attribute_path(start: object, path: str) -> object:
    value = start
    for part in path.split("."):
        value = getattr(value, part, _NOTHING)
        if value is _NOTHING:
            return _NOTHING
    return value


def _context(node: addnodes.pending_xref) -> tuple[object, object]:
    """The class a reference appears under (or ``_NOTHING``) and the module that defines the
    documented object: from the docstring the reference came from, else from the page's context."""
    found = _DOCSTRING_OF.search(node.source or "")
    context = [node.get("py:module") or "", node.get("py:class") or ""]
    path = found.group(1) if found else ".".join(part for part in context if part)
    documented = _import_path(path) if path else _NOTHING
    parent = _import_path(path.rsplit(".", 1)[0]) if "." in path else _NOTHING
    owner = next((value for value in (documented, parent) if inspect.isclass(value)), _NOTHING)
    for value in (documented, owner):
        defining = getattr(value, "__module__", None) if value is not _NOTHING else None
        if isinstance(defining, str):
            return owner, _import_path(defining)
    return owner, _import_path(context[0]) if context[0] else _NOTHING


def _unique_public(name: str) -> object:
    """The one public object exported under the bare ``name``, if exactly one is."""
    values = {id(value): value for value in _exports().get(name, [])}
    return next(iter(values.values())) if len(values) == 1 else _NOTHING


def lookup(target: str, node: addnodes.pending_xref) -> object:
    """What ``target`` names where the reference stands: an attribute of the class it appears
    under, a name of the module defining the documented object, an absolute dotted path, a bare
    name exported by exactly one public module, or a builtin or typing name."""
    target = target.lstrip("~.")
    owner, module = _context(node)
    for start in (owner, module):
        if start is not _NOTHING:
            value = _attribute_path(start, target)
            if value is not _NOTHING:
                return value
    for value in (_import_path(target), _unique_public(target)):
        if value is not _NOTHING:
            return value
    for outside in (builtins, typing):
        value = _attribute_path(outside, target)
        if value is not _NOTHING:
            return value
    return _NOTHING


def _set_by_constructor(owner: object, name: str) -> bool:
    """Whether ``name`` is an instance attribute: a dataclass field, or stored by an ``__init__``
    along the class's MRO (its code names it)."""
    if dataclasses.is_dataclass(owner) and name in {field.name for field in dataclasses.fields(owner)}:
        return True
    for base in getattr(owner, "__mro__", ()):
        init = vars(base).get("__init__")
        if inspect.isfunction(init) and name in init.__code__.co_names:
            return True
    return False


@functools.cache
def _exports() -> dict[str, list[object]]:
    """Every public object by the names it is exported under."""
    exports: dict[str, list[object]] = {}
    for entry in public_entries():
        exports.setdefault(entry.name, []).append(getattr(importlib.import_module(entry.module), entry.name))
    return exports


class Documented:
    """Where each public object has its entry, by identity."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        for entry in public_entries():
            if entry.home == entry.module and entry.directive != "data":
                self.names[id(_import_path(entry.full_name))] = entry.full_name

    def name_of(self, value: object, node: addnodes.pending_xref, env: BuildEnvironment) -> str | None:
        if id(value) in self.names:
            return self.names[id(value)]
        objects = env.get_domain("py").objects  # type: ignore[attr-defined]
        owner, _ = _context(node)
        attribute = node["reftarget"].lstrip("~.").rsplit(".", 1)[-1]
        for base in getattr(owner, "__mro__", ()):
            name = self.names.get(id(base))
            if name is not None and f"{name}.{attribute}" in objects:
                return f"{name}.{attribute}"
        return None


def _is_public_torchloom(value: object) -> bool:
    module = getattr(value, "__module__", None)
    if not isinstance(module, str) or not (module == "torchloom" or module.startswith("torchloom.")):
        return False
    return not any(part.startswith("_") for part in module.split("."))


def resolve(
    app: Sphinx, env: BuildEnvironment, node: addnodes.pending_xref, contnode: nodes.Element
) -> nodes.Element | None:
    """Link a reference Sphinx did not find to the entry of the object it names, if documented."""
    if node.get("refdomain") != "py":
        return None
    value = lookup(node["reftarget"], node)
    if value is _NOTHING:
        return None
    name = app.env.torchloom_documented.name_of(value, node, env)  # type: ignore[attr-defined]
    if name is None:
        return None
    domain = env.get_domain("py")
    return domain.resolve_xref(env, node["refdoc"], app.builder, "obj", name, node, contnode)


def _names_something(target: str, node: addnodes.pending_xref) -> bool:
    """Whether every identifier in ``target`` (a name, or an annotation such as ``A | B``) exists."""
    names = _IDENTIFIER.findall(target.lstrip("~."))
    if node.get("reftype") == "attr" and len(names) == 1 and "." not in names[0]:
        owner, _ = _context(node)
        if _set_by_constructor(owner, names[0]):
            return True
    return bool(names) and all(lookup(name, node) is not _NOTHING for name in names)


def judge(app: Sphinx, domain: Any, node: addnodes.pending_xref) -> bool | None:
    """Silence an unresolved reference to the outside or to unexported code; warn otherwise."""
    if getattr(domain, "name", None) != "py" or not _names_something(node["reftarget"], node):
        return None
    value = lookup(node["reftarget"], node)
    exported = any(value is other for values in _exports().values() for other in values)
    return None if _is_public_torchloom(value) and exported else True


def collect(app: Sphinx) -> None:
    app.env.torchloom_documented = Documented()  # type: ignore[attr-defined]


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("builder-inited", collect)
    app.connect("missing-reference", resolve)
    app.connect("warn-missing-reference", judge)
    return {"parallel_read_safe": False, "parallel_write_safe": True}
