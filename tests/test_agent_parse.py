"""The coder answer parser: three sections, a python block defining ModelNew, or a format error."""

from __future__ import annotations

import pytest
from kforge.agent.policy.parse import FormatError, parse_code_answer, to_proposal

CODE = "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    # Plan\n    pass\n"


def answer(code: str = CODE, heading: str = "##") -> str:
    return (
        f"{heading} Performance analysis\nr1-c0 was memory bound.\n\n{heading} Plan:\nVectorise loads.\n\n"
        f"{heading} Code\n```python\n{code}```\n"
    )


def test_sections_are_split_and_the_code_kept_whole():
    analysis, plan, code = parse_code_answer(answer())
    assert analysis == "r1-c0 was memory bound." and plan == "Vectorise loads."
    assert code == CODE  # a '# Plan' comment inside the code is not a heading


@pytest.mark.parametrize("heading", ["#", "###", "####"])
def test_heading_levels_are_accepted(heading):
    assert parse_code_answer(answer(heading=heading))[2] == CODE


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("just use torch", "no '## Performance analysis', '## Plan', '## Code' section"),
        (answer().replace("## Plan:", "## Steps"), "no '## Plan' section"),
        (answer().replace("```python", "").replace("```", ""), "no ```python fenced block"),
        (answer(code="x = 1\n"), "does not define class ModelNew"),
        (answer(code="def broken(:\n"), "not valid Python"),
    ],
)
def test_unparsable_answers_say_why(text, message):
    with pytest.raises(FormatError, match=message.replace("(", r"\(")):
        parse_code_answer(text)


def test_a_bad_answer_becomes_a_proposal_with_its_error_and_raw_text():
    proposal = to_proposal("no sections here")
    assert proposal.source == "" and proposal.raw == "no sections here"
    assert proposal.error.startswith("format error: the answer has no")
    assert to_proposal(answer()).source == CODE
