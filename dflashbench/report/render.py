"""Render a :class:`~dflashbench.report.model.ReportModel` as one self-contained HTML file or as Markdown.

HTML: Jinja2 with autoescape on, so every string from a dataset, a server or a user (model names,
categories, error messages, manifests) is escaped; figures are PNG ``data:`` URIs; the stylesheet is inline;
there is no script, and a Content-Security-Policy forbids fetching anything but inline images and styles.
Markdown: every cell goes through :func:`md_escape`, which neutralises table pipes and HTML.
"""

from __future__ import annotations

import re

from jinja2 import Environment, PackageLoader, StrictUndefined

from dflashbench.report.model import ReportModel

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|#~$])")


def md_escape(text: object) -> str:
    """One Markdown table cell: HTML characters as entities, Markdown syntax backslash-escaped, one line."""
    s = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _MD_SPECIAL.sub(r"\\\1", s)
    return " ".join(s.split())


def _env(autoescape: bool) -> Environment:
    env = Environment(
        loader=PackageLoader("dflashbench.report", "templates"),
        autoescape=autoescape,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["md"] = md_escape
    return env


def render_html(model: ReportModel) -> str:
    return _env(autoescape=True).get_template("report.html.j2").render(report=model)


def render_markdown(model: ReportModel) -> str:
    return _env(autoescape=False).get_template("report.md.j2").render(report=model)


def render_template(name: str, **context) -> str:
    """Another page from the package's templates (``history.html.j2``), autoescaped as the report is."""
    return _env(autoescape=True).get_template(name).render(**context)
