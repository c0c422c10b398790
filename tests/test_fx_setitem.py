"""Item assignment on a traced tensor (transformers' mask builders: Mistral's sliding-window
block in unseen8 wrote its padding mask with ``causal_mask[:, :, :, :n] = ...``): the FX tracer
records it as ``operator.setitem`` instead of stopping, so the rewrites apply, and the rewritten
forward keeps the assignment: with a padded prompt it computes the reference, and the padding
changes the answer (the assignment is not dead code)."""

from __future__ import annotations

import operator
from pathlib import Path

import torch
from kforge.agent.policy.features import meta_instance, task_features
from kforge.agent.policy.strategies import registry
from kforge.tools import fx_source
from kforge.tools.task import load_task

TASK = Path(__file__).parent / "fixtures" / "tasks" / "hf_mask_setitem_small.py"


def test_item_assignment_is_traced_and_the_rewrites_apply():
    model, inputs = meta_instance(TASK)
    graph = fx_source.trace(model, meta_inputs=inputs).graph
    assert [n for n in graph.nodes if n.target is operator.setitem]
    task = load_task(TASK, check_import=False)
    analysis = registry.analyse_task(task, task_features(task, None, "fp32", None))
    assert not [n for n in analysis.notes if "no FX trace" in n], analysis.notes
    assert analysis.fx is not None and "attention-sdpa" in analysis.fx[1]  # (3xTF32 too, at Mistral's sizes)


def test_the_rewritten_forward_keeps_the_padding_it_assigns(load_source):
    task = load_task(TASK, check_import=False)
    analysis = registry.analyse_task(task, task_features(task, None, "fp32", None))
    spec = next(
        s
        for s in registry.base_specs(analysis, "fp32", "cuda")
        if s.family == "fx-rewrite" and s.runner == "eager"
    )
    reference = load_source(TASK.read_text(), "ref_hf_mask")
    torch.manual_seed(0)
    ref = reference.Model()
    hidden, padded = reference.get_inputs()
    model = load_source(registry.build(task, spec, analysis), "cand_hf_mask").ModelNew()
    model.load_state_dict(ref.state_dict())
    with torch.no_grad():
        want = ref(hidden, padded)
        torch.testing.assert_close(model(hidden, padded), want, rtol=1e-4, atol=1e-5)
        unpadded = model(hidden, torch.ones_like(padded))
    assert not torch.allclose(unpadded[1], want[1], rtol=1e-4, atol=1e-5)  # the assignment mattered
    torch.testing.assert_close(unpadded[0], want[0], rtol=1e-4, atol=1e-5)  # the unpadded prompt alike
