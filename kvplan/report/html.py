"""A report document as one self-contained HTML page (templates/report/report.html.j2).

The page holds everything it shows: the CSS is inline, every plot is inline SVG, there is no
script, and a Content-Security-Policy forbids loading anything, so it opens offline, from a mail
attachment or an artifact store alike. The same document always renders to the same bytes.
"""

from __future__ import annotations

from pathlib import Path

import jinja2
from markupsafe import Markup

from .. import __version__
from ..resources import data_root
from .document import to_markdown
from .page import Document

FORMATS = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md"}


def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(data_root() / "templates" / "report")),
                              autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                              trim_blocks=True, lstrip_blocks=True)


def render_html(doc: Document) -> str:
    template = _environment().get_template("report.html.j2")
    figures = {f.ident: Markup(f.svg) for f in doc.figures}
    return template.render(doc=doc, svgs=figures, version=__version__)


def output_format(path: str | Path) -> str | None:
    """'html' or 'md' from the output file's suffix; None for any other suffix."""
    return FORMATS.get(Path(path).suffix.lower())


MARKDOWN_MARK = f"<!-- written by kvplan report {__version__} -->\n"
"""The first line of a Markdown report (invisible when rendered): how kvplan knows the file as its own and
replaces it without --overwrite, as the HTML page's <meta name="generator"> does (kvplan/cli/files.py)."""


def render(doc: Document, fmt: str) -> str:
    """`doc` as the text of an "html" or "md" report file."""
    return render_html(doc) if fmt == "html" else MARKDOWN_MARK + to_markdown(doc)


def write(doc: Document, path: str | Path) -> str:
    """Write `doc` as HTML or Markdown, chosen by the suffix of `path`; returns the format."""
    fmt = output_format(path)
    if fmt is None:
        raise ValueError(f"{path}: unknown report format (use .html or .md)")
    Path(path).write_text(render(doc, fmt), encoding="utf-8")
    return fmt


__all__ = ["FORMATS", "MARKDOWN_MARK", "output_format", "render", "render_html", "write"]
