"""retrieve_for_task: what the agents get for a task on a GPU, within a budget."""

from __future__ import annotations

import dataclasses

import pytest
from kforge.retrieval import resolve_gpu, retrieve_for_task
from kforge.tools.hardware import spec_for

SOFTMAX_TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    """Softmax over the last dimension of a [4096, 8192] matrix."""
    def forward(self, x):
        return torch.softmax(x, dim=-1)

def get_inputs():
    return [torch.randn(4096, 8192)]
'''


def test_hardware_guides_and_same_op_kernels_within_the_budget(retrieval_store):
    hits = retrieve_for_task(
        SOFTMAX_TASK, ["softmax"], spec_for("H100-SXM"), budget_chars=8000, store=retrieval_store
    )
    kinds = [h.kind for h in hits]
    assert kinds == sorted(kinds, key=["hardware", "guide", "kernel"].index)
    assert {"hardware", "guide", "kernel"} <= set(kinds)
    assert {h.metadata["gpu"] for h in hits if h.kind == "hardware"} == {"H100-SXM"}
    kernels = [h for h in hits if h.kind == "kernel"]
    assert kernels[0].metadata["op"] == "softmax"
    assert sum(len(h.text) for h in hits) <= 8000
    assert sum(len(h.text) for h in hits if h.kind == "hardware") <= 8000 * 0.3
    assert len({h.id for h in hits}) == len(hits)


def test_a_small_budget_is_never_exceeded(retrieval_store):
    hits = retrieve_for_task(
        SOFTMAX_TASK, ["softmax"], spec_for("L40S"), budget_chars=900, store=retrieval_store
    )
    assert sum(len(h.text) for h in hits) <= 900


def test_unknown_and_absent_gpus(retrieval_store):
    odd = dataclasses.replace(spec_for("H100-SXM"), name="NVIDIA Future GPU", canonical=None)
    hits = retrieve_for_task(SOFTMAX_TASK, [], odd, store=retrieval_store)
    assert [h.id for h in hits if h.kind == "hardware"] == ["hardware/detected"]
    assert not [
        h
        for h in retrieve_for_task(SOFTMAX_TASK, ["softmax"], None, store=retrieval_store)
        if h.kind == "hardware"
    ]


def test_gpu_names_resolve():
    assert resolve_gpu("h100-sxm") == "H100-SXM"
    assert resolve_gpu("NVIDIA H100 PCIe") == "H100-PCIe"
    with pytest.raises(ValueError, match="unknown GPU"):
        resolve_gpu("Voodoo 2")
