"""The candidate's side of an evaluation: the only process that ever loads candidate code.

It never sees the task module, the reference model, the judge's random generator, the
reference outputs or the verdict. It gets the constructor arguments, the weights and the
inputs from the judge over a :class:`~.wire.Channel`, runs ``ModelNew`` and sends its
outputs back; while timed, it times its own calls (it owns its CUDA context) and sends the
times and a checksum of each timed output as *claims* that the judge checks
(:mod:`.claims`). What its guards see (patched timers, threads left running, tensor
subclasses, inputs changed in place, work on a side stream) goes back as observations:
a second line behind the process boundary, believed only against the candidate.
"""

from __future__ import annotations

import gc
import inspect
from pathlib import Path
from typing import Any

import torch

from .checksum import Checksum
from .fingerprint import Fingerprinter, Snapshot
from .guards import PrecisionGuard, ThreadGuard, TimerGuard, check_output_types, set_precision_flags
from .memory import MB, MemoryMeter, allocated_mb, big_tensors
from .quiet import pin_timing_thread, stop_compile_pools
from .runner import short_trace
from .timing import InputSwitcher, Timer
from .trees import refill, release
from .wire import Channel

Guards = tuple[TimerGuard, PrecisionGuard, ThreadGuard]


class CandidateError(Exception):
    """The candidate failed in a way that ends this evaluation (the message says where)."""


class CandidateServer:
    def __init__(self, channel: Channel, spec: dict[str, Any], module: Any, guards: Guards) -> None:
        self.channel = channel
        self.device = torch.device("cuda", 0) if spec["device"] == "cuda" else torch.device("cpu")
        self.timers, self.precision, self.threads = guards
        self.module = module
        self.model: torch.nn.Module | None = None
        self.inputs: list[Any] | None = None
        self.timer = Timer(self.device, spec["timing_trials"])
        self.fingerprints = Fingerprinter(self.device)
        self.meter = MemoryMeter(self.device)
        self.candidate_memory = 0
        self.switcher: InputSwitcher | None = None
        self.checksum: Checksum | None = None
        self.observed: list[str] = []
        self.last_output: Any = None
        self.inputs_changed = False  # by any verified call
        self.lean = False  # inputs over a GiB: see InputSwitcher and Timer.time_many

    def serve(self) -> None:
        """Answer the judge until it says ``exit`` (or goes away)."""
        while True:
            kind, fields, tree = self.channel.recv(self.device)
            if kind == "exit":
                return
            handler = getattr(self, f"on_{kind}", None)
            if handler is None:
                self.channel.send("error", {"message": f"unknown request {kind!r}"})
                continue
            try:
                reply, out = handler(fields, tree)
            except Exception as err:  # the candidate raised: the judge decides what it means
                self.channel.send("error", {"message": short_trace(err)})
                continue
            self.channel.send("ok", reply, out)
            if self.lean or kind == "call":  # the judge computes or times its side next: it needs the
                tree = out = None  # memory this process holds cached (an output sent, a call's temporaries)
                release(self.device)

    def on_build(self, fields: dict[str, Any], init: Any) -> tuple[dict[str, Any], Any]:
        """ModelNew(*init) from the judge's seed; its state's names and shapes go back. The
        previous trial's model goes first: one in a reference cycle (a compiled bound method or
        a CUDA graph kept in its __dict__) would otherwise hold its buffers until collected."""
        if self.model is not None:
            self.model = self.inputs = self.last_output = None
            gc.collect()
        model_new = getattr(self.module, "ModelNew", None)
        if not isinstance(model_new, type) or not issubclass(model_new, torch.nn.Module):
            return {"format_error": "ModelNew is not a torch.nn.Module subclass"}, None
        try:
            inspect.signature(model_new).bind(*init)
        except TypeError as err:
            return {"format_error": f"ModelNew's constructor does not take Model's arguments: {err}"}, None
        with torch.device(self.device), self.threads.watching():
            torch.manual_seed(int(fields["seed"]))
            model = model_new(*init)
        self.model = model.to(self.device)
        state = self.model.state_dict()
        return {"state": [[k, list(v.shape)] for k, v in state.items()]}, None

    def on_load_state(self, fields: dict[str, Any], values: Any) -> tuple[dict[str, Any], Any]:
        model = self._model()
        state = dict(zip(fields["keys"], values, strict=True))
        model.load_state_dict(state)
        return {}, None

    def on_call(self, fields: dict[str, Any], inputs: Any) -> tuple[dict[str, Any], Any]:
        """One call on the judge's inputs; with ``reuse`` the values go into the previous
        call's tensors (same memory: a cache keyed on data pointers sees new values)."""
        model = self._model()
        if fields.get("reuse") and self.inputs is not None:
            for i, (old, new) in enumerate(zip(self.inputs, inputs, strict=True)):
                if isinstance(old, torch.Tensor):
                    self.inputs[i] = refill(old, new)
        else:
            self.inputs = list(inputs)
        before = Snapshot(self.inputs, self.fingerprints)
        release(self.device)  # the last call's cached blocks: the judge's float64 reference needs the room
        _poison_allocator(fields.get("spec") or [], self.device)
        held = self.meter.start_region()
        with torch.no_grad(), self.threads.watching():
            out = model(*self.inputs)
        if self.device.type == "cuda":
            torch.cuda.current_stream().synchronize()  # the caller's stream only
        early = self.fingerprints.of(out)
        _sync(self.device)
        self.candidate_memory = max(self.candidate_memory, self.meter.region_peak() - held)
        notes = check_output_types(out, self.device)
        if early != self.fingerprints.of(out):
            notes.append("work on a side stream: the output was unfinished when the caller's stream finished")
        changed = not before.matches(self.inputs)
        self.inputs_changed |= changed
        return {"observed": notes, "inputs_changed": changed}, out

    def on_timing_sets(self, fields: dict[str, Any], sets: Any) -> tuple[dict[str, Any], Any]:
        """The two input sets the timed calls alternate between, and the checksum's seed."""
        if self.inputs is None:
            raise CandidateError("timing before any verified call")
        self.lean = bool(fields.get("lean"))  # the judge's call: its inputs are these, in size
        swap = self.lean and not self.inputs_changed
        self.switcher = InputSwitcher(self.inputs, list(sets[0]), list(sets[1]), swap=swap)
        self.checksum = Checksum(int(fields["checksum_seed"]), self.device)
        stop_compile_pools()
        return {"timing_cpu": pin_timing_thread()}, None

    def on_warm(self, fields: dict[str, Any], _: Any) -> tuple[dict[str, Any], Any]:
        for _ in range(int(fields["calls"])):
            self._timed_call()
        _sync(self.device)
        return {}, None

    def on_block(self, fields: dict[str, Any], _: Any) -> tuple[dict[str, Any], Any]:
        """A block of timed calls: (claimed ms, checksum, input set) of each."""
        if self.switcher is None or self.checksum is None:
            raise CandidateError("a timed block before the timing sets")
        switcher, checksum = self.switcher, self.checksum
        sums: list[Any] = []
        used: list[int] = []
        self.last_output = None  # the timer holds one output at a time (Timer._one); so do we

        def after(output: Any) -> None:
            sums.append(checksum.of(output))
            used.append(switcher.turn)

        times = self.timer.run_block(self._timed_call, switcher, int(fields["size"]), after)
        self.last_output = self.timer.last_output
        return {"times_ms": times, "checksums": sums, "sets": used}, None

    def on_last_output(self, fields: dict[str, Any], _: Any) -> tuple[dict[str, Any], Any]:
        turn = self.switcher.turn if self.switcher is not None else -1
        return {"set": turn}, self.last_output

    def on_timing_done(self, fields: dict[str, Any], _: Any) -> tuple[dict[str, Any], Any]:
        """The rounds are over and the last output fetched: the spare set and that output go
        (only the inputs are called again), room for the judge's recheck of that output."""
        if self.switcher is not None:
            self.switcher.keep(self.switcher.turn)
        self.last_output = self.timer.last_output = None
        return {}, None

    def on_escaped(self, fields: dict[str, Any], _: Any) -> tuple[dict[str, Any], Any]:
        repeats = fields.get("repeats", 5)
        repeats = min(max(repeats, 1), 64) if isinstance(repeats, int) else 5
        return {"ms": self.timer.escaped_ms(self._timed_call, repeats)}, None

    def on_ping(self, fields: dict[str, Any], _: Any) -> tuple[dict[str, Any], Any]:
        return dict(fields.get("echo") or {}), None

    def on_report(self, fields: dict[str, Any], _: Any) -> tuple[dict[str, Any], Any]:
        """What the guards saw over the whole evaluation, and the memory figures (with
        ``detail``, the live tensors over a GiB: the judge ran out of memory)."""
        seen = self.timers.violations() + self.precision.violations() + self.threads.violations()
        reply = {
            "observed": list(dict.fromkeys(self.observed + seen)),
            "candidate_memory_mb": self.candidate_memory / MB,
            "peak_memory_mb": self.meter.peak_mb(),
            "allocated_mb": allocated_mb(self.device),
        }
        if fields.get("detail"):
            reply["big_tensors"] = big_tensors(self.device)
        return reply, None

    def _timed_call(self) -> Any:
        with torch.no_grad():
            return self._model()(*(self.inputs or []))

    def _model(self) -> torch.nn.Module:
        if self.model is None:
            raise CandidateError("no model built")
        return self.model


def run(channel: Channel, spec: dict[str, Any], load: Any) -> None:
    """Import the candidate and serve the judge. An import failure is the first message."""
    channel.send("hello", {"containment": spec.get("containment", [])})  # before its code runs
    set_precision_flags(spec["precision"])
    guards = (TimerGuard(), PrecisionGuard(), ThreadGuard(spec["candidate_path"]))  # before its code runs
    try:
        module = load(Path(spec["candidate_path"]))
    except Exception as err:
        build = type(err).__name__ == "BuildError"
        channel.send("import_failed", {"build_error": build, "message": short_trace(err)})
        return
    server = CandidateServer(channel, spec, module, guards)
    channel.send("ready")
    server.serve()


def _poison_allocator(spec: list[Any], device: torch.device) -> None:
    """Fill blocks the size of each expected output with NaN and free them: the caching
    allocator hands them to the candidate, so elements it never writes read as NaN."""
    for item in spec:
        if item is not None:
            dtype = getattr(torch, item[1])
            if dtype.is_floating_point:
                block = torch.full(item[0], float("nan"), dtype=dtype, device=device)
                del block


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()
