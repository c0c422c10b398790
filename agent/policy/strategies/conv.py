"""Convolutions: cuDNN autotuning (``cudnn.benchmark``, set around the call and restored),
channels-last layouts for the weights and inputs (outputs made contiguous again), and
torch.compile kept on NCHW ("nchw": Inductor's channels-last layout optimization off)."""

from __future__ import annotations

from ..features import TaskFeatures
from .source import Spec

PRELUDE = '''
def _kforge_channels_last(module):
    """Weights of 4D/5D convolutions to channels-last, once (after the weights are loaded)."""
    if module.__dict__.get("_kforge_cl_done"):
        return
    for p in module.parameters():
        if p.dim() == 4:
            p.data = p.data.contiguous(memory_format=torch.channels_last)
        elif p.dim() == 5:
            p.data = p.data.contiguous(memory_format=torch.channels_last_3d)
    module.__dict__["_kforge_cl_done"] = True


def _kforge_to_channels_last(a):
    if isinstance(a, torch.Tensor) and a.dim() == 4:
        return a.contiguous(memory_format=torch.channels_last)
    if isinstance(a, torch.Tensor) and a.dim() == 5:
        return a.contiguous(memory_format=torch.channels_last_3d)
    return a
'''

# Inductor converts a graph's convolutions to channels-last when its heuristic (multipliers
# measured on torchbench) predicts a gain. Under strict fp32, cuDNN's NHWC convolutions were
# slower than NCHW on the H200: the channels-last candidates ran at 0.59-0.81x of eager on
# the seven KernelBench conv tasks that tried them. The options are passed to this compile
# only, so the torch.compile baseline timed beside the candidate keeps Inductor's default.
NCHW_PRELUDE = '''
def _kforge_nchw(mode):
    """torch.compile options of ``mode`` with Inductor's channels-last layout optimization off."""
    import torch._inductor

    return {**torch._inductor.list_mode_options(mode), "layout_optimization": False}
'''

CUDNN = Spec(
    family="cudnn-benchmark",
    flags=("cudnn-benchmark",),
    note="cuDNN benchmarks its convolution algorithms for these shapes and keeps the fastest",
)
CUDNN_COMPILE = Spec(
    family="cudnn-compile",
    runner="compile",
    flags=("cudnn-benchmark",),
    note="autotuned cuDNN convolutions with Inductor-fused epilogues",
)
CHANNELS_LAST = Spec(
    family="channels-last",
    flags=("cudnn-benchmark", "channels-last"),
    note="NHWC convolutions avoid layout transposes inside cuDNN",
)

COMPILE_NCHW = Spec(
    family="compile-nchw",
    runner="compile",
    flags=("nchw",),
    note="Inductor-fused epilogues around convolutions kept in NCHW, strict fp32 cuDNN's fastest layout",
)


def specs(features: TaskFeatures, device: str, channels_last: bool = True) -> list[Spec]:
    """``channels_last`` False for a forward that flattens with .view() (a channels-last
    activation is not viewable that way)."""
    if device != "cuda" or not features.has_conv:
        return []
    out = [CUDNN, CUDNN_COMPILE]
    if features.conv_dims in (2, 3):  # the layouts Inductor's layout optimization changes
        out.append(COMPILE_NCHW)
        if channels_last:
            out.append(CHANNELS_LAST)
    return out
