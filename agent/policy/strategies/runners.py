"""How a candidate runs its body (eagerly, through torch.compile, replayed from a CUDA graph)
and the flags set around each call. Each function returns method source for ModelNew."""

from __future__ import annotations

from .source import CUDAGRAPH_MODES, Spec

EAGER_RUNNER = """\
def _kforge_run(self, *args):
    return self._kforge_body(*args)
"""

COMPILE_RUNNER = """\
def _kforge_run(self, *args):
    fn = self.__dict__.get("_kforge_compiled")
    if fn is None:
        {pre}fn = {compile_call}
        self.__dict__["_kforge_compiled"] = fn
    return {ret}
"""

# Replays one captured graph per input signature. Inputs are copied into the graph's
# static buffers on every call (the caller may write new values into the same tensors)
# and outputs are cloned (the next replay overwrites the graph's output buffers).
GRAPH_RUNNER = """\
def _kforge_run(self, *args):
    if not any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
        return self._kforge_body(*args)
    key = tuple((tuple(a.shape), a.dtype, str(a.device)) if isinstance(a, torch.Tensor) else repr(a) for a in args)
    state = self.__dict__.get("_kforge_graph")
    if state is None or state[0] != key:
        state = self._kforge_capture(args, key)
        self.__dict__["_kforge_graph"] = state
    _, graph, static_in, static_out = state
    for dst, src in zip(static_in, args):
        if isinstance(dst, torch.Tensor):
            dst.copy_(src)
    graph.replay()
    return _kforge_clone(static_out)

def _kforge_capture(self, args, key):
    fn = {target}
    static_in = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn(*static_in)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = fn(*static_in)
    return (key, graph, static_in, static_out)
"""

COMPILED_TARGET = """self.__dict__.get("_kforge_compiled")
    if fn is None:
        {pre}fn = {compile_call}
        self.__dict__["_kforge_compiled"] = fn"""


# "aten-convs": max-autotune benchmarks no Triton conv or GEMM templates: convolutions stay on
# cuDNN, and so do the 1x1 ones Inductor lowers to GEMMs (MobileNet/EfficientNet: in fp32 the
# mm templates ran at 37-43% of cuBLAS and autotuning them outlasted a 150-300 s evaluation).
# Set in the candidate's own worker before its first compile; default-mode compiles ignore it.
ATEN_CONVS = (
    "import torch._inductor.config\n        "
    'torch._inductor.config.max_autotune_conv_backends = "ATEN"\n        '
    'torch._inductor.config.max_autotune_gemm_backends = "ATEN"\n        '
)


# "dynamic-outputs": Dynamo captures ops whose output shape depends on the data (nonzero, a
# boolean mask, repeat_interleave) and scalars read back (.item()) into the graph, where by
# default it breaks the graph at each. Set in the candidate's own worker before its first compile.
CAPTURE_DATA_DEPENDENT = (
    "import torch._dynamo.config\n        "
    "torch._dynamo.config.capture_dynamic_output_shape_ops = True\n        "
    "torch._dynamo.config.capture_scalar_outputs = True\n        "
)


def runner_code(spec: Spec) -> str:
    if spec.runner == "eager":
        return EAGER_RUNNER
    pre = (ATEN_CONVS if "aten-convs" in spec.flags else "") + (
        CAPTURE_DATA_DEPENDENT if "dynamic-outputs" in spec.flags else ""
    )
    if spec.runner == "compile":
        ret = "_kforge_clone(fn(*args))" if spec.mode in CUDAGRAPH_MODES else "fn(*args)"
        return COMPILE_RUNNER.format(pre=pre, compile_call=_compile_call(spec), ret=ret)
    if spec.runner == "cuda-graph":
        return GRAPH_RUNNER.replace("{target}", "self._kforge_body")
    if spec.runner == "compile-graph":
        target = COMPILED_TARGET.format(pre=pre, compile_call=_compile_call(spec))
        return GRAPH_RUNNER.replace("{target}", target)
    raise ValueError(f"unknown runner {spec.runner!r}")


def _compile_call(spec: Spec) -> str:
    """``torch.compile`` of the body, by its mode or Inductor options; under "device-factories"
    through Inductor with the same options, after the traced graph's factories are moved
    (``_kforge_inductor_on_device``)."""
    options = _compile_options(spec)
    if "device-factories" in spec.flags:
        given = options or f"_kforge_mode_options({spec.mode!r})"
        return f"torch.compile(self._kforge_body, backend=_kforge_inductor_on_device({given}))"
    return f"torch.compile(self._kforge_body, {f'options={options}' if options else f'mode={spec.mode!r}'})"


def _compile_options(spec: Spec) -> str | None:
    """Inductor's options where torch.compile needs them instead of its mode: with "nchw" the
    mode's options plus layout_optimization off, for this compile only (torch.compile takes one
    or the other); with "cpp-wrapper" Inductor's C++ wrapper on as well (compile_modes.CPP_WRAPPER).
    None: the mode alone."""
    cpp = "cpp-wrapper" in spec.flags
    if "nchw" in spec.flags:
        return (
            f"{{**_kforge_nchw({spec.mode!r}), 'cpp_wrapper': True}}"
            if cpp
            else f"_kforge_nchw({spec.mode!r})"
        )
    if cpp:
        if spec.mode != "default":  # the other modes' options need torch._inductor imported first
            raise ValueError(f"{spec.name}: the C++ wrapper is built for the default mode only")
        return "{'cpp_wrapper': True}"
    return None


# device-factories: the body runs under this mode, torch.device of the inputs' device (the
# forward's factories without a device made there) and more:
# - the factory calls that name the CPU made there too: RAFT's ``make_coords_grid(b, h, w,
#   device="cpu")``, then ``.to(device)``, which torch.device leaves on the CPU (its graphs failed
#   capture so);
# - left where they are: a factory drawing from a generator (whose device it must share); a
#   ``torch.tensor`` (``as_tensor``, ``asarray``) of one Python number, a 0-dim CPU tensor that
#   a CUDA op reads as a scalar (made on the GPU, it is a copy from pageable memory, which no
#   graph captures: RAFT's ``corr / torch.sqrt(torch.tensor(c))``); a pinned buffer (Inductor's
#   autotuner saves mutated arguments into one while the body runs: "Only dense CPU tensors can
#   be pinned", RAFT's compiled graphs, 2026-11-28). A tensor of a list is made on the device:
#   the FX rewrites' tables (``fx_constants``) are built there once, before a graph's capture.
# A compiled body does not run under the mode. Traced under it, RAFT's and SAM's compiled graphs
# still made factories on the CPU, which Inductor then copied over each call ("Cannot copy
# between CPU and CUDA tensors during CUDA graph capture" at Inductor's ``buf.copy_``; 2026-11-28,
# H200), and on the meta device Dynamo ran SAM's table under the mode as a real tensor. Instead
# the body goes through Inductor by ``_kforge_inductor_on_device``, which moves the factory calls
# of Dynamo's graph, by the mode's rule, onto the device of the graph's first non-CPU input.
ON_DEVICE_PRELUDE = '''
from torch.utils._device import _device_constructors  # not imported with torch itself


class _KforgeOnDevice(torch.overrides.TorchFunctionMode):
    """torch.device(device), the factory calls that name the CPU made there as well."""

    def __init__(self, device):
        super().__init__()
        self.device = device

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _kforge_moves(func, args, kwargs):
            kwargs["device"] = self.device
        return func(*args, **kwargs)


def _kforge_moves(func, args, kwargs):
    """A factory call to make on the inputs' device rather than the CPU."""
    if func not in _device_constructors() or kwargs.get("generator") is not None or kwargs.get("pin_memory"):
        return False
    data = args[0] if args else kwargs.get("data", kwargs.get("obj"))
    if func in (torch.tensor, torch.as_tensor, torch.asarray) and isinstance(data, (bool, int, float, complex)):
        return False
    named = kwargs.get("device")
    return named is None or torch.device(named).type == "cpu"


def _kforge_mode_options(mode):
    import torch._inductor

    return torch._inductor.list_mode_options(mode)


def _kforge_inductor_on_device(options):
    """Inductor with ``options`` (torch.compile's, by mode or given), the traced graph's factory
    calls first moved as the mode moves them, onto the device of its first non-CPU input."""

    def backend(gm, example_inputs):
        from torch._inductor.compile_fx import compile_fx

        _kforge_graph_on_device(gm, example_inputs)
        return compile_fx(gm, example_inputs, config_patches=options)

    return backend


def _kforge_graph_on_device(gm, example_inputs):
    device = next((t.device for t in example_inputs if isinstance(t, torch.Tensor) and t.device.type != "cpu"), None)
    if device is None:
        return gm
    for node in gm.graph.nodes:
        if node.op == "call_function" and _kforge_moves(node.target, node.args, node.kwargs):
            node.kwargs = {**node.kwargs, "device": device}
    gm.recompile()
    return gm
'''


def forward_code(spec: Spec) -> str:
    """``forward``: flags set before the run and restored after it."""
    pre: list[str] = []
    post: list[str] = []
    call = "out = self._kforge_run(*args)"
    # "device-factories": the body runs under ``_KforgeOnDevice`` of its first tensor input, so a
    # tensor the forward makes without a device (``torch.zeros(b, n).to(device)``, the same
    # values) is made there instead of on the CPU and copied over: a copy from pageable host
    # memory cannot be captured in a CUDA graph (PointNet++'s sampling loop, unseen8: every
    # graph candidate failed so), and in eager each such copy waits for the host.
    # A compiled body runs outside it: its factories are moved in Dynamo's graph instead.
    if "device-factories" in spec.flags and spec.runner not in ("compile", "compile-graph"):
        device = "next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device('cpu'))"
        pre += [f"_kforge_factories = _KforgeOnDevice({device})"]
        call = "with _kforge_factories:\n        out = self._kforge_run(*args)"
    if "cudnn-benchmark" in spec.flags:
        pre += ["_kforge_prev = torch.backends.cudnn.benchmark", "torch.backends.cudnn.benchmark = True"]
        post += ["torch.backends.cudnn.benchmark = _kforge_prev"]
    if "channels-last" in spec.flags:
        pre += ["_kforge_channels_last(self)", "args = tuple(_kforge_to_channels_last(a) for a in args)"]
        post += ["out = _kforge_contiguous(out)"]
    if "tf32" in spec.flags:
        pre += ["torch.backends.cuda.matmul.allow_tf32 = True", "torch.backends.cudnn.allow_tf32 = True"]
    if "bf16" in spec.flags:
        pre += [
            "dtype = next((a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()), torch.float32)",
            "_kforge_to_bf16(self)",
            "args = tuple(_kforge_cast(a, torch.bfloat16) for a in args)",
        ]
        post += ["out = _kforge_cast(out, dtype)"]
    lines = ["def forward(self, *args):", *("    " + p for p in pre), "    " + call]
    lines += ["    " + p for p in post]
    lines.append("    return out")
    return "\n".join(lines) + "\n"
