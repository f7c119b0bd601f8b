"""Sphinx configuration of the pyg_dynscale documentation.

Build with ``make docs`` (output: ``docs/_build/html``). Guides are Markdown
pages in ``docs/*.md`` (read by myst-parser and picked up by the glob toctree
in ``index.rst``); the API reference in ``docs/api/*.rst`` is generated from
the docstrings by autodoc.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

import pyg_dynscale  # noqa: E402

project = "pyg_dynscale"
author = "pyg_dynscale developers"
copyright = "pyg_dynscale developers, MIT License"
version = release = pyg_dynscale.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",  # Google-style "Args:" / "Returns:" docstrings, as in PyG
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "myst_parser",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
# Every docs/api page lists its members explicitly (`:members:`): a package
# page (docs/api/data.rst) must not re-document what its __all__ re-exports.
autodoc_default_options = {"show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "alabaster"
html_title = f"pyg_dynscale {release}"
