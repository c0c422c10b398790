"""The realistic task sets of bench/realistic (issue #34): every task is a valid KernelBench
task (loads, builds, its forward runs at the real shapes on the meta device), the kinds the
issue names are in each set, and no task is in two sets."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from kforge.agent.policy.features import meta_instance
from kforge.tools.task import load_task

ROOT = Path(__file__).parents[1] / "bench" / "realistic"
SETS = (
    "dev",
    "heldout",
    "unseen",
    "unseen2",
    "unseen3",
    "unseen4",
    "unseen5",
    "unseen6",
    "unseen7",
    "unseen8",
    "unseen9",
    "unseen10",
    "unseen11",
)

# Shapes that depend on the data: Qwen1.5-MoE dispatches with torch.where (nonzero), SchNet's
# readout repeat_interleaves by atom counts. unseen7, 2026-11-27.
# Longformer's layer reads its global tokens' count back (``.item()``) and their places
# (``nonzero``), as transformers writes it: unseen11, 2026-11-28.
DATA_DEPENDENT = {"qwen1_5_moe_sparse_block", "schnet_qm9_energy", "longformer_layer"}


# BatchNorm statistics calibrated in __init__ on a batch it makes (unseen11): built under the
# meta device, the batch's small tensors go to the CPU and its large ones to meta, and the
# calibration forward mixes them. Found by this test before the set ran under kforge (2026-11-28);
# no change was made for them before their measurement.
BUILT_ON_CPU = {"can_coaction_ctr", "wukong_ranking_model", "x3d_m_res_stage"}


def _tasks(name: str) -> list[Path]:
    return sorted((ROOT / name).glob("*.py"))


@pytest.mark.parametrize(
    "path", [p for s in SETS for p in _tasks(s)], ids=lambda p: f"{p.parent.name}/{p.stem}"
)
def test_each_task_loads_and_runs_on_meta_at_its_real_shapes(path: Path) -> None:
    task = load_task(path, check_import=False)
    assert task.source.lstrip().startswith('"""'), "each task says what block it is"
    if path.stem in BUILT_ON_CPU:  # kforge's meta build fails on them: recorded before they ran
        with pytest.raises(RuntimeError, match="expected device meta"):
            model, inputs = meta_instance(path)
            with torch.no_grad():
                model(*inputs)
        return
    if path.stem in DATA_DEPENDENT:  # real code: the meta device cannot run it (nor kforge's analysis)
        with pytest.raises((NotImplementedError, RuntimeError), match="nonzero|output_size|item"):
            model, inputs = meta_instance(path)
            with torch.no_grad():
                model(*inputs)
        return
    model, inputs = meta_instance(path)
    with torch.no_grad():
        out = model(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    assert all(isinstance(o, torch.Tensor) and o.dtype == torch.float32 and o.numel() > 0 for o in outs)
    floats = [x for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point()]
    weights = [p for p in model.parameters()]
    assert floats or weights  # strict fp32 tasks: their float inputs and weights are fp32
    assert all(x.dtype == torch.float32 for x in floats + weights)


def test_the_sets_are_apart_and_each_spans_llm_vision_and_recommender_blocks() -> None:
    names = {s: {p.stem for p in _tasks(s)} for s in SETS}
    # unseen/ lost GPT-NeoX's rotary to dev/ (the rotary template's partial form, 2026-11-27)
    minimum = {
        "dev": 10,
        "heldout": 8,
        "unseen": 5,
        "unseen2": 9,
        "unseen3": 7,
        "unseen4": 8,
        "unseen5": 7,
        "unseen6": 10,
        "unseen7": 9,
        "unseen8": 6,
        "unseen9": 8,  # DiT and PatchTST moved to dev/ (a float table, RevIN's state): 2026-11-28
        "unseen10": 10,
        "unseen11": 10,
    }
    assert all(len(names[s]) >= n for s, n in minimum.items()), {s: len(names[s]) for s in SETS}
    for i, a in enumerate(SETS):
        assert not any(names[a] & names[b] for b in SETS[i + 1 :]), a
    for name in SETS:
        text = " ".join(p.read_text().split('"""')[1].lower() for p in _tasks(name))
        for kind in ("llama", "vit", "recommender", "attention", "batchnorm"):
            # unseen/'s attention block and its BatchNorm blocks moved to dev/ once they
            # prompted changes (its first measurement stands): 2026-11-26
            if name == "unseen" and kind in ("attention", "batchnorm"):
                continue
            # unseen5's Falcon (Llama's rotary) and ALBERT moved to dev/ too: 2026-11-27
            if name == "unseen5" and kind == "llama":
                continue
            # unseen7's vision blocks are DeepLabV3, EfficientDet and DETR (no ViT); its
            # recommenders (DIEN, FNFM) say "CTR"; its LLM blocks are Qwen's MoE and RWKV
            # (ModernBERT moved to dev/ once it prompted a change: 2026-11-27)
            if name == "unseen7" and kind in ("vit", "llama"):
                continue
            # unseen8's Mistral, PointNet++, RAFT and PLE moved to dev/ once they prompted changes
            # (FX item assignment, device-factories, get_inputs kept): 2026-11-28
            if kind == "recommender" and "ctr" in text:
                continue
            # unseen10's LLM blocks are OLMo-2, Cohere's Aya-23 and RetNet: no Llama-family model
            if name == "unseen10" and kind == "llama":
                continue
            # unseen11's LLM blocks are InternLM2, MPT and Longformer; its vision blocks X3D,
            # NAFNet, FCOS, FLUX and FourCastNet's AFNO (no ViT)
            if name == "unseen11" and kind in ("llama", "vit"):
                continue
            assert kind in text or (kind == "llama" and "bert" in text), (name, kind)
