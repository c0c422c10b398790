"""The judge's wall-clock check of the candidate's claims (tools/claims.py), on figures made
up to be what a loaded host and a hiding candidate produce."""

from __future__ import annotations

import torch
from kforge.tools.checksum import Checksum, norms
from kforge.tools.claims import hidden_time_reason, stale_reason
from kforge.tools.remote import Echo

BLOCK = 2
ROUNDS = 8
CLAIM = 0.02  # ms a call: a tiny elementwise task on the CPU
EAGER_OVERHEAD = 0.25  # ms a call the claims leave unexplained for eager, in the judge


def walls(extra_per_block: list[float]) -> tuple[list[float], list[float]]:
    """(block walls, claims): each block's opening call, BLOCK claimed calls, the honest
    overhead, and ``extra`` ms on top."""
    claims = [CLAIM] * (BLOCK * len(extra_per_block))
    return [(BLOCK + 1) * CLAIM + BLOCK * EAGER_OVERHEAD + x for x in extra_per_block], claims


EAGER = [walls([0.01 * (i % 3) for i in range(ROUNDS)])]


def test_a_wait_for_a_core_that_the_echo_also_saw_is_not_hidden_work() -> None:
    """Two busy cores: each wake-up of the worker waits ~1.5 ms. The CI run that rejected an
    honest candidate saw 1.4 ms a call unexplained (allowed 0.5); the echo waited as long."""
    loaded = walls([3.0 + 0.1 * (i % 2) for i in range(ROUNDS)])
    echoes = [3.0 + 0.1 * ((i + 1) % 2) for i in range(ROUNDS)]
    reason, line, doubtful = hidden_time_reason("cpu", loaded, EAGER, BLOCK, 0.2, echoes)
    assert reason == "" and not doubtful, line
    assert "echo a block 3.0" in line
    reason, line, _ = hidden_time_reason("cpu", loaded, EAGER, BLOCK, 0.2)  # no echo: the old verdict
    assert reason.startswith("timing claims do not add up"), line


def test_work_hidden_beyond_the_echos_wait_is_still_caught() -> None:
    hiding = walls([3.0 + 2 * 4.0 for _ in range(ROUNDS)])  # 4 ms a call of real work after each claim
    reason, line, _ = hidden_time_reason("cpu", hiding, EAGER, BLOCK, 0.2, [3.0] * ROUNDS)
    assert reason.startswith("timing claims do not add up"), line
    quiet = walls([2 * 4.0 for _ in range(ROUNDS)])
    reason, line, _ = hidden_time_reason("cpu", quiet, EAGER, BLOCK, 0.2, [0.03] * ROUNDS)
    assert reason.startswith("timing claims do not add up"), line


def test_a_pass_that_only_eagers_noise_allowed_is_doubtful() -> None:
    """The CI run of 2026-11-25: eager's blocks were disturbed (6.1 +- 4.2 ms a call
    unexplained), so a forged clock's 12.4 ms a call fell inside 4x that noise. Passed, but
    doubtful: the judge times again before it believes it. An honest candidate in the same
    noise is not doubtful."""
    noisy = [walls([2 * (6.0 + 4.0 * (-1) ** i) for i in range(ROUNDS)])]
    forged = walls([2 * 18.4 for _ in range(ROUNDS)])
    reason, line, doubtful = hidden_time_reason("cpu", forged, noisy, BLOCK, 0.2)
    assert reason == "" and doubtful, line
    honest = walls([2 * 6.0 for _ in range(ROUNDS)])
    reason, line, doubtful = hidden_time_reason("cpu", honest, noisy, BLOCK, 0.2)
    assert reason == "" and not doubtful, line
    _, _, doubtful = hidden_time_reason("cpu", forged, EAGER, BLOCK, 0.2)
    assert not doubtful  # on a quiet host it is simply rejected


def test_the_echo_answers_each_byte() -> None:
    echo = Echo()
    times = [echo.ms() for _ in range(20)]
    assert all(0 < t < 1000 for t in times)


def _stale_case(outputs: list[torch.Tensor]) -> str:
    """stale_reason on timed calls that returned ``outputs`` against the answers ``answer``."""
    torch.manual_seed(0)
    answers = [torch.randn(4096, dtype=torch.float64) for _ in range(2)]
    checksum = Checksum(12345, torch.device("cpu"))
    expected = [(checksum.of(a), norms(a)) for a in answers]
    sets = [i % 2 for i in range(len(outputs))]
    claimed = [checksum.of(out(answers[turn])) for out, turn in zip(outputs, sets, strict=True)]
    return stale_reason(claimed, sets, expected, 1e-5)


def test_outputs_a_little_off_on_every_call_are_lowered_precision_not_stale() -> None:
    """The CI run that mislabelled it: timed outputs a little off their answers (here 1e-3 of
    the norm; allowed 1e-5)."""
    noise = torch.Generator().manual_seed(1)
    reason = _stale_case(
        [lambda a: a * (1 + 1e-3 * torch.randn(a.shape, generator=noise)) for _ in range(20)]
    )
    assert reason.startswith("precision lowered on"), reason
    assert _stale_case([lambda a: a.float().double() for _ in range(20)]) == ""


def test_stale_or_constant_outputs_are_stale_even_when_one_lands_close() -> None:
    zeros = [lambda a: torch.zeros_like(a) for _ in range(20)]
    assert "stale or cached" in _stale_case(zeros)
    other = [lambda a, i=i: a.roll(1) if i % 2 else a for i in range(20)]  # another set's answer
    assert "stale or cached" in _stale_case(other)


def test_a_stale_output_one_probe_cannot_tell_from_its_answer_is_still_stale() -> None:
    """The CI run that labelled ``stale_after_warmup`` "precision lowered": it returns the same
    stale tensor on every timed call, so one sign vector's miss is the same on each, and it fell
    within 1e-2 of the norm. Here the stale output is made to fit probe 0 exactly: the other
    probes still see it, and fitting every probe takes the right output."""
    torch.manual_seed(0)
    answers = [torch.randn(4096, dtype=torch.float64) for _ in range(2)]
    checksum = Checksum(12345, torch.device("cpu"))
    expected = [(checksum.of(a), norms(a)) for a in answers]
    sign = checksum.weights[0, :4096].double()
    gap = answers[0] - answers[1]
    stale = answers[1] + gap - (gap @ sign) / 4096 * sign  # set 0's answer, less its probe-0 miss
    assert abs(checksum.of(stale)[0][0] - expected[1][0][0][0]) < 1e-9 * expected[1][1][0]
    sets = [1] * 4
    reason = stale_reason([checksum.of(stale) for _ in sets], sets, expected, 1e-5)
    assert "stale or cached" in reason, reason


def test_a_checksum_reply_of_another_form_is_rejected() -> None:
    """The checksums come from the candidate's worker, which the candidate can patch: a reply
    with one sum (the old form), too few, a NaN or a string is no fit for any answer."""
    answer = torch.randn(4096, dtype=torch.float64)
    checksum = Checksum(7, torch.device("cpu"))
    expected = [(checksum.of(answer), norms(answer))]
    good = checksum.of(answer)[0]
    for forged in (good[0], good[:2], [*good[:2], float("nan")], [*good[:2], "0"]):
        reason = stale_reason([[forged]], [0], expected, 1e-5)
        assert "not finite or not a floating tensor" in reason, (forged, reason)
    assert stale_reason([[good]], [0], expected, 1e-5) == ""
