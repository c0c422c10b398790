"""A short host path for kforge's own kernels: an autotuned Triton kernel, and the function
candidates call.

Triton's autotuner costs host time on every call (the key built from the arguments, the cache
looked up: 11 us of the 84 us a LayerNorm took through ``kforge::norm`` on an H100, against
17 us of GPU time; ``bench/bench_templates.py --overhead``). ``Tuned`` lets the autotuner choose
once per key, then launches the kernel with that configuration directly. Under
``TRITON_INTERPRET=1`` it launches the kernel with the fixed configuration given.

``Direct`` launches a Triton kernel through the compiled kernel's own launcher once Triton has
compiled it for the arguments' specialization (their types, 16-byte alignment, ints equal to 1
or divisible by 16): Triton's ``kernel[grid](...)`` path builds a cache key as a string on every
call. Any change of specialization, a launch hook (a profiler's) or an interpreter goes through
Triton's path.

``eager_or_op`` registers a kernel's function as a custom op, which torch.compile needs to keep
one graph, and gives the function candidates call: the op under compile, the function itself in
eager (the op's dispatch cost 28 us a call there).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Hashable
from typing import Any, ParamSpec, TypeVar

import torch
import triton

try:  # Triton's own specialization of one argument (3.4 and later): the direct path's key
    from triton import knobs as _knobs
    from triton._C.libtriton import native_specialize_impl as _specialize
    from triton.backends.compiler import BaseBackend as _Backend
except ImportError:  # pragma: no cover - an older Triton: every launch through kernel[grid]
    _specialize = None

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
_device: Any = getattr(torch._C, "_cuda_getDevice", None)  # the current device and its stream, as
_stream: Any = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # Triton's launch reads them
Grid = Callable[[dict[str, Any]], tuple[int, ...]]
P = ParamSpec("P")
R = TypeVar("R")


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for ints: ``triton.cdiv`` in plain Python (in Triton 3.9 that is a
    constexpr function, 5 us a call through its wrapper on the host)."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The least power of two >= n (0 for 0), as ``triton.next_power_of_2``."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


def _hooked(hook: Any) -> bool:
    """Whether a launch hook is set: a function, or Triton's chain of them with one in it."""
    return hook is not None and bool(getattr(hook, "calls", True))


class Direct:
    """A Triton kernel launched through its compiled launcher (the module's docstring)."""

    def __init__(self, kernel: Any) -> None:
        """``kernel``: a ``@triton.jit`` function whose parameters are the positional arguments
        of each call, then its constexprs (passed by name)."""
        self.kernel = kernel
        self.names: list[str] = list(getattr(kernel, "arg_names", []))
        self.compiled: dict[Hashable, Any] = {}
        self.enabled = None not in (_specialize, _device, _stream) and not INTERPRETED and bool(self.names)

    def __call__(self, grid: tuple[int, ...], *args: Any, **meta: Any) -> None:
        """``kernel[grid](*args, **meta)``; ``meta``: the constexprs by name, and Triton's
        options (``num_warps``, ``num_stages``)."""
        self.launch(grid, args, meta, tuple(meta.items()))

    def launch(
        self, grid: tuple[int, ...], args: tuple[Any, ...], meta: dict[str, Any], items: Hashable
    ) -> None:
        """As a call, with ``items`` = ``tuple(meta.items())`` given (a caller that keeps it)."""
        if (
            not self.enabled
            or _hooked(_knobs.runtime.launch_enter_hook)
            or _hooked(_knobs.runtime.launch_exit_hook)
        ):
            self.kernel[grid](*args, **meta)
            return
        device = _device()
        key = (device, items, *[_specialize(_Backend, a, False, True, True) for a in args])
        entry = self.compiled.get(key)
        if entry is None:  # Triton compiles (or finds) and launches it; the next call is direct
            self.compiled[key] = self._entry(self.kernel[grid](*args, **meta), len(args), meta)
            return
        if not entry:  # a parameter left to its default: always through Triton
            self.kernel[grid](*args, **meta)
            return
        run, function, packed, constexprs = entry
        g1 = grid[1] if len(grid) > 1 else 1
        g2 = grid[2] if len(grid) > 2 else 1
        run(grid[0], g1, g2, _stream(device), function, packed, None, None, None,
            *args, *constexprs)  # fmt: skip

    def _entry(self, compiled: Any, n_args: int, meta: dict[str, Any]) -> tuple[Any, ...]:
        """What a direct launch needs of Triton's compiled kernel: () where a parameter after
        the positional ones is not in ``meta`` (its default would be dropped) or none came back."""
        rest = self.names[n_args:]
        if compiled is None or any(name not in meta for name in rest):
            return ()
        return compiled.run, compiled.function, compiled.packed_metadata, tuple(meta[name] for name in rest)


class Tuned:
    def __init__(
        self,
        kernel: Any,
        configs: list[triton.Config],
        key: list[str],
        interpreted: dict[str, Any],
        prune: Callable[..., list[triton.Config]] | None = None,
    ) -> None:
        """``key``: the autotuner's key (argument names); ``interpreted``: the meta-parameters
        used under the interpreter, where nothing is tuned; ``prune(configs, args, **constexprs)``:
        the configurations worth timing for a call (Triton's ``early_config_prune``)."""
        self.direct = Direct(kernel)
        by = None if prune is None else {"early_config_prune": prune}
        self.tuner = (
            None if INTERPRETED else triton.autotune(configs=configs, key=key, prune_configs_by=by)(kernel)
        )
        self.interpreted = interpreted
        # key -> (the launch's meta-parameters: the constexprs and the autotuner's choice, their items)
        self.chosen: dict[Hashable, tuple[dict[str, Any], Hashable]] = {}

    def __call__(self, key: Hashable, grid: Grid, *args: Any, **constexprs: Any) -> None:
        """Launch over ``grid(meta)``; ``key`` must tell apart every call the autotuner's key
        and the constexprs would (it names the configuration chosen for it)."""
        if self.tuner is None:
            meta = {**constexprs, **self.interpreted}
            self.direct(grid(meta), *args, **meta)
            return
        chosen = self.chosen.get(key)
        if chosen is None:
            self.tuner[grid](*args, **constexprs)
            meta = {**constexprs, **self.tuner.best_config.all_kwargs()}
            self.chosen[key] = (meta, tuple(meta.items()))
            return
        meta, items = chosen
        self.direct.launch(grid(meta), args, meta, items)


def eager_or_op(name: str, impl: Callable[P, R], fake: Callable[..., Any]) -> tuple[Any, Callable[P, R]]:
    """(the custom op ``name`` over ``impl`` with ``fake`` for its shapes, the function that
    calls the op under torch.compile and ``impl`` otherwise)."""
    op = torch.library.custom_op(name, impl, mutates_args=())
    op.register_fake(fake)

    @functools.wraps(impl)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        if torch.compiler.is_compiling():
            return op(*args, **kwargs)  # type: ignore[no-any-return]
        return impl(*args, **kwargs)

    return op, call
