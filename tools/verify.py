"""Correctness trials, run inside the worker.

Each trial builds the reference and the candidate from the same seed with fresh weights,
draws fresh random inputs (odd trials write the new values into the previous trial's
buffers, so a cache keyed on data pointers returns stale results), runs the two in a
random order on separate copies of the inputs, poisons the memory the candidate's
outputs will come from, and compares. It also measures both against a float64
reference, which is how quietly lowered precision is caught.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import random
import types
from typing import Any

import torch

from .compare import compare, rel_err, same
from .guards import ReferenceGuard, ThreadGuard, check_output_types, run_guarded
from .precision import PrecisionClass
from .trees import clone, flatten

FP64_TRIALS = 2  # trials that are also compared with a float64 reference (it is slow)
CALLS_PER_TRIAL = 2  # the same instances called twice: catches results cached in self or by data pointer


@dataclasses.dataclass
class Verdict:
    correct: bool
    trials: int = 0
    message: str = ""
    cheats: list[str] = dataclasses.field(default_factory=list)
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    fp64_rel_err: float | None = None
    ref_fp64_rel_err: float | None = None
    notes: list[str] = dataclasses.field(default_factory=list)  # how a correct output was judged


@dataclasses.dataclass
class Trial:
    """The last trial's models and inputs, reused for timing."""

    reference: torch.nn.Module
    candidate: torch.nn.Module
    inputs: list[Any]


class Verifier:
    def __init__(
        self,
        task: types.ModuleType,
        model_new: type[torch.nn.Module],
        device: torch.device,
        precision: PrecisionClass,
        threads: ThreadGuard,
        reference_guard: ReferenceGuard,
    ) -> None:
        self.task = task
        self.model_new = model_new
        self.device = device
        self.precision = precision
        self.threads = threads
        self.reference_guard = reference_guard
        self.last: Trial | None = None

    def run(self, trials: int, seed: int) -> Verdict:
        """``trials`` fresh model pairs from seeds derived from ``seed``; each pair is called
        twice, the second time with new values written into the same input tensors. Input
        values come from unpredictable seeds, so a candidate cannot replay them."""
        verdict = Verdict(correct=True)
        previous: tuple[Any, Any, bool] | None = None  # (candidate out, reference out, was correct)
        for t in range(trials):
            self.last = None  # the previous trial's models and inputs go before the next are built:
            if t:  # a candidate in a reference cycle (a compiled bound method kept in its __dict__)
                gc.collect()  # holds its buffers, say a CUDA graph's static inputs, until collected
            previous = self._trial(t, seed * 7919 + t * 1000, verdict, previous)
            if verdict.cheats or not verdict.correct:
                break
        if verdict.correct and verdict.fp64_rel_err is not None and verdict.ref_fp64_rel_err is not None:
            limit = max(self.precision.max_fp64_rel_err, 10 * verdict.ref_fp64_rel_err)
            if verdict.fp64_rel_err > limit:
                verdict.cheats.append(
                    f"precision lowered: error vs float64 {verdict.fp64_rel_err:.2e} exceeds "
                    f"{limit:.2e} allowed under {self.precision.name} (reference: {verdict.ref_fp64_rel_err:.2e})"
                )
        verdict.cheats = list(dict.fromkeys(verdict.cheats))
        return verdict

    def _trial(
        self, t: int, trial_seed: int, verdict: Verdict, previous: tuple[Any, Any, bool] | None
    ) -> tuple[Any, Any, bool] | None:
        """One fresh model pair called CALLS_PER_TRIAL times; failures and cheats go to
        ``verdict``. Returns the last call's (candidate out, reference out, was correct)."""
        reference, candidate = self._build(trial_seed)
        inputs: list[Any] | None = None
        for call in range(CALLS_PER_TRIAL):
            inputs = self._inputs(_unpredictable_seed(), reuse=inputs)
            verdict.trials = t + 1
            ok, cand_out, ref_out = self._check_call(reference, candidate, inputs, trial_seed + call, verdict)
            if not ok:
                verdict.correct = False
                verdict.message = f"trial {t + 1}, call {call + 1}: {verdict.message}"
                if previous is None:  # call once more, to tell a constant output from a wrong one
                    previous = (clone(cand_out), clone(ref_out), False)
                    inputs = self._inputs(_unpredictable_seed(), reuse=inputs)
                    _, cand_out, ref_out = self._check_call(
                        reference, candidate, inputs, trial_seed, Verdict(True)
                    )
                verdict.cheats += _classify_repeat(cand_out, ref_out, previous)
                return previous
            if t < FP64_TRIALS and call == 0:
                self._fp64_errors(reference, inputs, cand_out, ref_out, verdict)
            previous = (clone(cand_out), clone(ref_out), ok)  # CUDA-graph outputs get overwritten
            self.last = Trial(reference, candidate, inputs)
        return previous

    def fresh_inputs(self) -> list[Any]:
        """A new set of input values, drawn like the trials' (for timing)."""
        return self._inputs(_unpredictable_seed(), reuse=None)

    def recheck(self, candidate_output: Any, reference: torch.nn.Module, inputs: list[Any]) -> str:
        """Compare an output the candidate gave on ``inputs`` with the reference's: the empty
        string when it matches, else what differs."""
        with torch.no_grad():
            expected = reference(*clone(inputs))
        ok, message, _, _ = compare(candidate_output, expected, self.precision)
        if ok or _agrees_with_fp64(candidate_output, expected, reference, inputs, self.precision):
            return ""
        return message

    def _check_call(
        self,
        reference: torch.nn.Module,
        candidate: torch.nn.Module,
        inputs: list[Any],
        seed: int,
        verdict: Verdict,
    ) -> tuple[bool, Any, Any]:
        """One call of both models on ``inputs``: (output correct, candidate out, reference out).
        Cheats seen on the way go to ``verdict.cheats``; the failure message to ``verdict.message``."""
        ref_out, cand_out, early_out, problems = self._run_pair(reference, candidate, inputs, seed)
        verdict.cheats += problems
        ok, message, abs_err, rel_err = compare(cand_out, ref_out, self.precision)
        if not ok and _agrees_with_fp64(cand_out, ref_out, reference, inputs, self.precision):
            ok, message = True, ""
            verdict.notes.append(FP64_NOTE)
        verdict.max_abs_err = max(verdict.max_abs_err, abs_err)
        verdict.max_rel_err = max(verdict.max_rel_err, rel_err)
        verdict.message = message
        if ok and not same(early_out, cand_out):
            verdict.cheats.append(
                "work on a side stream: the output was unfinished when the caller's stream finished"
            )
        return ok, cand_out, ref_out

    def _build(self, seed: int) -> tuple[torch.nn.Module, torch.nn.Module]:
        init = self.task.get_init_inputs()
        # Built on the device (weights drawn there: fast for large models), in training
        # mode as KernelBench runs them (BatchNorm uses batch statistics).
        with torch.device(self.device):
            torch.manual_seed(seed)
            reference = self.task.Model(*init).to(self.device)
            torch.manual_seed(seed)
            candidate = run_guarded(lambda: self.model_new(*init), self.threads, self.reference_guard)
        candidate = candidate.to(self.device)
        ref_state, cand_state = reference.state_dict(), candidate.state_dict()
        if ref_state.keys() == cand_state.keys() and all(
            ref_state[k].shape == cand_state[k].shape for k in ref_state
        ):
            _fresh_weights(reference, seed)
            candidate.load_state_dict(reference.state_dict())
        return reference, candidate

    def _inputs(self, seed: int, reuse: list[Any] | None) -> list[Any]:
        torch.manual_seed(seed)
        with torch.device(self.device):
            fresh = [x.to(self.device) if isinstance(x, torch.Tensor) else x for x in self.task.get_inputs()]
        if reuse is None:
            return fresh
        for old, new in zip(reuse, fresh, strict=True):
            if isinstance(old, torch.Tensor):
                old.copy_(new)  # same storage, new values
        return reuse

    def _run_pair(
        self, reference: torch.nn.Module, candidate: torch.nn.Module, inputs: list[Any], seed: int
    ) -> tuple[Any, Any, Any, list[str]]:
        pristine = clone(inputs)
        ref_inputs = clone(inputs)
        problems: list[str] = []
        order = [0, 1]
        random.Random(seed).shuffle(order)
        ref_out = cand_out = early_out = None
        for who in order:
            with torch.no_grad():
                if who == 0:
                    ref_out = reference(*ref_inputs)
                    _sync(self.device)
                else:
                    _poison_allocator(
                        ref_out if ref_out is not None else reference(*clone(pristine)), self.device
                    )
                    cand_out = run_guarded(lambda: candidate(*inputs), self.threads, self.reference_guard)
                    if self.device.type == "cuda":
                        torch.cuda.current_stream().synchronize()  # the caller's stream only
                    early_out = clone(cand_out)
                    _sync(self.device)
        problems += check_output_types(cand_out, self.device)
        if not same(inputs, pristine) and same(ref_inputs, pristine):
            problems.append("inputs modified in place (the reference leaves them unchanged)")
        return ref_out, cand_out, early_out, problems

    def _fp64_errors(
        self, reference: torch.nn.Module, inputs: list[Any], cand_out: Any, ref_out: Any, verdict: Verdict
    ) -> None:
        out64 = _reference64(reference, inputs)
        if out64 is None:
            return  # an op without float64 support: no float64 figures for this task
        cand_err, ref_err = rel_err(cand_out, out64), rel_err(ref_out, out64)
        verdict.fp64_rel_err = max(verdict.fp64_rel_err or 0.0, cand_err)
        verdict.ref_fp64_rel_err = max(verdict.ref_fp64_rel_err or 0.0, ref_err)


FP64_NOTE = (
    "matched the float64 reference within the tolerance where the float32 reference itself is "
    "off by more (a more accurate result than eager's)"
)


def _agrees_with_fp64(
    cand_out: Any, ref_out: Any, reference: torch.nn.Module, inputs: list[Any], precision: PrecisionClass
) -> bool:
    """The exact answer (the reference run in float64, rounded to the output dtype) is also a
    correct answer: a candidate more accurate than eager, say one that sums in float64, can
    differ from eager's float32 output by eager's own error. Checked under the same
    tolerance, so only a result closer to the truth passes this way."""
    if not any(isinstance(t, torch.Tensor) and t.is_floating_point() for t in flatten(ref_out)):
        return False
    out64 = _reference64(reference, inputs)
    if out64 is None:
        return False
    refs, exact = flatten(ref_out), flatten(out64)
    if len(refs) != len(exact):
        return False
    rounded = [
        e.to(r.dtype)
        if isinstance(e, torch.Tensor) and isinstance(r, torch.Tensor) and r.is_floating_point()
        else e
        for e, r in zip(exact, refs, strict=True)
    ]
    ok, _, _, _ = compare(flatten(cand_out), rounded, precision)
    return ok


def _reference64(reference: torch.nn.Module, inputs: list[Any]) -> Any:
    """The reference's output computed in float64 (a copy of it, on float64 inputs), or None
    for a model with an op that has no float64 kernel."""
    try:
        ref64 = copy.deepcopy(reference).double()
        with torch.no_grad():
            return ref64(*[x.double() if _is_float(x) else x for x in inputs])
    except (RuntimeError, TypeError, NotImplementedError):
        return None


def _classify_repeat(cand_out: Any, ref_out: Any, previous: tuple[Any, Any, bool] | None) -> list[str]:
    """A wrong output equal to the previous call's while the reference changed."""
    if previous is None:
        return []
    prev_cand, prev_ref, prev_ok = previous
    if same(cand_out, prev_cand) and not same(ref_out, prev_ref):
        if prev_ok:
            return ["results cached across calls: the output repeats the previous call's for new inputs"]
        return ["outputs ignore their inputs"]
    return []


def _unpredictable_seed() -> int:
    return random.SystemRandom().randrange(2**62)


def _fresh_weights(model: torch.nn.Module, seed: int) -> None:
    """Move every floating parameter away from its initial value (biases initialised to zero,
    norms to one) so that a kernel that ignores a parameter is caught."""
    generators: dict[torch.device, torch.Generator] = {}
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point() and p.numel():
                if p.device not in generators:
                    generators[p.device] = torch.Generator(device=p.device).manual_seed(seed + 17)
                scale = float(p.detach().abs().mean()) or 0.1
                noise = torch.randn(p.shape, generator=generators[p.device], dtype=p.dtype, device=p.device)
                p.add_(noise * (0.5 * scale))


def _poison_allocator(like: Any, device: torch.device) -> None:
    """Fill blocks the size of each expected output with NaN and free them: the caching
    allocator hands them to the candidate, so elements it never writes read as NaN."""
    for t in flatten(like):
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel():
            block = torch.full_like(t, float("nan"), device=device)
            del block


def _is_float(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()
