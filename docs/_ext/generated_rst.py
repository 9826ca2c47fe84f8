"""A directive base for pages generated at build time: a subclass writes reStructuredText lines,
which are parsed in place, section titles included."""

from __future__ import annotations

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles


class GeneratedRst(SphinxDirective):
    """Subclasses give :meth:`lines` and name where the text comes from in ``source``."""

    source = "generated"

    def lines(self) -> list[str]:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        holder = nodes.section()
        holder.document = self.state.document
        nested_parse_with_titles(self.state, StringList(self.lines(), source=self.source), holder)
        return holder.children
