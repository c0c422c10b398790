"""A short host path for kforge's own kernels: an autotuned Triton kernel, and the function
candidates call.

Triton's autotuner costs host time on every call (the key built from the arguments, the cache
looked up: 11 us of the 84 us a LayerNorm took through ``kforge::norm`` on an H100, against
17 us of GPU time; ``bench/bench_templates.py --overhead``). ``Tuned`` lets the autotuner choose
once per key, then launches the kernel with that configuration directly. Under
``TRITON_INTERPRET=1`` it launches the kernel with the fixed configuration given.

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

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
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


class Tuned:
    def __init__(
        self,
        kernel: Any,
        configs: list[triton.Config],
        key: list[str],
        interpreted: dict[str, Any],
    ) -> None:
        """``key``: the autotuner's key (argument names); ``interpreted``: the meta-parameters
        used under the interpreter, where nothing is tuned."""
        self.kernel = kernel
        self.tuner = None if INTERPRETED else triton.autotune(configs=configs, key=key)(kernel)
        self.interpreted = interpreted
        self.chosen: dict[Hashable, dict[str, Any]] = {}

    def __call__(self, key: Hashable, grid: Grid, *args: Any, **constexprs: Any) -> None:
        """Launch over ``grid(meta)``; ``key`` must tell apart every call the autotuner's key
        and the constexprs would (it names the configuration chosen for it)."""
        if self.tuner is None:
            meta = {**constexprs, **self.interpreted}
            self.kernel[grid(meta)](*args, **meta)
            return
        chosen = self.chosen.get(key)
        if chosen is None:
            self.tuner[grid](*args, **constexprs)
            self.chosen[key] = self.tuner.best_config.all_kwargs()
            return
        meta = {**constexprs, **chosen}
        self.kernel[grid(meta)](*args, **meta)


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
