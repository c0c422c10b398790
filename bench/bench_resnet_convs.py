"""ResNet-50 (torchvision, random weights, eval, batch 32) in strict fp32 with its convolutions on
kforge's 3xTF32 NHWC kernel (tools/gemm/conv.py), against cuDNN fp32 in NCHW and channels-last.

Each BatchNorm is folded into the convolution before it (float64, rounded once), the ReLU after
it and each bottleneck's residual add go into the kernel's epilogue; the stem stays on cuDNN.
Variants: every convolution on the kernel ("all"), only the 1x1 ones ("1x1"), and the fastest
of the two per layer shape, measured in place ("per layer"). Medians of CUDA-event timed
whole-model calls, interleaved; error against a float64 copy of the model.

    python bench/bench_resnet_convs.py [--batch 32]
"""

from __future__ import annotations

import statistics
import sys

import torch
import torch.nn.functional as F
from common import header, print_table
from kforge.tools.gemm.conv import conv2d as tf32x3_conv


def fold(conv: torch.nn.Conv2d, bn: torch.nn.BatchNorm2d) -> tuple[torch.Tensor, torch.Tensor]:
    scale = bn.weight.double() / torch.sqrt(bn.running_var.double() + bn.eps)
    weight = (conv.weight.double() * scale.view(-1, 1, 1, 1)).float().contiguous()
    bias = (bn.bias.double() - bn.running_mean.double() * scale).float()
    return weight, bias


class Folded(torch.nn.Module):
    """conv + eval BatchNorm (+ residual) (+ ReLU), on the kernel or on cuDNN."""

    def __init__(self, conv: torch.nn.Conv2d, bn: torch.nn.BatchNorm2d, relu: bool, kernel: bool) -> None:
        super().__init__()
        self.weight, self.bias = fold(conv, bn)
        self.stride, self.padding, self.relu, self.kernel = conv.stride, conv.padding, relu, kernel
        self.shape = (tuple(conv.weight.shape), tuple(conv.stride))

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        if self.kernel:
            return tf32x3_conv(
                x,
                self.weight,
                self.bias,
                self.stride,
                self.padding,
                1,
                "relu" if self.relu else None,
                residual,
            )
        y = F.conv2d(x, self.weight, self.bias, self.stride, self.padding)
        if residual is not None:
            y = y + residual
        return torch.relu(y) if self.relu else y


class Block(torch.nn.Module):
    def __init__(self, b, choose) -> None:  # torchvision Bottleneck
        super().__init__()
        self.c1 = Folded(b.conv1, b.bn1, True, choose(b.conv1))
        self.c2 = Folded(b.conv2, b.bn2, True, choose(b.conv2))
        self.c3 = Folded(b.conv3, b.bn3, True, choose(b.conv3))
        self.down = (
            Folded(b.downsample[0], b.downsample[1], False, choose(b.downsample[0])) if b.downsample else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = self.down(x) if self.down is not None else x
        return self.c3(self.c2(self.c1(x)), identity)


class Patched(torch.nn.Module):
    def __init__(self, model, choose) -> None:
        super().__init__()
        self.stem = Folded(model.conv1, model.bn1, True, False)
        self.pool, self.avg, self.fc = model.maxpool, model.avgpool, model.fc
        self.blocks = torch.nn.Sequential(
            *[
                Block(b, choose)
                for layer in (model.layer1, model.layer2, model.layer3, model.layer4)
                for b in layer
            ]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.pool(self.stem(x.contiguous(memory_format=torch.channels_last))))
        return self.fc(torch.flatten(self.avg(x), 1))


def timed_rounds(variants: dict, x: torch.Tensor, rounds: int = 30) -> dict[str, float]:
    times: dict[str, list[float]] = {k: [] for k in variants}
    with torch.no_grad():
        for fn in variants.values():
            for _ in range(3):
                fn(x)
        for _ in range(rounds):
            for name, fn in variants.items():
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn(x)
                end.record()
                end.synchronize()
                times[name].append(start.elapsed_time(end))
    return {k: statistics.median(v) for k, v in times.items()}


def per_layer_choice(model, x: torch.Tensor) -> dict:
    """For each distinct (weight shape, stride, input shape): whether the kernel beat cuDNN in place."""
    shapes: dict = {}
    hooks = []

    def record(mod: torch.nn.Conv2d, args: tuple, _out: torch.Tensor) -> None:  # None: the output stays
        shapes.setdefault((tuple(mod.weight.shape), mod.stride), (mod, args[0].shape))

    for m in model.modules():
        if isinstance(m, torch.nn.Conv2d):
            hooks.append(m.register_forward_hook(record))
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    choice = {}
    for key, (conv, in_shape) in shapes.items():
        inp = torch.randn(in_shape, device="cuda").contiguous(memory_format=torch.channels_last)
        w = conv.weight.detach().contiguous()
        runs = {
            "kernel": lambda v, w=w, c=conv: tf32x3_conv(v, w, None, c.stride, c.padding),
            "cudnn": lambda v, w=w, c=conv: F.conv2d(v, w, None, c.stride, c.padding),
        }
        t = timed_rounds(runs, inp, 20)
        choice[key] = t["kernel"] < t["cudnn"]
        print(
            f"  {key[0]} /{key[1][0]} in {tuple(in_shape)}: kernel {t['kernel']:.3f} ms, cuDNN NHWC {t['cudnn']:.3f} ms"
        )
    return choice


def main() -> None:
    from torchvision.models import resnet50

    batch = int(sys.argv[sys.argv.index("--batch") + 1]) if "--batch" in sys.argv else 32
    print(header("python bench/bench_resnet_convs.py " + " ".join(sys.argv[1:])))
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    model = resnet50(weights=None).eval().cuda()
    with torch.no_grad():  # BatchNorm statistics that are not the identity
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.1, 0.1)
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    cl = resnet50(weights=None).eval().cuda().to(memory_format=torch.channels_last)
    cl.load_state_dict(model.state_dict())
    choice = per_layer_choice(cl, x.contiguous(memory_format=torch.channels_last))
    variants = {
        "eager NCHW": model,
        "eager NHWC": lambda v: cl(v.contiguous(memory_format=torch.channels_last)),
        "folded cuDNN NHWC": Patched(model, lambda c: False),
        "all on kernel": Patched(model, lambda c: True),
        "1x1 on kernel": Patched(model, lambda c: c.kernel_size == (1, 1)),
        "per layer": Patched(model, lambda c: choice.get((tuple(c.weight.shape), c.stride), False)),
    }
    with torch.no_grad():
        ref = model.double()(x.double())
        model.float()
        errors = {k: float((fn(x).double() - ref).norm() / ref.norm()) for k, fn in variants.items()}
    times = timed_rounds(variants, x)
    base = min(times["eager NCHW"], times["eager NHWC"])
    rows = [(k, f"{t:.3f}", f"{base / t:.3f}x", f"{errors[k]:.1e}") for k, t in times.items()]
    print_table(
        f"ResNet-50, batch {batch}, strict fp32 (ms, median of 30 interleaved calls)",
        ["variant", "ms", "vs best eager", "error vs fp64"],
        rows,
    )


if __name__ == "__main__":
    main()
