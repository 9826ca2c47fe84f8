"""The attributes a reference entry lists beside what autodoc finds on the class itself.

autodoc documents the attributes a class documents (a ``#:`` comment above the assignment) and
its own members. What a dataset gets from a base class no public module exports (``classes``,
``class_to_idx``, ``index``, ``report`` and ``root`` of :class:`torchloom.datasets.FolderDataset`
come from ``IndexedDataset`` and the sources), or sets without a comment, would be missing,
though the guides tell users to read them: this module lists, for a class, every such attribute
that its own code or its base classes' code assigns, with the base's ``#:`` comment or the
wording below, and the class of a report as the code builds it.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
import types
from typing import TYPE_CHECKING

from sphinx.pycode import ModuleAnalyzer

if TYPE_CHECKING:
    from api_pages import Entry

#: What the attributes every dataset of files has mean, wherever they are set.
SHARED = {
    "classes": "The class names in label order (label ``i`` is ``classes[i]``): the sorted class "
    "folders, or the classes of the label column.",
    "class_to_idx": "Each class name's label number, ``{{name: i}}``, as in torchvision's ``ImageFolder``.",
    "index": "The metadata of every sample, in numpy arrays (one row per sample: paths, labels and "
    "what the format needs), shared by DataLoader workers without copy-on-write growth.",
    "report": "What was left out, or could not be used, and why{kind}: print it, or read its fields.",
}

_ASSIGNED = re.compile(r"^\s*self\.([a-z]\w*)\s*(?::[^=\n]+)?=(?!=)\s*(\w+)?", re.M)


@functools.cache
def _attribute_docs(module: str) -> dict[tuple[str, str], list[str]]:
    return ModuleAnalyzer.for_module(module).find_attr_docs()


def _assigned(klass: type) -> dict[str, str | None]:
    """The attributes ``klass``'s own code assigns, each with the name it is built from, if any."""
    try:
        source = inspect.getsource(klass)
    except (OSError, TypeError):
        return {}
    found: dict[str, str | None] = {}
    for name, built_from in _ASSIGNED.findall(source):
        found.setdefault(name, built_from or None)
    return found


def _is_member(klass: type, name: str) -> bool:
    """Whether autodoc shows ``name`` as a member of ``klass`` itself (a method or a property)."""
    try:
        value = inspect.getattr_static(klass, name)
    except AttributeError:
        return False
    return isinstance(value, (property, functools.cached_property, types.FunctionType))


def _kind(klass: type, built_from: str | None, entries: list[Entry]) -> str:
    """``" (a :class:`...`)"`` for the documented class an attribute is built from."""
    if built_from is None:
        return ""
    value = vars(importlib.import_module(klass.__module__)).get(built_from)
    homes = [
        entry.home_name
        for entry in entries
        if entry.name == built_from and getattr(importlib.import_module(entry.module), entry.name) is value
    ]
    home = homes[0] if homes else None
    return f" (a :class:`~{home}`)" if home else ""


def attribute_lines(cls: type, entries: list[Entry]) -> list[str]:
    """``.. py:attribute::`` blocks, to nest in ``cls``'s entry, for what autodoc leaves out."""
    own = {attr for (qualname, attr) in _attribute_docs(cls.__module__) if qualname == cls.__qualname__}
    described: dict[str, str] = {}
    for klass in cls.__mro__:
        if not klass.__module__.startswith("torchloom") or klass.__module__ == "torchloom._compat":
            continue
        docs = _attribute_docs(klass.__module__)
        for name, built_from in _assigned(klass).items():
            if name in own or name in described or _is_member(cls, name) or name.startswith("_"):
                continue
            comment = docs.get((klass.__qualname__, name))
            if klass is not cls and comment:
                described[name] = " ".join(comment).strip()
            elif name in SHARED:
                described[name] = SHARED[name].format(kind=_kind(klass, built_from, entries))
        if klass is not cls:
            for (qualname, name), comment in docs.items():
                if qualname == klass.__qualname__ and name not in own and not _is_member(cls, name):
                    described.setdefault(name, " ".join(comment).strip())
    lines: list[str] = []
    for name in sorted(described, key=lambda name: (name not in SHARED, name)):
        lines += [f".. py:attribute:: {name}", "", f"   {described[name]}", ""]
    return lines
