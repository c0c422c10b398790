# kforge embedded policy: strategy tf32x3-conv


"""Region layer1.1 (Bottleneck) of the user's model, written as a KernelBench task by kforge model.
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
        self.conv1 = nn.Conv2d(256, 64, kernel_size=(1, 1), stride=(1, 1), bias=False)
        _redraw(self.conv1.weight, 0.00219973, 0.175648)
        self.bn1 = nn.BatchNorm2d(64, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)
        _redraw(self.bn1.weight, 1, 0.02)
        _redraw(self.bn1.bias, 0, 0.02)
        _redraw(self.bn1.running_mean, 0, 0.02)
        _redraw(self.bn1.running_var, 1, 0.02, positive=True)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(64, 64, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False)
        _redraw(self.conv2.weight, -4.18119e-05, 0.0587185)
        self.bn2 = nn.BatchNorm2d(64, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)
        _redraw(self.bn2.weight, 1, 0.02)
        _redraw(self.bn2.bias, 0, 0.02)
        _redraw(self.bn2.running_mean, 0, 0.02)
        _redraw(self.bn2.running_var, 1, 0.02, positive=True)
        self.conv3 = nn.Conv2d(64, 256, kernel_size=(1, 1), stride=(1, 1), bias=False)
        _redraw(self.conv3.weight, 0.000712454, 0.0889551)
        self.bn3 = nn.BatchNorm2d(256, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)
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


inf = float('inf')
nan = float('nan')
NoneType = type(None)
device = torch.device

from kforge.tools.gemm.conv import conv2d as conv2d_tf32x3


def _kforge_conv3(x, weight, bias, stride, padding, dilation, relu=False, residual=None):
    """relu(conv(x) + bias + residual) on the 3xTF32 kernel (channels-last output)."""
    return conv2d_tf32x3(x, weight, bias, stride, padding, dilation, "relu" if relu else None, residual)


def _kforge_conv3_bn(x, weight, bias, bn_weight, bn_bias, mean, var, eps, stride, padding, dilation, relu=False,
                     residual=None):
    """An eval-mode BatchNorm after the convolution, folded into its weight and bias."""
    weight, bias = _kforge_folded(weight, bias, bn_weight, bn_bias, mean, var, eps)
    return conv2d_tf32x3(x, weight, bias, stride, padding, dilation, "relu" if relu else None, residual)


@torch.compiler.disable
def _kforge_folded(weight, bias, bn_weight, bn_bias, mean, var, eps):
    """weight * s and (bias - mean) * s + bn_bias with s = bn_weight / sqrt(var + eps), in
    float64 rounded once to fp32; kept on the weight until one of the tensors changes."""
    parts = (weight, bias, bn_weight, bn_bias, mean, var)
    key = tuple(None if t is None else (t.data_ptr(), t._version) for t in parts) + (eps,)
    kept = getattr(weight, "_kforge_fold", None)
    if kept is not None and kept[0] == key:
        return kept[1], kept[2]
    with torch.no_grad():
        scale = torch.rsqrt(var.double() + eps)
        if bn_weight is not None:
            scale = scale * bn_weight.double()
        shift = -mean.double() * scale
        if bias is not None:
            shift = shift + bias.double() * scale
        if bn_bias is not None:
            shift = shift + bn_bias.double()
        folded = (weight.double() * scale.view(-1, 1, 1, 1)).float().contiguous(), shift.float()
    weight._kforge_fold = (key, *folded)
    return folded


class ModelNew(_KforgeReference):
    def forward(self, *args):
        out = self._kforge_run(*args)
        return out
    def _kforge_run(self, *args):
        return self._kforge_body(*args)
    def _kforge_body(self, x : torch.Tensor) -> torch.Tensor:
        contiguous = x.contiguous(memory_format = torch.channels_last);  x = None
        conv1_weight = self.conv1.weight
        bn1_weight = self.bn1.weight
        bn1_bias = self.bn1.bias
        bn1_running_mean = self.bn1.running_mean
        bn1_running_var = self.bn1.running_var
        conv3_bn = _kforge_conv3_bn(contiguous, conv1_weight, None, bn1_weight, bn1_bias, bn1_running_mean, bn1_running_var, 1e-05, (1, 1), (0, 0), (1, 1), True);  conv1_weight = bn1_weight = bn1_bias = bn1_running_mean = bn1_running_var = None
        conv2_weight = self.conv2.weight
        bn2_weight = self.bn2.weight
        bn2_bias = self.bn2.bias
        bn2_running_mean = self.bn2.running_mean
        bn2_running_var = self.bn2.running_var
        conv3_bn_1 = _kforge_conv3_bn(conv3_bn, conv2_weight, None, bn2_weight, bn2_bias, bn2_running_mean, bn2_running_var, 1e-05, (1, 1), (1, 1), (1, 1), True);  conv3_bn = conv2_weight = bn2_weight = bn2_bias = bn2_running_mean = bn2_running_var = None
        conv3_weight = self.conv3.weight
        bn3_weight = self.bn3.weight
        bn3_bias = self.bn3.bias
        bn3_running_mean = self.bn3.running_mean
        bn3_running_var = self.bn3.running_var
        conv3_bn_2 = _kforge_conv3_bn(conv3_bn_1, conv3_weight, None, bn3_weight, bn3_bias, bn3_running_mean, bn3_running_var, 1e-05, (1, 1), (0, 0), (1, 1), True, residual = contiguous);  conv3_bn_1 = conv3_weight = bn3_weight = bn3_bias = bn3_running_mean = bn3_running_var = contiguous = None
        return conv3_bn_2
    
