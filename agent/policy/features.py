"""Task features for the planner and the ranker: the ATen ops one forward pass runs (counted
on the meta device, so nothing is allocated), FLOPs and minimal bytes from
:mod:`kforge.tools.roofline`, the roofline position on the detected or assumed GPU, and the
measured eager and torch.compile times when the baseline is known."""

from __future__ import annotations

import dataclasses
import math
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree
from torch.utils._python_dispatch import TorchDispatchMode

from ...tools.hardware import GpuSpec, spec_for
from ...tools.result import Result
from ...tools.roofline import roofline
from ...tools.task import Task, import_file

ASSUMED_GPU = "H100-SXM"
LAUNCH_US = 5.0  # what one kernel launch costs eagerly, host side, in microseconds
LAUNCH_SHARE = 0.25  # launch-bound: launches take more than this share of the eager time
CONV_OPS = ("convolution", "conv1d", "conv2d", "conv3d", "conv_transpose", "cudnn_convolution")
MATMUL_OPS = ("mm", "bmm", "addmm", "matmul", "linear", "baddbmm", "addmv", "mv", "dot", "einsum")
NORM_OPS = ("batch_norm", "layer_norm", "group_norm", "instance_norm", "native_batch_norm")
REDUCE_OPS = (
    "sum",
    "mean",
    "amax",
    "amin",
    "max",
    "min",
    "logsumexp",
    "var",
    "std",
    "norm",
    "softmax",
    "cumsum",
)
RANDOM_OPS = ("bernoulli", "rand", "randn", "randint", "normal", "uniform", "multinomial", "randperm")


MAX_OPS = 3000  # counting stops here: such a forward is launch-bound whatever the rest does
GRAPH_MIN_BYTES = 1 << 30  # graph_cannot_win applies from here (inputs and outputs together)
GRAPH_COPY_MARGIN = 4.0  # a graph's copies this many times the launches' host time: it cannot win
# What the meta device says when a forward's shapes or control flow depend on its data: a
# dispatch by torch.where / nonzero or a boolean mask, repeat_interleave without output_size,
# unique, bincount, masked_select, a value read back (.item(), int(t), .tolist())
DATA_DEPENDENT_ERRORS = (
    "nonzero", "output_size", "Tensor.item()", "_unique", "bincount", "masked_select", "Cannot copy out of meta",
)  # fmt: skip


class TooManyOps(RuntimeError):
    pass


def _reads_host(args: Any, kwargs: Any) -> bool:
    """An op given a CPU tensor of one dimension or more beside a tensor on another device, which
    the dispatcher copies over: SAM's ``rel_pos[idx]`` with ``idx`` from ``torch.arange(n)``, a
    ``copy_`` from the CPU. (A 0-dim CPU tensor enters a CUDA op as a scalar: no copy.)"""
    tensors = [t for t in _pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    host = any(t.device.type == "cpu" and t.dim() > 0 for t in tensors)
    return host and any(t.device.type != "cpu" for t in tensors)


class _OpCounter(TorchDispatchMode):
    """Counts the ATen ops that run, views and metadata ops apart (they launch no kernel)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.total = 0
        self.host_copies = 0  # tensors the forward makes on the CPU and copies to the inputs' device

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten._to_copy.default and args and isinstance(args[0], torch.Tensor):
            to = (kwargs or {}).get("device")
            if args[0].device.type == "cpu" and to is not None and torch.device(to).type != "cpu":
                self.host_copies += 1
        elif _reads_host(args, kwargs):
            self.host_copies += 1
        if not (func.is_view or torch.Tag.view_copy in func.tags):
            self.ops[func.overloadpacket.__name__] += 1
            self.total += 1
            if self.total >= MAX_OPS:
                raise TooManyOps(f"more than {MAX_OPS} ops in one forward")
        return func(*args, **(kwargs or {}))


@dataclasses.dataclass
class TaskFeatures:
    ops: dict[str, int] = dataclasses.field(default_factory=dict)
    launches: int = 0
    flops: float = 0.0
    min_bytes: float = 0.0
    floor_ms: float | None = None
    bound: str = "memory"
    gpu: str | None = None
    gpu_assumed: bool = False  # no GPU figures here (a CPU run): the floor is the assumed GPU's
    measured_on: str | None = None  # where eager_ms and compile_ms were measured
    conv_dims: int = 0  # 1, 2 or 3 for the largest convolution input; 0 without convolutions
    eager_ms: float | None = None
    compile_ms: float | None = None
    random: bool = False  # draws random numbers (dropout with p > 0): no candidate can match it
    error: str = ""  # why the op count is missing, when it is
    compile_failed: bool = False  # torch.compile of the reference failed or ran out of time (baseline)
    host_copies: int = 0  # tensors made on the CPU in the forward and copied over (``.to``, an index)

    def has(self, names: tuple[str, ...]) -> bool:
        return any(any(n in op for n in names) for op in self.ops)

    @property
    def has_conv(self) -> bool:
        return self.conv_dims > 0 or self.has(CONV_OPS)

    @property
    def has_matmul(self) -> bool:
        return self.has(MATMUL_OPS)

    @property
    def launch_bound(self) -> bool:
        """Kernel launches are a large share of the forward's time: CUDA graphs pay off. With
        a measured eager time, a quarter of it; without, twice the roofline floor. (A short
        forward is not launch-bound by being short: one 0.05 ms multiply is memory-bound, and
        a graph's input copies double its traffic.)"""
        launch_ms = self.launches * LAUNCH_US * 1e-3
        if self.eager_ms is not None:
            return launch_ms > LAUNCH_SHARE * self.eager_ms
        floor = self.floor_ms if self.floor_ms is not None else 0.0
        return launch_ms > 2.0 * floor

    @property
    def graph_cannot_win(self) -> bool:
        """A CUDA graph copies the inputs into its static buffers and its outputs out on every
        call: about twice the task's bytes of extra traffic, for at most the launches' host time
        saved. Past a GiB, where that traffic takes GRAPH_COPY_MARGIN times the launches, a
        graph cannot win, and its static copies beside the judge's and the worker's can run the
        GPU out of memory. On an H100 (2026-11-27, KernelBench): L1 92's 4 GB cumsum took
        10.4 ms under reduce-overhead and 4.0 under compile; L1 98's KL divergence (2 GB) 2.5
        and 0.8; L1 34's InstanceNorm (7 GB) ran out of memory under a CUDA graph."""
        if self.min_bytes < GRAPH_MIN_BYTES:
            return False
        gbps = spec_for(self.gpu or ASSUMED_GPU).peak_gbps or 0.0
        copy_ms = 2.0 * self.min_bytes / (gbps * 1e6) if gbps else 0.0
        return copy_ms > GRAPH_COPY_MARGIN * self.launches * LAUNCH_US * 1e-3

    @property
    def data_dependent(self) -> bool:
        """The forward reads its data back on the host (a size from nonzero or repeat_interleave, an
        ``.item()``): every call syncs, so no CUDA graph captures the whole forward (SchNet's
        readout, unseen7: both graph candidates failed), and torch.compile breaks its graph there
        unless told to capture such ops (Qwen1.5-MoE's 60-expert dispatch: 4 breaks, 20 of its
        1101 ops compiled). The meta device cannot run such a forward: its error says so."""
        return any(k in self.error for k in DATA_DEPENDENT_ERRORS)

    @property
    def compute_bound(self) -> bool:
        return self.bound == "compute" and not self.launch_bound

    def vector(self) -> list[float]:
        """The ranker's inputs, each roughly in [-1, 3]."""
        intensity = self.flops / self.min_bytes if self.min_bytes else 0.0
        compile_gain = (self.eager_ms / self.compile_ms) if self.eager_ms and self.compile_ms else 1.0
        return [
            1.0,
            math.log10(1.0 + self.launches) / 2.0,
            math.log10(1.0 + self.flops) / 12.0,
            math.log10(1.0 + self.min_bytes) / 10.0,
            math.log10(1.0 + intensity) / 3.0,
            float(self.launch_bound),
            float(self.compute_bound),
            float(self.has_conv),
            float(self.has_matmul),
            float(self.has(NORM_OPS)),
            float(self.has(REDUCE_OPS)),
            math.log2(max(compile_gain, 1e-3)),
            math.log10(max(self.eager_ms or 1.0, 1e-3)),
        ]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskFeatures:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


FEATURE_NAMES = [
    "bias", "log_launches", "log_flops", "log_bytes", "log_intensity", "launch_bound", "compute_bound",
    "has_conv", "has_matmul", "has_norm", "has_reduction", "log2_compile_gain", "log_eager_ms",
]  # fmt: skip


def meta_instance(task_path: Path) -> tuple[torch.nn.Module, list[Any]]:
    """The task's Model and inputs built on the meta device (no memory, no compute). A Model
    whose ``__init__`` reads a value back from a tensor it made (Swin's drop-path rates,
    ``[x.item() for x in torch.linspace(...)]``) is built again with the small tensors made from
    numbers on the CPU, then moved to the meta device."""
    module = import_file(task_path, f"kforge_features_{uuid.uuid4().hex[:8]}")
    with torch.device("meta"):
        torch.manual_seed(0)
        try:
            model = module.Model(*module.get_init_inputs())
        except (RuntimeError, NotImplementedError) as err:
            if "meta" not in str(err):
                raise
            with _SmallOnCpu():
                model = module.Model(*module.get_init_inputs()).to("meta")
        inputs = list(module.get_inputs())
    return model, inputs


SMALL_ON_CPU = 1 << 16  # elements: a tensor made from numbers alone that _SmallOnCpu makes on the CPU


class _SmallOnCpu(torch.overrides.TorchFunctionMode):
    """Inside ``torch.device("meta")``: a tensor made from numbers alone (``torch.linspace``,
    ``torch.zeros``) of at most SMALL_ON_CPU elements is made on the CPU, where its values can be
    read; larger ones (the weights) stay on the meta device."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in torch.utils._device._device_constructors() and kwargs.get("device") is None:
            made = func(*args, **{**kwargs, "device": "meta"})
            if isinstance(made, torch.Tensor) and made.numel() <= SMALL_ON_CPU:
                return func(*args, **{**kwargs, "device": "cpu"})
            return made
        return func(*args, **kwargs)


def task_features(
    task: Task, hardware: GpuSpec | None, precision: str, baseline: Result | None
) -> TaskFeatures:
    known = hardware is not None and bool(hardware.peak_gbps)
    features = TaskFeatures(gpu=(hardware.canonical if known and hardware else None) or ASSUMED_GPU)
    features.gpu_assumed = not known
    if baseline is not None:
        features.eager_ms, features.compile_ms = baseline.eager_ms, baseline.compile_ms
        features.compile_failed = baseline.compile_failed
        features.measured_on = (baseline.roofline.gpu if baseline.roofline else None) or baseline.device
    gpu = hardware if known and hardware is not None else spec_for(ASSUMED_GPU)
    counter = _OpCounter()
    try:
        model, inputs = meta_instance(task.path)
        features.random = _random_modules(model)
        with counter:
            roof = roofline(model, inputs, gpu, precision)
    except TooManyOps as err:
        features.ops, features.launches, features.error = dict(counter.ops), counter.total, str(err)
        features.host_copies = counter.host_copies
        return features
    except Exception as err:  # the task's own code on the meta device: any failure only costs features
        features.error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:200]
        return features
    features.ops = dict(counter.ops)
    features.launches = sum(counter.ops.values())
    features.host_copies = counter.host_copies
    features.flops, features.min_bytes = roof.flops, roof.min_bytes
    features.floor_ms, features.bound = roof.floor_ms, roof.bound
    features.conv_dims = max((p.dim() - 2 for p in model.parameters() if p.dim() in (3, 4, 5)), default=0)
    if not features.has(CONV_OPS):
        features.conv_dims = 0
    features.random = features.random or features.has(RANDOM_OPS)
    return features


def _random_modules(model: torch.nn.Module) -> bool:
    """Dropout that is active: the module in training mode (the mode the task's ``Model`` is
    built in is the mode the verifier runs; a task that calls ``self.eval()`` has none)."""
    for m in model.modules():
        if not m.training:
            continue
        if isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0:
            return True
        if isinstance(m, torch.nn.RNNBase) and m.dropout > 0 and m.num_layers > 1:
            return True
        if isinstance(m, torch.nn.MultiheadAttention) and m.dropout > 0:
            return True
    return False
