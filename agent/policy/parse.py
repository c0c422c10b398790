"""Parse a coder answer into a Proposal.

The model must answer in three sections, ``## Performance analysis``, ``## Plan`` and
``## Code`` (a fenced python block defining ``class ModelNew``). An answer that cannot be
parsed gives a Proposal with an empty source and the reason in ``error``; the graph records
it as a ``format_error`` attempt and shows the reason to the model next round.
"""

from __future__ import annotations

import re

from ...tools.task import TaskError, parse_candidate
from .base import Proposal

SECTIONS = ("performance analysis", "plan", "code")
_HEADING = re.compile(r"^\s{0,3}#{1,4}\s*\**\s*(performance analysis|plan|code)\s*\**\s*:?\s*$", re.I | re.M)
_FENCE = re.compile(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)```", re.S)


class FormatError(ValueError):
    """An answer that does not follow the required sections. The message is one line."""


def split_sections(text: str) -> dict[str, str]:
    """The text under each required heading (the first heading of each name wins)."""
    found: dict[str, str] = {}
    marks = list(_HEADING.finditer(text))
    for i, mark in enumerate(marks):
        name = mark.group(1).lower()
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        if name == "code":  # the code section runs to the end: a fence may contain '#' lines
            end = len(text)
        found.setdefault(name, text[mark.end() : end].strip())
        if name == "code":
            break
    return found


def parse_code_answer(text: str) -> tuple[str, str, str]:
    """(analysis, plan, code) of an answer; raises FormatError saying what is wrong."""
    if not text.strip():
        raise FormatError("the answer was empty")
    sections = split_sections(text)
    missing = [name for name in SECTIONS if name not in sections]
    if missing:
        headings = ", ".join(f"'## {name.capitalize()}'" for name in missing)
        raise FormatError(f"the answer has no {headings} section")
    fence = _FENCE.search(sections["code"])
    if fence is None:
        raise FormatError("the Code section has no ```python fenced block")
    code = fence.group(1).strip() + "\n"
    try:
        parse_candidate(code)
    except TaskError as err:
        raise FormatError(str(err)) from None
    return sections["performance analysis"], sections["plan"], code


def to_proposal(text: str, strategy: str = "llm") -> Proposal:
    try:
        analysis, plan, code = parse_code_answer(text)
    except FormatError as err:
        return Proposal(source="", strategy=strategy, raw=text, error=f"format error: {err}")
    return Proposal(source=code, strategy=strategy, analysis=analysis, plan=plan, raw=text)
