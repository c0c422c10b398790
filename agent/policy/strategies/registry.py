"""Every strategy family in one place: what applies to a task, the tuned variants of a
winner, and the candidate source of a Spec."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from ....tools import fx_source
from ....tools.task import Task
from ..features import TaskFeatures, meta_instance
from . import (
    compile_modes,
    conv,
    corpus_kernels,
    cuda_graph,
    fx_attention,
    fx_rewrite,
    hgemm_tuned,
    precision,
    templates,
    tf32x3,
)
from .runners import ON_DEVICE_PRELUDE, forward_code, runner_code
from .source import REFERENCE_BODY, Body, Spec, render

# The fixed order a planner without a cost model would use (and the ranker's fallback).
DEFAULT_ORDER = (
    "fx-rewrite",
    "fx-rewrite-compile",
    "tf32x3-gemm",
    "hgemm-tuned",
    "compile-default",
    "compile-cpp-wrapper",
    "cudnn-compile",
    "cuda-graph",
    "compile-reduce-overhead",
    "compile-graph",
    "corpus-triton",
    "triton-template",
    "cudnn-benchmark",
    "channels-last",
    "compile-max-autotune-no-cudagraphs",
    "compile-max-autotune",
    "tf32x3-conv",  # measured on 8 KernelBench conv tasks: 1.13-1.29x on 5, 0.77-0.96x on 3
    "compile-nchw",  # measured alone on 41 KernelBench conv tasks: 1.24x over eager, 1.16x over compile
    "tf32",
    "bf16",
)


@dataclasses.dataclass
class TaskAnalysis:
    """What the strategies need to know about one task, computed once per run."""

    features: TaskFeatures
    fx: tuple[Body, list[str]] | None = None
    gemm3: tuple[Body, list[str]] | None = None  # the forward with its GEMMs on the 3xTF32 kernel
    gemm3_plain: tuple[Body, list[str]] | None = None  # ... its decomposed relative positions left as written
    conv3: tuple[Body, list[str]] | None = None  # ... with its Conv2d layers on the 3xTF32 kernel
    templates: tuple[Body, list[str]] | None = None  # ... with norms and losses on the Triton templates
    corpus: tuple[str, dict[str, Any]] | None = None
    hgemm: tuple[int, int, int] | None = None  # (M, N, K) of a forward that is one fp16 a @ b
    params: list[str] = dataclasses.field(default_factory=list)  # forward's argument names
    notes: list[str] = dataclasses.field(default_factory=list)  # why a family does not apply
    views: bool = False  # the forward reshapes with .view(), which channels-last layouts break


def analyse_task(task: Task, features: TaskFeatures) -> TaskAnalysis:
    analysis = TaskAnalysis(features=features, views=".view(" in task.source)
    if compile_modes.too_big_to_autotune(features):
        analysis.notes.append(
            f"max-autotune skipped: {features.launches} ops to autotune (limit {compile_modes.MAX_AUTOTUNE_OPS})"
        )
    if features.error:
        analysis.notes.append(f"no FX analysis: {features.error}")
        return analysis
    try:
        model, inputs = meta_instance(task.path)
        buffers = functools.cache(functools.partial(fx_attention.real_buffers, task.path, model))
        written = functools.partial(_written, analysis.notes)
        analysis.fx = written(lambda: fx_rewrite.rewrite(model, inputs, buffers=buffers))
        analysis.gemm3 = written(lambda: tf32x3.rewrite(model, inputs, buffers))
        if analysis.gemm3 is not None and tf32x3.reads_relpos(analysis.gemm3[0]):
            analysis.gemm3_plain = written(lambda: tf32x3.rewrite(model, inputs, buffers, decomposed=False))
        analysis.conv3 = written(lambda: tf32x3.rewrite_convs(model, inputs, buffers))
        analysis.templates = written(lambda: templates.rewrite(model, inputs, buffers))
        analysis.corpus = corpus_kernels.match(model, inputs)
        gemm = hgemm_tuned.match(model, inputs)
        analysis.hgemm = gemm[0] if gemm is not None else None
        graph = fx_source.trace(model, meta_inputs=inputs).graph
        analysis.params = [n.name for n in graph.nodes if n.op == "placeholder"]
    except Exception as err:  # tracing the task's code: a failure only rules out these families
        analysis.notes.append(f"no FX trace ({type(err).__name__}): rewrites and prior kernels skipped")
    return analysis


def _written(notes: list[str], rewrite: Callable[[], Any]) -> Any:
    """``rewrite()``, or None with the reason in ``notes`` (once) where its forward cannot be
    written as code: DiT's dropped every rewrite without a word (unseen9)."""
    try:
        return rewrite()
    except fx_rewrite.Unwritable as err:
        note = f"FX rewrites not offered: {err}"
        if note not in notes:
            notes.append(note)
        return None


# On a CPU, Triton kernels run in the interpreter: tasks moving more than this are too slow there.
INTERPRETER_MAX_BYTES = 4e6


def base_specs(analysis: TaskAnalysis, precision_class: str, device: str) -> list[Spec]:
    features = analysis.features
    specs: list[Spec] = []
    if analysis.fx is not None:
        fired = analysis.fx[1]
        specs += [fx_rewrite.spec(fired), fx_rewrite.spec(fired, runner="compile")]
    if precision_class == "fp32" and device == "cuda":  # with tf32 allowed, plain TF32 is faster
        if analysis.gemm3 is not None:
            specs.append(compiled_kernels(tf32x3.spec(analysis.gemm3[1]), features))
        if analysis.conv3 is not None:
            specs.append(compiled_kernels(tf32x3.conv_spec(analysis.conv3[1]), features))
    triton = [
        name
        for name, found in (
            ("prior Triton kernels", analysis.corpus),
            ("the Triton GEMM", analysis.hgemm),
            ("the Triton templates", analysis.templates),
        )
        if found
    ]
    if triton and device != "cuda" and analysis.features.min_bytes > INTERPRETER_MAX_BYTES:
        note = (
            f"{' and '.join(triton)} skipped on the CPU: Triton runs there only in its interpreter, and "
            f"{analysis.features.min_bytes / 1e6:.3g} MB would take minutes a call (limit {INTERPRETER_MAX_BYTES / 1e6:g} MB)"
        )
        if note not in analysis.notes:
            analysis.notes.append(note)
    elif triton:
        if analysis.corpus is not None:
            specs.append(corpus_kernels.spec(analysis.corpus[0], 0))
        if analysis.hgemm is not None:
            specs.append(hgemm_tuned.base(analysis.hgemm, device))
        if analysis.templates is not None:
            specs.append(templates.spec(analysis.templates[1]))
    specs += compile_modes.specs(features, device)
    specs += cuda_graph.specs(features, device)
    specs += conv.specs(features, device, channels_last=not analysis.views)
    specs += precision.specs(features, precision_class, device)
    return _finished(specs, features)


def _finished(specs: list[Spec], features: TaskFeatures) -> list[Spec]:
    """The specs that can run on this forward, each that replays a CUDA graph with the
    forward's own tensors made on the inputs' device where it makes some on the CPU
    (``runners``' device-factories)."""
    if features.host_copies:
        specs = [
            dataclasses.replace(s, flags=(*s.flags, "device-factories"))
            if s.replays_graph and "device-factories" not in s.flags
            else s
            for s in specs
        ]
    return [s for s in specs if runnable(s, features)]


def runnable(spec: Spec, features: TaskFeatures) -> bool:
    """No whole-forward CUDA graph where the forward syncs on its data (``data_dependent``), and
    no torch.compile where compiling the reference itself failed or ran past its time (PointNet++'s
    sampling loop, unseen8: each such candidate would spend the worker's 300 s the same way)."""
    if features.data_dependent and spec.runner in ("cuda-graph", "compile-graph"):
        return False
    return not (features.compile_failed and spec.runner in ("compile", "compile-graph"))


KERNEL_BODIES = ("tf32x3", "tf32x3-plain", "tf32x3-conv")  # bodies that run kforge's own kernels


# The 3xTF32 GEMMs are offered under torch.compile and one CUDA graph: Inductor fuses what lies
# between the kernels, and the graph takes their launches' host time. On the realistic sets
# (H100, 2026-11-26/27) 13 tasks measured the kernels both alone and so composed; composed was
# faster on 12 (median 1.48x, up to 3.9x on Wide & Deep's tower), 0.91x on ViT-L's MLP (under
# compile without a graph). Offered alone, the kernels often lost to compile in round one
# (Wide & Deep 0.80x over eager, DeepFM 0.78x), and with two rounds the composition came too late
# or never (Conformer's layer, 2026-11-27). The 3xTF32 convolutions too: composed they measured
# 1.00x and 1.02x of alone where the convolutions are the time (EfficientNetV2's stage,
# DeepLabV3's ASPP) and 2.15x faster where launches are (HiFi-GAN at batch 1, 5.93 against 12.77
# ms, 1.17x over compile where alone was 0.56x; H100, 2026-11-27); KernelBench's GoogleNet lost
# alone the same way (7.81 ms against eager's 4.00).
def compiled_kernels(spec: Spec, features: TaskFeatures) -> Spec:
    """``spec`` (kforge's kernels run eagerly) under torch.compile's default mode, in one CUDA
    graph unless a graph cannot win or cannot capture the forward."""
    graph = not (features.graph_cannot_win or features.data_dependent)
    if features.compile_failed:  # the kernels alone, in one CUDA graph where it can win
        return dataclasses.replace(spec, runner="cuda-graph" if graph else "eager")
    return dataclasses.replace(spec, runner="compile-graph" if graph else "compile", mode="default")


def kernels_alone(spec: Spec) -> Spec | None:
    """The eager form of a spec that runs kforge's kernels under a compiler (None for any other):
    next round's try where the composed one failed (torch.compile cannot take every forward)."""
    if spec.body not in KERNEL_BODIES or spec.runner == "eager":
        return None
    return dataclasses.replace(
        spec, runner="eager", mode="default", note=f"{spec.note}, without the compiler"
    )


def _compile_variants(spec: Spec, combo: Spec, analysis: TaskAnalysis) -> list[Spec]:
    """Variants of a body under compile's default mode: the C++ wrapper, dynamic outputs where
    the forward has them, one CUDA graph, max-autotune where it can end in time."""
    out: list[Spec] = []
    if "cpp-wrapper" not in spec.flags:  # the same kernels, less host time a call
        out.append(dataclasses.replace(combo, flags=(*spec.flags, "cpp-wrapper")))
    if analysis.features.data_dependent and "dynamic-outputs" not in spec.flags:
        out.append(dataclasses.replace(combo, flags=(*spec.flags, "dynamic-outputs")))
    plain = tuple(f for f in spec.flags if f != "cpp-wrapper")  # the wrapper is the default mode's
    graph = dataclasses.replace(combo, runner="compile-graph", flags=plain)
    # a rewritten body in one graph first: TiSASRec's gathered tables under compile took
    # 1.681 ms, in one graph 1.244 (H200, 2026-11-28); a round tunes with its first variant
    out = [graph, *out] if spec.body == "fx" else [*out, graph]
    # max-autotune only where it can end in an evaluation's time (DIEN's AUGRU and FNFM,
    # unseen7, 3001 and 795 ops: it timed out at 300 s as their third candidate of round 2)
    if not compile_modes.too_big_to_autotune(analysis.features):
        tuned = compile_modes.compile_spec("max-autotune-no-cudagraphs", analysis.features)
        out.append(dataclasses.replace(combo, mode=tuned.mode, flags=(*plain, *tuned.flags)))
    return out


def variants(spec: Spec, analysis: TaskAnalysis, device: str) -> list[Spec]:
    """Tuned variants of a winner, most promising first."""
    out: list[Spec] = []
    combo = dataclasses.replace(spec, family="combo", note=f"tuned from {spec.name}")
    on_gpu = device == "cuda"
    if spec.body.startswith("corpus:"):
        name, variant = spec.body.split(":")[1], int(spec.body.split(":")[2])
        for v in range(variant + 1, corpus_kernels.n_variants(name)):
            out.append(dataclasses.replace(corpus_kernels.spec(name, v), family="combo"))
    if spec.body.startswith("hgemm:") and analysis.hgemm is not None:
        out += [
            dataclasses.replace(v, family="combo") for v in hgemm_tuned.variants(spec, analysis.hgemm, device)
        ]
    # a round tunes its best attempt with the first of these only (Embedded._queue): most promising first
    # SAM's decomposed relative positions on the flash kernel: 0.88x (global) and 0.83x (windowed)
    # of Inductor's attention of the same code, alone (H200, bench_tf32x3_attention.py --relpos,
    # 2026-11-28); the GEMMs' body with that attention left to the compiler goes first
    if spec.body == "tf32x3" and analysis.gemm3_plain is not None and spec.runner != "eager":
        plain = tf32x3.spec(analysis.gemm3_plain[1])
        out.append(dataclasses.replace(combo, body="tf32x3-plain", tag=plain.tag))
    convs_on_cudnn = spec.body != "tf32x3-conv"
    if spec.body in KERNEL_BODIES and spec.runner == "eager" and on_gpu:
        # kforge's kernels under compile and a graph before cuDNN's benchmark mode for the rest:
        # Conformer's 3xTF32 GEMMs winning round 2 would have had theirs on its small depthwise
        # convolution next
        out.append(dataclasses.replace(combo, runner="compile-graph", mode="default"))
    cudnn: list[Spec] = []
    if analysis.features.has_conv and on_gpu and "cudnn-benchmark" not in spec.flags and convs_on_cudnn:
        cudnn.append(dataclasses.replace(combo, flags=(*spec.flags, "cudnn-benchmark")))
    gemms_3x = _gemm_variants(spec, combo, analysis) if on_gpu else []
    # cuDNN's benchmark mode first where kforge's own convolution takes some of the task's
    # convolutions (they are large); else the GEMMs go first: SD 1.5's Transformer2D (two 1 x 1
    # convolutions around attention and a GEGLU MLP) had its CUDA graph tuned with cuDNN's
    # benchmark mode, and its 3xTF32 body never ran (2026-11-27)
    out += cudnn + gemms_3x if analysis.conv3 is not None else gemms_3x + cudnn
    if spec.runner == "eager":
        if on_gpu and spec.body not in ("reference", *KERNEL_BODIES):  # fused around, launched as one graph
            out.append(dataclasses.replace(combo, runner="compile-graph", mode="default"))
        out.append(dataclasses.replace(combo, runner="compile", mode="default"))
        if on_gpu:
            out.append(dataclasses.replace(combo, runner="cuda-graph"))
    elif spec.runner == "compile" and spec.mode == "default" and on_gpu:
        out += _compile_variants(spec, combo, analysis)
    elif spec.runner == "cuda-graph":
        out.append(dataclasses.replace(combo, runner="compile-graph", mode="default"))
    alone = kernels_alone(combo)
    if alone is not None:  # Inductor's code around the kernels can lose (ViT-L's MLP: 0.91x)
        out.append(alone)
    # a layout (channels-last, or nchw inside Inductor) for 2D/3D convolutions with none set yet
    if on_gpu and analysis.features.conv_dims in (2, 3) and not {"nchw", "channels-last"} & set(spec.flags):
        if "cudnn-benchmark" in spec.flags and not analysis.views:
            out.append(dataclasses.replace(combo, flags=(*spec.flags, "channels-last")))
        if spec.runner in ("compile", "compile-graph"):
            out.append(dataclasses.replace(combo, flags=(*spec.flags, "nchw")))
    return _finished(out, analysis.features)


def _gemm_variants(spec: Spec, combo: Spec, analysis: TaskAnalysis) -> list[Spec]:
    """The reference or the algebraic rewrites (the 3xTF32 body has them too) won under a
    compiler or a CUDA graph: the same with the GEMMs on 3xTF32, under torch.compile and one
    CUDA graph first (the kernels' launches cost host time that Inductor's own code does not:
    T5's block, H100: 1.16 ms under compile, 0.51 ms of it on the GPU), then under the
    winner's runner. The winner's runner fuses the rest; 3xTF32 takes the GEMMs."""
    if analysis.gemm3 is None or spec.body not in ("reference", "fx") or spec.runner == "eager":
        return []
    if {"tf32", "bf16"} & set(spec.flags):
        return []
    gemms = tf32x3.spec(analysis.gemm3[1])
    kernels = dataclasses.replace(combo, body=gemms.body, tag=gemms.tag)
    graphed = dataclasses.replace(kernels, runner="compile-graph", mode=spec.mode or "default")
    return [graphed] if spec.runner == "compile-graph" else [graphed, kernels]


def body_of(spec: Spec, analysis: TaskAnalysis) -> Body:
    if spec.body == "fx" and analysis.fx is not None:
        return analysis.fx[0]
    if spec.body == "tf32x3" and analysis.gemm3 is not None:
        return analysis.gemm3[0]
    if spec.body == "tf32x3-plain" and analysis.gemm3_plain is not None:
        return analysis.gemm3_plain[0]
    if spec.body == "tf32x3-conv" and analysis.conv3 is not None:
        return analysis.conv3[0]
    if spec.body == "triton-template" and analysis.templates is not None:
        return analysis.templates[0]
    if spec.body.startswith("corpus:") and analysis.corpus is not None:
        variant = int(spec.body.split(":")[2])
        return corpus_kernels.body(analysis.corpus[0], analysis.corpus[1], variant, analysis.params)
    if spec.body.startswith("hgemm:") and analysis.hgemm is not None:
        return hgemm_tuned.body(spec.body.removeprefix("hgemm:"), analysis.params)
    if spec.body != "reference":
        raise ValueError(f"{spec.name}: body {spec.body!r} does not apply to this task")
    return REFERENCE_BODY


def build(task: Task, spec: Spec, analysis: TaskAnalysis) -> str:
    """The candidate source for ``spec``."""
    body = body_of(spec, analysis)
    preludes = [body.prelude] if body.prelude else []
    if "channels-last" in spec.flags:
        preludes.append(conv.PRELUDE)
    if "nchw" in spec.flags:
        preludes.append(conv.NCHW_PRELUDE)
    if "bf16" in spec.flags:
        preludes.append(precision.PRELUDE)
    if "device-factories" in spec.flags:
        preludes.append(ON_DEVICE_PRELUDE)
    body = Body(method=body.method, prelude="\n\n".join(p.strip("\n") for p in preludes))
    return render(task.source, spec, body, runner_code(spec), forward_code(spec))


def _base_families() -> dict[str, str]:
    specs = [compile_modes.compile_spec(mode) for mode in compile_modes.MODES]
    specs += [
        compile_modes.CPP_WRAPPER,
        compile_modes.DYNAMIC_OUTPUTS,
        cuda_graph.CUDA_GRAPH,
        cuda_graph.COMPILE_GRAPH,
        conv.CUDNN,
        conv.CUDNN_COMPILE,
        conv.CHANNELS_LAST,
        conv.COMPILE_NCHW,
    ]
    specs += [precision.TF32, precision.BF16]
    return {spec.name: spec.family for spec in specs}


BASE_FAMILIES = _base_families()


OFFERED_RUNNERS = ("compile-default+cuda-graph", "compile-default")


def family_of(strategy: str) -> str:
    """The ranker family of a strategy name ("combo" for tuned variants). The aten-convs flag
    only keeps Inductor's autotuning on cuDNN and cuBLAS, and device-factories only lets a
    graph capture the forward: the family is the one without them."""
    if "device-factories+" in strategy:
        return family_of(strategy.replace("device-factories+", ""))
    if strategy.startswith("aten-convs+"):
        return family_of(strategy.removeprefix("aten-convs+"))
    if strategy.startswith("fx-rewrite["):
        return "fx-rewrite" if strategy.endswith("]") else "fx-rewrite-compile"
    for family in ("tf32x3-gemm", "tf32x3-conv", "triton-template"):
        if strategy.startswith(family):
            runner = strategy.partition("+")[2]
            offered = family != "triton-template" and runner in OFFERED_RUNNERS  # compiled_kernels's forms
            return family if not runner or offered else "combo"
    if strategy.startswith("corpus:"):
        return "corpus-triton" if strategy.count("+") == 0 else "combo"
    if strategy.startswith("hgemm["):
        return hgemm_tuned.FAMILY if "+" not in strategy else "combo"
    return BASE_FAMILIES.get(strategy, "combo")
