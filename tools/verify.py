"""Correctness trials, run inside the worker.

Each trial builds the reference and the candidate from the same seed with fresh weights,
draws fresh random inputs (odd trials write the new values into the previous trial's
buffers, so a cache keyed on data pointers returns stale results), runs the two in a
random order on the same inputs (restored from a pristine copy when the first one changed
them), poisons the memory the candidate's outputs will come from, and compares. It also
measures both against a float64 reference, which is how quietly lowered precision is caught.

Memory: besides the models and what they allocate, a call holds the inputs, one pristine
copy of them and the two outputs; what the checks compare across calls (the previous call's
outputs, an output read early) are keyed fingerprints, not copies (:mod:`.fingerprint`).
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import math
import random
import types
from typing import Any

import torch

from .compare import compare, rel_err, same
from .fingerprint import Fingerprinter
from .guards import ReferenceGuard, ThreadGuard, check_output_types, run_guarded
from .memory import MB, MemoryMeter
from .precision import PrecisionClass
from .roofline import tensor_bytes
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
        self.fingerprints = Fingerprinter(device)
        self.output_spec: list[Any] | None = None  # (shape, dtype) of the reference's outputs
        self.candidate_memory = 0  # the most one candidate call allocated above what it found (bytes)
        self.meter: MemoryMeter | None = None
        self.inputs_bytes = 0

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
        ``verdict``. Returns the last call's (candidate out, reference out, was correct) as
        fingerprints (a CUDA graph's outputs get overwritten; a copy of a multi-GB output
        would hold its memory)."""
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
                    previous = (self.fingerprints.of(cand_out), self.fingerprints.of(ref_out), False)
                    del cand_out, ref_out
                    inputs = self._inputs(_unpredictable_seed(), reuse=inputs)
                    _, cand_out, ref_out = self._check_call(
                        reference, candidate, inputs, trial_seed, Verdict(True)
                    )
                verdict.cheats += _classify_repeat(self.fingerprints, cand_out, ref_out, previous)
                return previous
            if t < FP64_TRIALS and call == 0:
                self._fp64_errors(reference, inputs, cand_out, ref_out, verdict)
            previous = (self.fingerprints.of(cand_out), self.fingerprints.of(ref_out), ok)
            del cand_out, ref_out
            self.last = Trial(reference, candidate, inputs)
        return previous

    def memory_figures(self) -> dict[str, float]:
        """The Result's memory figures known after verification (MB)."""
        outputs = sum(math.prod(s[0]) * s[1].itemsize for s in self.output_spec or [] if s is not None)
        return dict(
            inputs_mb=self.inputs_bytes / MB,
            outputs_mb=outputs / MB,
            candidate_memory_mb=self.candidate_memory / MB,
        )

    def fresh_inputs(self) -> list[Any]:
        """A new set of input values, drawn like the trials' (for timing)."""
        return self._inputs(_unpredictable_seed(), reuse=None)

    def recheck(self, candidate_output: Any, reference: torch.nn.Module, inputs: list[Any]) -> str:
        """Compare an output the candidate gave on ``inputs`` with the reference's: the empty
        string when it matches, else what differs. The reference runs on ``inputs`` itself
        (no copy): pass values nothing needs afterwards."""
        with torch.no_grad():
            expected = reference(*inputs)
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
        ref_out, cand_out, early, problems = self._run_pair(reference, candidate, inputs, seed)
        verdict.cheats += problems
        ok, message, abs_err, rel_err = compare(cand_out, ref_out, self.precision)
        if not ok and _agrees_with_fp64(cand_out, ref_out, reference, inputs, self.precision):
            ok, message = True, ""
            verdict.notes.append(FP64_NOTE)
        verdict.max_abs_err = max(verdict.max_abs_err, abs_err)
        verdict.max_rel_err = max(verdict.max_rel_err, rel_err)
        verdict.message = message
        if ok and early != self.fingerprints.of(cand_out):
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
        self.inputs_bytes = tensor_bytes(fresh)
        if reuse is None:
            return fresh
        for old, new in zip(reuse, fresh, strict=True):
            if isinstance(old, torch.Tensor):
                old.copy_(new)  # same storage, new values
        return reuse

    def _run_pair(
        self, reference: torch.nn.Module, candidate: torch.nn.Module, inputs: list[Any], seed: int
    ) -> tuple[Any, Any, list[Any], list[str]]:
        """Both models on ``inputs`` in a random order: (reference out, candidate out, the
        fingerprint of the candidate's output when the caller's stream alone had finished,
        cheats). Inputs one of them changed in place are restored before the other runs."""
        pristine = clone(inputs)
        changed: set[int] = set()
        order = [0, 1]
        random.Random(seed).shuffle(order)
        outs: list[Any] = [None, None]
        early: list[Any] = []
        for who in order:
            with torch.no_grad():
                if who == 0:
                    outs[0] = reference(*inputs)
                    _sync(self.device)
                    self.output_spec = [_spec(t) for t in flatten(outs[0])]
                else:
                    if self.output_spec is None:  # the candidate goes first in the first call
                        self.output_spec = [_spec(t) for t in flatten(reference(*clone(pristine)))]
                    _poison_allocator(self.output_spec, self.device)
                    outs[1], early = self._candidate_call(candidate, inputs)
            if not same(inputs, pristine):
                changed.add(who)
                outs[who] = own_storage(outs[who], inputs)  # an output that is a view of the inputs
                for target, source in zip(inputs, pristine, strict=True):
                    if isinstance(target, torch.Tensor):
                        target.copy_(source)
        del pristine
        problems = check_output_types(outs[1], self.device)
        if 1 in changed and 0 not in changed:
            problems.append("inputs modified in place (the reference leaves them unchanged)")
        return outs[0], outs[1], early, problems

    def _candidate_call(self, candidate: torch.nn.Module, inputs: list[Any]) -> tuple[Any, list[Any]]:
        """The candidate's output and its fingerprint taken when the caller's stream alone had
        finished; the most memory a call allocated goes to ``candidate_memory``."""
        held = self.meter.start_region() if self.meter is not None else 0
        out = run_guarded(lambda: candidate(*inputs), self.threads, self.reference_guard)
        if self.device.type == "cuda":
            torch.cuda.current_stream().synchronize()  # the caller's stream only
        early = self.fingerprints.of(out)
        _sync(self.device)
        if self.meter is not None:
            self.candidate_memory = max(self.candidate_memory, self.meter.region_peak() - held)
        return out, early

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


def _classify_repeat(
    fingerprints: Fingerprinter, cand_out: Any, ref_out: Any, previous: tuple[Any, Any, bool] | None
) -> list[str]:
    """A wrong output equal to the previous call's while the reference changed (``previous``
    holds that call's fingerprints)."""
    if previous is None:
        return []
    prev_cand, prev_ref, prev_ok = previous
    if fingerprints.of(cand_out) == prev_cand and fingerprints.of(ref_out) != prev_ref:
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


def _poison_allocator(spec: list[Any], device: torch.device) -> None:
    """Fill blocks the size of each expected output (``spec``: shape and dtype) with NaN and
    free them: the caching allocator hands them to the candidate, so elements it never writes
    read as NaN."""
    for item in spec:
        if item is not None and item[1].is_floating_point:
            block = torch.full(item[0], float("nan"), dtype=item[1], device=device)
            del block


def _spec(out: Any) -> tuple[tuple[int, ...], torch.dtype] | None:
    return (tuple(out.shape), out.dtype) if isinstance(out, torch.Tensor) else None


def own_storage(out: Any, inputs: list[Any]) -> Any:
    """``out`` with every tensor that shares memory with an input copied, so that restoring
    the inputs does not change it."""
    pointers = {x.untyped_storage().data_ptr() for x in flatten(inputs) if isinstance(x, torch.Tensor)}

    def own(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() in pointers:
            return t.detach().clone()
        if isinstance(t, list | tuple):
            return type(t)(own(x) for x in t)
        return t

    return own(out)


def _is_float(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()
