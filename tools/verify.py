"""Correctness trials, run by the judge (the reference worker, where no candidate code is
ever loaded); the candidate runs in its own process behind a :class:`~.remote.RemoteCandidate`.

Each trial builds the reference here and the candidate there from the same seed, gives both
the same fresh weights (sent to the candidate), draws fresh random inputs with this
process's generator (the second call of a trial writes the new values into the candidate's
previous input tensors, so a cache keyed on data pointers returns stale results), runs the
reference here, sends the inputs and the expected output shapes (the candidate's worker
poisons that memory first), and compares what comes back. Outputs are also measured against
a float64 reference, on one call per trial that the candidate cannot tell from the others:
that is how quietly lowered precision is caught.

Memory: besides the models and what they allocate, a call holds the inputs, one pristine
copy of them (keyed fingerprints above 1 GiB) and the two outputs; what the checks compare
across calls (the previous call's outputs, an output read early) are keyed fingerprints, not
copies (:mod:`.fingerprint`). After a float64 reference the judge hands its cached blocks back
to the driver: the candidate's process shares the GPU.
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

from .compare import compare, fp64_agreement, rel_err
from .fingerprint import COPY_BYTES, Fingerprinter, Snapshot
from .memory import MB
from .precision import PrecisionClass
from .remote import RemoteCandidate
from .roofline import tensor_bytes
from .trees import clone, flatten, refill, release

CALLS_PER_TRIAL = 2  # the same instances called twice: catches results cached in self or by data pointer
# inputs over big_bytes (1 GiB): this share of the trials (at least 2), each over billions of values
BIG_INPUT_SHARE = 0.4


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
    inputs: list[Any]


class Verifier:
    def __init__(
        self,
        task: types.ModuleType,
        candidate: RemoteCandidate,
        device: torch.device,
        precision: PrecisionClass,
        big_bytes: int = COPY_BYTES,
    ) -> None:
        self.task = task
        self.big_bytes = big_bytes  # inputs over this get fewer trials (BIG_INPUT_SHARE)
        self.candidate = candidate
        self.device = device
        self.precision = precision
        self.last: Trial | None = None
        self.fingerprints = Fingerprinter(device)
        self.output_spec: list[Any] | None = None  # (shape, dtype) of the reference's outputs
        self.inputs_bytes = 0
        self.pick = random.SystemRandom()  # which call of a trial is compared with float64
        self.reference_changes_inputs = False
        self.drawn_from = 0  # the seed of the last inputs drawn

    def run(self, trials: int, seed: int) -> Verdict:
        """``trials`` fresh model pairs from seeds derived from ``seed``; each pair is called
        twice, the second time with new values written into the same input tensors. Input
        values come from unpredictable seeds, so a candidate cannot replay them."""
        verdict = Verdict(correct=True)
        previous: tuple[Any, Any, bool] | None = None  # (candidate out, reference out, was correct)
        few = max(2, math.ceil(BIG_INPUT_SHARE * trials))  # trials where the inputs pass big_bytes
        for t in range(trials):
            self.last = None  # the previous trial's models and inputs go before the next are built:
            if t:  # a candidate in a reference cycle (a compiled bound method kept in its __dict__)
                gc.collect()  # holds its buffers, say a CUDA graph's static inputs, until collected
            previous = self._trial(t, seed * 7919 + t * 1000, verdict, previous)
            if verdict.cheats or not verdict.correct:
                break
            if self.inputs_bytes > self.big_bytes and t + 1 == few < trials:
                # KernelBench's 4-8 GB inputs: a trial there took 20-30 s (drawing the values on
                # the host, moving them both ways), five of them most of a task's time.
                verdict.notes.append(f"inputs over {self.big_bytes / 2**20:.0f} MB: {few} trials of {trials}")
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
        reference = self._build(trial_seed)
        inputs: list[Any] | None = None
        fp64_call = self.pick.randrange(CALLS_PER_TRIAL)  # never told to the candidate
        for call in range(CALLS_PER_TRIAL):
            inputs = self._inputs(_unpredictable_seed(), reuse=inputs)
            verdict.trials = t + 1
            ok, cand_out, ref_out = self._check_call(reference, inputs, call > 0, verdict)
            if not ok:
                verdict.correct = False
                verdict.message = f"trial {t + 1}, call {call + 1}: {verdict.message}"
                if previous is None:  # call once more, to tell a constant output from a wrong one
                    previous = (self.fingerprints.of(cand_out), self.fingerprints.of(ref_out), False)
                    del cand_out, ref_out
                    inputs = self._inputs(_unpredictable_seed(), reuse=inputs)
                    _, cand_out, ref_out = self._check_call(reference, inputs, True, Verdict(True))
                verdict.cheats += _classify_repeat(self.fingerprints, cand_out, ref_out, previous)
                return previous
            if call == fp64_call:
                self._fp64_errors(reference, inputs, cand_out, ref_out, verdict)
            previous = (self.fingerprints.of(cand_out), self.fingerprints.of(ref_out), ok)
            del cand_out, ref_out
            self.last = Trial(reference, inputs)
        return previous

    def memory_figures(self) -> dict[str, float]:
        """The Result's memory figures known after verification (MB)."""
        return dict(inputs_mb=self.inputs_bytes / MB, outputs_mb=self.output_bytes() / MB)

    def output_bytes(self) -> int:
        return sum(math.prod(s[0]) * s[1].itemsize for s in self.output_spec or [] if s is not None)

    def fresh_inputs(self) -> list[Any]:
        """A new set of input values, drawn like the trials' (for timing)."""
        return self._inputs(_unpredictable_seed(), reuse=None)

    def recheck(
        self, candidate_output: Any, reference: torch.nn.Module, inputs: list[Any], limit: float
    ) -> str:
        """Compare an output the candidate gave on ``inputs`` with the reference's, and its
        error against float64 with ``limit``: the empty string when it passes, else what
        differs. ``inputs`` may be changed: pass values nothing needs afterwards."""
        with torch.no_grad():  # a copy only where the reference writes to its inputs
            expected = reference(*(clone(inputs) if self.reference_changes_inputs else inputs))
        ok, message, _, _ = compare(candidate_output, expected, self.precision)
        if not ok and not _agrees_with_fp64(candidate_output, expected, reference, inputs, self.precision):
            return message
        out64 = _reference64(reference, inputs)
        error = rel_err(candidate_output, out64) if out64 is not None else 0.0
        if error > limit:
            return f"precision lowered: error vs float64 {error:.2e} exceeds {limit:.2e} on a timed call"
        return ""

    def _check_call(
        self, reference: torch.nn.Module, inputs: list[Any], reuse: bool, verdict: Verdict
    ) -> tuple[bool, Any, Any]:
        """One call of both models on ``inputs``: (output correct, candidate out, reference out).
        Cheats seen on the way go to ``verdict.cheats``; the failure message to ``verdict.message``."""
        ref_out, ref_changed = self._reference_call(reference, inputs)
        cand_out = self.candidate.call(inputs, reuse, self.output_spec or [])
        if self.candidate.inputs_changed and not ref_changed:
            verdict.cheats.append("inputs modified in place (the reference leaves them unchanged)")
        ok, message, abs_err, rel_err = compare(cand_out, ref_out, self.precision)
        note = _agrees_with_fp64(cand_out, ref_out, reference, inputs, self.precision) if not ok else ""
        if note:
            ok, message = True, ""
            verdict.notes.append(note)
        verdict.max_abs_err = max(verdict.max_abs_err, abs_err)
        verdict.max_rel_err = max(verdict.max_rel_err, rel_err)
        verdict.message = message
        return ok, cand_out, ref_out

    def _build(self, seed: int) -> torch.nn.Module:
        """The reference from ``seed``; the candidate is built from the same seed in its own
        process and, when its state has the same names and shapes, given the same fresh weights."""
        init = self.task.get_init_inputs()
        # Built on the device (weights drawn there: fast for large models), in training
        # mode as KernelBench runs them (BatchNorm uses batch statistics).
        with torch.device(self.device):
            torch.manual_seed(seed)
            reference = self.task.Model(*init).to(self.device)
        cand_state = self.candidate.build(list(init), seed)
        ref_state = reference.state_dict()
        if ref_state.keys() == cand_state.keys() and all(
            list(ref_state[k].shape) == cand_state[k] for k in ref_state
        ):
            _fresh_weights(reference, seed)
            self.candidate.load_state(reference.state_dict())
        return reference

    def _inputs(self, seed: int, reuse: list[Any] | None) -> list[Any]:
        self.drawn_from = seed
        torch.manual_seed(seed)
        with torch.device(self.device):
            fresh = [x.to(self.device) if isinstance(x, torch.Tensor) else x for x in self.task.get_inputs()]
        self.inputs_bytes = tensor_bytes(fresh)
        if reuse is None:
            return fresh
        return [  # same storage, new values
            refill(old, new) if isinstance(old, torch.Tensor) else old
            for old, new in zip(reuse, fresh, strict=True)
        ]

    def _reference_call(self, reference: torch.nn.Module, inputs: list[Any]) -> tuple[Any, bool]:
        """The reference's output on ``inputs`` and whether it changed them (they are then
        restored: the candidate gets the same values)."""
        before = Snapshot(inputs, self.fingerprints)
        with torch.no_grad():
            out = reference(*inputs)
        _sync(self.device)
        self.output_spec = [_spec(t) for t in flatten(out)]
        changed = not before.matches(inputs)
        self.reference_changes_inputs |= changed
        if changed:
            out = own_storage(out, inputs)  # an output that is a view of the inputs
            if before.copy is not None:
                for target, source in zip(inputs, before.copy, strict=True):
                    if isinstance(target, torch.Tensor):
                        target.copy_(source)
            else:  # fingerprinted (multi-GB): the same draw again, into the same tensors
                inputs[:] = self._inputs(self.drawn_from, reuse=inputs)
                if not before.matches(inputs):
                    raise RuntimeError(
                        "the task's get_inputs() draws other values from the same seed, and its Model "
                        "changes its multi-GB inputs in place: kforge cannot restore them for the "
                        "candidate; draw the inputs from torch's generator only"
                    )
        return out, changed

    def _fp64_errors(
        self, reference: torch.nn.Module, inputs: list[Any], cand_out: Any, ref_out: Any, verdict: Verdict
    ) -> None:
        missed: list[str] = []
        out64 = _reference64(reference, inputs, missed)
        verdict.notes += missed
        if out64 is None:
            return  # an op without float64 support: no float64 figures for this task
        cand_err, ref_err = rel_err(cand_out, out64), rel_err(ref_out, out64)
        verdict.fp64_rel_err = max(verdict.fp64_rel_err or 0.0, cand_err)
        verdict.ref_fp64_rel_err = max(verdict.ref_fp64_rel_err or 0.0, ref_err)
        del out64
        release(self.device)


def _agrees_with_fp64(
    cand_out: Any, ref_out: Any, reference: torch.nn.Module, inputs: list[Any], precision: PrecisionClass
) -> str:
    """Why the candidate's output is correct against the float64 answer though it missed eager's
    float32 output (``compare.fp64_agreement``), "" when it is not."""
    if not any(isinstance(t, torch.Tensor) and t.is_floating_point() for t in flatten(ref_out)):
        return ""
    out64 = _reference64(reference, inputs)
    return "" if out64 is None else fp64_agreement(cand_out, ref_out, out64, precision)


FP64_MEMORY_NOTE = (
    "no float64 figures on a call where the float64 reference did not fit in GPU memory beside the "
    "candidate's process: compared with eager's float32 output only"
)
HOST_FP64_BYTES = 256 * MB  # inputs up to this get their float64 answer on the CPU when the GPU has no room


def _reference64(reference: torch.nn.Module, inputs: list[Any], missed: list[str] | None = None) -> Any:
    """The reference's output computed in float64 (a copy of it, on float64 inputs), or None
    for a model with an op that has no float64 kernel.

    Out of GPU memory (the candidate's process shares the GPU, and may fill it to switch this
    check off): computed on the CPU for inputs up to HOST_FP64_BYTES, brought back to their
    device; for larger ones (KernelBench's 7 GB InstanceNorm) None, with FP64_MEMORY_NOTE in
    ``missed``."""
    try:
        return _forward64(reference, inputs)
    except torch.OutOfMemoryError:
        out_of_memory = True
    except (RuntimeError, TypeError, NotImplementedError):
        out_of_memory = False
    release(torch.device("cuda"))  # what the failed forward allocated, back to the driver
    if not out_of_memory:
        return None
    device = next((x.device for x in flatten(inputs) if isinstance(x, torch.Tensor)), None)
    if device is not None and tensor_bytes(inputs) <= HOST_FP64_BYTES:
        try:
            on_host = _forward64(copy.deepcopy(reference).cpu(), clone(inputs, to=torch.device("cpu")))
            return clone(on_host, to=device)
        except (RuntimeError, TypeError, NotImplementedError):
            pass
    if missed is not None:
        missed.append(FP64_MEMORY_NOTE)
    return None


def _forward64(reference: torch.nn.Module, inputs: list[Any]) -> Any:
    ref64 = copy.deepcopy(reference).double()
    with torch.no_grad():
        return ref64(*[x.double() if _is_float(x) else x for x in inputs])


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
