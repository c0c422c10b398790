# kforge embedded policy: strategy cuda-graph


"""Region layer2.1 (Bottleneck) of the user's model, written as a KernelBench task by kforge model.
Its tensor arguments are drawn at the shapes it was called with; its parameters at the real ones' mean and spread."""
import math
import operator
import torch
import torch.nn as nn
inf = float('inf')
nan = float('nan')
NoneType = type(None)
device = torch.device

def _draw(shape, mean, std, dtype=torch.float32):
    """A parameter drawn at the real one's mean and spread."""
    return nn.Parameter(torch.randn(shape, dtype=torch.float32).mul_(std).add_(mean).to(dtype))

def _redraw(t, mean, std, positive=False):
    """A layer's parameter or buffer drawn again at the real one's mean and spread (positive: a variance)."""
    with torch.no_grad():
        drawn = torch.randn(t.shape).mul_(std).add_(mean)
        t.copy_(drawn.abs() if positive else drawn)

class _KforgeReference(nn.Module):

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(512, 128, kernel_size=(1, 1), stride=(1, 1), bias=False)
        _redraw(self.conv1.weight, 0.000366671, 0.124894)
        self.bn1 = nn.BatchNorm2d(128, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)
        _redraw(self.bn1.weight, 1, 0.02)
        _redraw(self.bn1.bias, 0, 0.02)
        _redraw(self.bn1.running_mean, 0, 0.02)
        _redraw(self.bn1.running_var, 1, 0.02, positive=True)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(128, 128, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False)
        _redraw(self.conv2.weight, 0.000170839, 0.0416132)
        self.bn2 = nn.BatchNorm2d(128, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)
        _redraw(self.bn2.weight, 1, 0.02)
        _redraw(self.bn2.bias, 0, 0.02)
        _redraw(self.bn2.running_mean, 0, 0.02)
        _redraw(self.bn2.running_var, 1, 0.02, positive=True)
        self.conv3 = nn.Conv2d(128, 512, kernel_size=(1, 1), stride=(1, 1), bias=False)
        _redraw(self.conv3.weight, -0.000169904, 0.0625283)
        self.bn3 = nn.BatchNorm2d(512, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)
        _redraw(self.bn3.weight, 1, 0.02)
        _redraw(self.bn3.bias, 0, 0.02)
        _redraw(self.bn3.running_mean, 0, 0.02)
        _redraw(self.bn3.running_var, 1, 0.02, positive=True)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv1 = self.conv1(x)
        bn1 = self.bn1(conv1)
        conv1 = None
        relu = self.relu(bn1)
        bn1 = None
        conv2 = self.conv2(relu)
        relu = None
        bn2 = self.bn2(conv2)
        conv2 = None
        relu_1 = self.relu(bn2)
        bn2 = None
        conv3 = self.conv3(relu_1)
        relu_1 = None
        bn3 = self.bn3(conv3)
        conv3 = None
        add = bn3 + x
        bn3 = x = None
        relu_2 = self.relu(add)
        add = None
        return relu_2


import torch


def _kforge_clone(out):
    """Copy outputs out of buffers that the next call would overwrite (CUDA graphs)."""
    if isinstance(out, torch.Tensor):
        return out.clone()
    if isinstance(out, (list, tuple)):
        return type(out)(_kforge_clone(o) for o in out)
    return out


def _kforge_contiguous(out):
    if isinstance(out, torch.Tensor):
        return out.contiguous()
    if isinstance(out, (list, tuple)):
        return type(out)(_kforge_contiguous(o) for o in out)
    return out


class ModelNew(_KforgeReference):
    def forward(self, *args):
        out = self._kforge_run(*args)
        return out
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
        fn = self._kforge_body
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
    def _kforge_body(self, *args):
        return _KforgeReference.forward(self, *args)
