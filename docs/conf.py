"""Sphinx configuration for the mqcore docs (Markdown through MyST)."""

from __future__ import annotations

project = "mqcore"
author = "The mqcore developers"
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "examples"]
autodoc_member_order = "bysource"
autodoc_typehints = "none"
myst_heading_anchors = 3
# Links from the guides to source files and example folders are for readers on GitHub.
suppress_warnings = ["myst.xref_missing", "myst.header"]
html_theme = "alabaster"
