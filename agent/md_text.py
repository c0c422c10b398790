"""Text from tasks, candidates, workers and LLMs made safe to put in Markdown (``report.md``,
which the MCP server returns and chat renders): no raw HTML, and nothing that breaks out of
the place it is put (a table cell, a code span, a fenced block)."""

from __future__ import annotations

import html
import re

_INLINE = re.compile(r"([\\`*\[\]|])")
_BACKTICKS = re.compile(r"`+")


def md_inline(text: str) -> str:
    """One line of plain text: HTML escaped, Markdown's code, emphasis, link and table
    characters backslash-escaped, line breaks turned into spaces."""
    one_line = " ".join(str(text).splitlines())
    return _INLINE.sub(r"\\\1", html.escape(one_line, quote=False))


def md_prose(text: str) -> str:
    """Paragraphs an LLM wrote (analyses, plans): its Markdown kept, its HTML escaped."""
    return html.escape(str(text), quote=False)


def fenced(text: str, language: str = "", *, literal: bool = False) -> list[str]:
    """A fenced block that no line of ``text`` can close (the fence is longer than any run of
    backticks in it). Logs are HTML-escaped as everywhere else; ``literal`` keeps code as it
    is, to be copied (inside the fence nothing is read as Markdown or HTML)."""
    body = str(text) if literal else html.escape(str(text), quote=False)
    longest = max((len(run) for run in _BACKTICKS.findall(body)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + language, body, fence]
