"""Convolutions: cuDNN autotuning (``cudnn.benchmark``, set around the call and restored) and
channels-last layouts for the weights and inputs (outputs made contiguous again)."""

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


def specs(features: TaskFeatures, device: str, channels_last: bool = True) -> list[Spec]:
    """``channels_last`` False for a forward that flattens with .view() (a channels-last
    activation is not viewable that way)."""
    if device != "cuda" or not features.has_conv:
        return []
    out = [CUDNN, CUDNN_COMPILE]
    if channels_last and features.conv_dims in (2, 3):
        out.append(CHANNELS_LAST)
    return out
