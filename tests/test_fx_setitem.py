"""Item assignment on a traced tensor (transformers' mask builders: Mistral's sliding-window
block in unseen8 wrote its padding mask with ``causal_mask[:, :, :, :n] = ...``): the FX tracer
records it as ``operator.setitem`` instead of stopping, so the rewrites apply, and the rewritten
forward keeps the assignment: with a padded prompt it computes the reference, and the padding
changes the answer (the assignment is not dead code). The task is the Mistral block itself
(``bench/realistic/dev/``) at small sizes, its second prompt right-padded."""

from __future__ import annotations

import operator
import re
from pathlib import Path

import torch
from kforge.agent.policy.features import meta_instance, task_features
from kforge.agent.policy.strategies import registry
from kforge.tools import fx_source
from kforge.tools.task import load_task

MISTRAL = Path(__file__).parents[1] / "bench" / "realistic" / "dev" / "mistral_7b_sliding_window_attention.py"
SMALL = {
    "HIDDEN_SIZE": "64",
    "NUM_HEADS": "4",
    "NUM_KV_HEADS": "2",
    "SLIDING_WINDOW": "6",
    "BATCH, SEQ_LEN": "2, 16",
}
PADDED = "    attention_mask[1, -5:] = 0  # the second prompt right-padded\n    return [hidden_states, attention_mask]"


def _small_mistral(tmp_path: Path) -> Path:
    source = MISTRAL.read_text()
    for name, value in SMALL.items():
        source, found = re.subn(rf"(?m)^{name} = .*$", f"{name} = {value}", source)
        assert found == 1, name
    source = source.replace("    return [hidden_states, attention_mask]", PADDED)
    path = tmp_path / "mistral_small_padded.py"
    path.write_text(source)
    return path


def test_item_assignment_is_traced_and_the_rewrites_apply(tmp_path):
    task_path = _small_mistral(tmp_path)
    model, inputs = meta_instance(task_path)
    graph = fx_source.trace(model, meta_inputs=inputs).graph
    assert [n for n in graph.nodes if n.target is operator.setitem]
    task = load_task(task_path, check_import=False)
    analysis = registry.analyse_task(task, task_features(task, None, "fp32", None))
    assert "attention_mask[1, -5:] = 0" in task.source
    assert not [n for n in analysis.notes if "no FX trace" in n], analysis.notes
    assert analysis.fx is not None and "attention-sdpa" in analysis.fx[1]  # (3xTF32 too, at Mistral's sizes)


def test_the_rewritten_forward_keeps_the_padding_it_assigns(tmp_path, load_source):
    task = load_task(_small_mistral(tmp_path), check_import=False)
    analysis = registry.analyse_task(task, task_features(task, None, "fp32", None))
    spec = next(
        s
        for s in registry.base_specs(analysis, "fp32", "cuda")
        if s.family == "fx-rewrite" and s.runner == "eager"
    )
    reference = load_source(task.source, "ref_hf_mask")
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
