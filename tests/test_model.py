"""``kforge model``: a user's model cut into region tasks, patched and measured end to end
(tools/model/, agent/model/), on tiny models built here: a ViT with hand-written attention,
a ResNet with BatchNorm, and GPT-2 from a transformers config."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from kforge.tools.model import e2e, extract, job, patch, spec
from kforge.tools.task import import_file, load_task

MODELS = Path(__file__).parent / "fixtures" / "models"
EXAMPLES = Path(__file__).parents[1] / "examples" / "models"
VIT = f"{MODELS / 'tiny_vit.py'}:tiny"
KFORGE = [sys.executable, "-c", "from kforge.agent.cli import main; main()"]


@pytest.fixture(scope="module")
def vit(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The tiny ViT's regions, extracted once for this module's tests."""
    out = tmp_path_factory.mktemp("vit")
    manifest = job.extract_regions(spec.load(VIT), out, min_share=0.0)
    return out, manifest


def region(manifest: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(r for r in manifest["regions"] if r["kind"] == kind)


def write_candidate(out: Path, task: str, name: str, edit: tuple[str, str] = ("", "")) -> dict[str, Any]:
    """A candidate made of the region's task (ModelNew computes what Model does, or what ``edit``
    makes of it); returns the patch entry of the region."""
    source = (out / task).read_text().replace("class Model(", "class ModelNew(")
    if edit[0]:
        assert edit[0] in source
        source = source.replace(edit[0], edit[1])
    (out / "candidates").mkdir(exist_ok=True)
    (out / "candidates" / name).write_text(source)
    return {"candidate": f"candidates/{name}"}


def entry(r: dict[str, Any], candidate: dict[str, Any]) -> dict[str, Any]:
    keys = ("kind", "task", "instances", "inputs", "fixed", "shapes", "groups", "share")
    return {k: r[k] for k in keys} | candidate


def test_a_spec_that_gives_no_model_says_what_to_do(tmp_path: Path) -> None:
    cases = {
        "missing.py": "give a Python file",
        f"{MODELS / 'tiny_vit.py'}:nope": "has no function 'nope'",
        str(MODELS / "tiny_vit.py"): "defines no get_model and get_inputs",
    }
    for text, message in cases.items():
        with pytest.raises(spec.ModelSpecError, match=message):
            spec.load(str(tmp_path / text) if text == "missing.py" else text)
    bad = tmp_path / "bad.py"
    bad.write_text("def make():\n    return 3\n")
    with pytest.raises(spec.ModelSpecError, match="must return"):
        spec.load(f"{bad}:make")
    with pytest.raises(spec.ModelSpecError, match="unknown precision"):
        spec.load(VIT, precision="fp8")


def test_a_model_whose_forward_raises_or_cannot_be_captured_says_why_in_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text(
        "import torch\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = torch.nn.Linear(4, 4)\n"
        "    def forward(self, x):\n"
        "        return self.fc(x)\n"
        "class Branchy(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x * 2 if x.sum() > 0 else x\n"
        "def wrong_shape():\n"
        "    return Net(), [torch.randn(2, 5)]\n"
        "def branchy():\n"
        "    return Branchy(), [torch.randn(3)]\n"
    )
    raised = job.extract_regions(spec.load(f"{broken}:wrong_shape"), tmp_path / "a", 0.0)
    assert raised["error"].startswith("the model's forward raised RuntimeError: mat1 and mat2 shapes")
    none = job.extract_regions(spec.load(f"{broken}:branchy"), tmp_path / "b", 0.0)
    assert none["error"].startswith(
        "no region of the model could be captured ((whole model): FX cannot trace it"
    )


def test_the_vits_blocks_become_tasks_with_one_per_repeated_region(vit: tuple[Path, dict[str, Any]]) -> None:
    out, manifest = vit
    kinds = {r["kind"]: r for r in manifest["regions"]}
    assert {"Attention", "Mlp", "LayerNorm", "Linear"} <= set(kinds)
    assert kinds["Attention"]["instances"] == ["blocks.0.attn", "blocks.1.attn"]
    assert len(kinds["LayerNorm"]["instances"]) == 5  # two per block and the final one: one task
    assert abs(sum(r["share"] for r in manifest["regions"]) - 1) < 0.5  # the regions hold most of the time
    for r in manifest["regions"]:
        task = load_task(out / r["task"], check_import=False)  # KernelBench format
        module = import_file(task.path, f"t_{task.path.stem}")
        built = module.Model()
        assert not built.training  # the model ran in inference
        inputs = module.get_inputs()
        assert [list(x.shape) for x in inputs] == [r["shapes"][n][0] for n in r["inputs"]]
        built(*inputs)


def test_a_written_task_loaded_with_the_regions_weights_is_the_region(
    vit: tuple[Path, dict[str, Any]],
) -> None:
    out, manifest = vit
    loaded = spec.load(VIT)
    r = region(manifest, "Attention")
    model = import_file(out / r["task"], "t_attention").Model()
    original = loaded.model.get_submodule("blocks.1.attn")  # another instance: its own weights
    assert extract.load_region_state(model, original) == []
    x = torch.randn(*r["shapes"]["x"][0])
    torch.testing.assert_close(model(x), original(x), rtol=0, atol=0)


def test_a_resnet_bottleneck_with_batchnorm_is_written_for_inference(tmp_path: Path) -> None:
    manifest = job.extract_regions(spec.load(str(MODELS / "tiny_resnet.py")), tmp_path, min_share=0.0)
    kinds = {r["kind"] for r in manifest["regions"] if r["task"]}
    assert {"Bottleneck", "Conv2d", "BatchNorm2d", "Linear"} <= kinds
    # the first block has a downsampling shortcut: another task than the two after it
    blocks = [r for r in manifest["regions"] if r["kind"] == "Bottleneck"]
    assert sorted(len(r["instances"]) for r in blocks) == [1, 2]
    first = next(r for r in blocks if r["instances"] == ["layer1.0"])
    source = (tmp_path / first["task"]).read_text()
    assert "self.downsample.add_module('0', nn.Conv2d(16, 32" in source
    assert "_redraw(self.get_submodule('downsample.1').running_var" in source
    assert "_redraw(self.bn1.running_var" in source and "positive=True" in source
    stem_bn = next(r for r in manifest["regions"] if r["kind"] == "BatchNorm2d")
    assert "class Model(nn.BatchNorm2d):" in (tmp_path / stem_bn["task"]).read_text()


def patched_runs_the_replacement(model_spec: str, region: dict[str, Any], out: Path) -> None:
    """A transformers model patched with a copy of ``region``'s task: the same hidden states,
    and both layers' instances ran the replacement."""
    loaded = spec.load(model_spec)
    regions = [entry(region, write_candidate(out, region["task"], "attn.py"))]
    with torch.no_grad():
        want = loaded.model(*loaded.inputs).last_hidden_state
        patch.apply(loaded.model, {"regions": regions, "root": str(out)})
        got = loaded.model(*loaded.inputs).last_hidden_state
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert [m.calls["new"] for m in loaded.model.modules() if isinstance(m, patch.Swapped)] == [1, 1]


def test_llamas_attention_takes_a_tuple_of_tensors_and_is_patched_with_it(tmp_path: Path) -> None:
    """LlamaAttention gets position_embeddings=(cos, sin): the task takes the two tensors, and
    the patch unpacks the tuple the decoder layer passes."""
    pytest.importorskip("transformers")
    llama = f"{EXAMPLES / 'llama.py'}:tiny"
    manifest = job.extract_regions(spec.load(llama), tmp_path, min_share=0.0)
    kinds = {r["kind"]: r for r in manifest["regions"]}
    assert kinds["LlamaMLP"]["task"] and kinds["LlamaRMSNorm"]["task"]
    attention = kinds["LlamaAttention"]
    assert attention["groups"] == {"position_embeddings": ["position_embeddings_0", "position_embeddings_1"]}
    assert attention["inputs"][:3] == ["hidden_states", "position_embeddings_0", "position_embeddings_1"]
    patched_runs_the_replacement(llama, attention, tmp_path)


def test_gpt2s_attention_is_captured_by_torch_export_and_patched_with_its_keyword_call(
    tmp_path: Path,
) -> None:
    """FX cannot trace GPT2Attention (it takes **kwargs); torch.export can. Its replacement is
    called with the keyword arguments the block gives it."""
    pytest.importorskip("transformers")
    gpt2 = f"{EXAMPLES / 'gpt2.py'}:tiny"
    manifest = job.extract_regions(spec.load(gpt2), tmp_path, min_share=0.0)
    kinds = {r["kind"]: r for r in manifest["regions"]}
    attention = kinds["GPT2Attention"]
    assert attention["instances"] == ["h.0.attn", "h.1.attn"] and attention["fixed"]["use_cache"] == "False"
    assert "torch.ops.aten.scaled_dot_product_attention" in (tmp_path / attention["task"]).read_text()
    assert kinds["Dropout"]["note"] == "no work in inference: no task"
    patched_runs_the_replacement(gpt2, attention, tmp_path)


def test_the_patch_swaps_verified_regions_in_and_calls_the_original_on_other_calls(
    vit: tuple[Path, dict[str, Any]],
) -> None:
    out, manifest = vit
    r = region(manifest, "Mlp")
    regions = [entry(r, write_candidate(out, r["task"], "mlp.py"))]
    path = patch.write(out, regions, "test patch")
    loaded = spec.load(VIT)
    model, inputs = loaded.model, loaded.inputs
    with torch.no_grad():
        want = model(*inputs)
        import kforge

        kforge.apply(model, path)
        swapped = [m for m in model.modules() if isinstance(m, patch.Swapped)]
        assert [type(m.new).__name__ for m in swapped] == ["ModelNew", "ModelNew"]
        assert swapped[0].new.fc1.weight is swapped[0].original.fc1.weight  # the model's own tensors
        torch.testing.assert_close(model(*inputs), want, rtol=0, atol=0)
        assert swapped[0].calls == {"new": 1, "original": 0}
        model(torch.randn(3, 32, 48))  # another batch size: not the call that was verified
        assert swapped[0].calls == {"new": 1, "original": 1}
        with pytest.raises(patch.PatchError, match="already patched"):
            kforge.apply(model, path)
        kforge.restore(model)
    assert not any(isinstance(m, patch.Swapped) for m in model.modules())


def test_a_replacement_that_does_not_fit_the_model_is_refused(vit: tuple[Path, dict[str, Any]]) -> None:
    out, manifest = vit
    r = region(manifest, "Mlp")
    renamed = write_candidate(out, r["task"], "renamed.py", ("self.fc2", "self.out"))
    with pytest.raises(patch.PatchError, match="'out.weight' is not in the model's Mlp"):
        patch.apply(spec.load(VIT).model, {"regions": [entry(r, renamed)], "root": str(out)})


def measure(
    out: Path,
    regions: list[dict[str, Any]],
    whole_modes: tuple[str, ...] = (),
    compile_modes: tuple[str, ...] = (),
) -> dict[str, Any]:
    return job.run(
        {
            "profile_paths": [path for r in regions for path in r["instances"]],
            "whole_modes": list(whole_modes),
            "mode": "model-measure",
            "model_spec": VIT,
            "precision": "fp32",
            "device": "cpu",
            "patch": regions,
            "root": str(out),
            "compile_modes": list(compile_modes),
            "trials": 6,
        }
    )


def test_a_wrong_replacement_is_caught_end_to_end(vit: tuple[Path, dict[str, Any]]) -> None:
    """A candidate off by 0.1% on each MLP: a region-level check with a loose tolerance might
    pass it; the model against float64 does not."""
    out, manifest = vit
    r = region(manifest, "Mlp")
    wrong = write_candidate(out, r["task"], "wrong.py", ("return fc2", "return fc2 * 1.001"))
    figures = measure(out, [entry(r, wrong)])
    assert not figures["verified_all"]["correct"]
    assert "error vs float64" in figures["verified_all"]["reason"]
    assert figures["kept"] == []


def test_a_region_whose_win_does_not_survive_in_the_model_is_dropped(
    vit: tuple[Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    out, manifest = vit
    mlp, attn = region(manifest, "Mlp"), region(manifest, "Attention")
    regions = [
        entry(mlp, write_candidate(out, mlp["task"], "m.py")),
        entry(attn, write_candidate(out, attn["task"], "a.py")),
    ]
    seen: list[list[str]] = []

    def fake_times(
        variants: dict[str, Any], inputs: list[Any], device: Any, trials: int = 30, outputs: Any = None
    ) -> dict[str, float]:
        seen.append(list(variants))
        for fn in variants.values():
            fn(*inputs)  # each variant still runs
        return {"eager": 10.0, "r0": 8.0, "r1": 10.5, "together": 8.4, "patched": 8.0}

    monkeypatch.setattr(e2e, "time_variants", fake_times)
    figures = measure(out, regions)
    assert figures["verified_all"]["correct"] and figures["verified"]["correct"]
    assert figures["kept"] == [0]
    assert seen == [["eager", "r0", "r1", "together"], ["eager", "patched"]]
    assert figures["alone"] == {"0": 1.25, "1": 10.0 / 10.5} and figures["together"] == 10.0 / 8.4
    after = figures["after"]["regions"]  # the time by region after the patch, for the report's chart
    assert set(after) == {"blocks.0.mlp", "blocks.1.mlp", "blocks.0.attn", "blocks.1.attn"}
    assert all(host > 0 for host, _ in after.values()) and figures["after"]["forward"][0] > 0


@pytest.mark.parametrize(
    ("times", "kept"),
    [
        ({"r0": 10.4, "r1": 10.3, "together": 7.0}, [0, 1]),  # each loses alone, together they win
        ({"r0": 10.4, "r1": 10.3, "together": 10.2}, []),  # together not by enough
        ({"r0": 8.0, "r1": 10.3, "together": 8.5}, [0]),  # one survivor beats the pair
        ({"r0": 8.0, "r1": 10.3, "together": 7.5}, [0, 1]),
    ],
)
def test_regions_that_lose_alone_and_win_together_are_kept_together(
    vit: tuple[Path, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    times: dict[str, float],
    kept: list[int],
) -> None:
    """A replacement that hands the next region another memory layout (ResNet's channels-last
    convolutions) slows the untouched regions after it: alone it loses, with every region
    swapped it wins. The keep step times the regions together too."""
    out, manifest = vit
    mlp, attn = region(manifest, "Mlp"), region(manifest, "Attention")
    regions = [
        entry(mlp, write_candidate(out, mlp["task"], "m.py")),
        entry(attn, write_candidate(out, attn["task"], "a.py")),
    ]
    fake = {"eager": 10.0, "patched": 9.0} | times
    monkeypatch.setattr(e2e, "time_variants", lambda variants, *a, **k: {n: fake[n] for n in variants})
    figures = measure(out, regions)
    assert figures["kept"] == kept and figures["together"] == 10.0 / times["together"]
    assert figures["verified_all"]["correct"] and figures.get("verified", {"correct": True})["correct"]


def test_several_survivors_are_timed_again_beside_all_regions_together(
    vit: tuple[Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    out, manifest = vit
    mlp, attn, norm = region(manifest, "Mlp"), region(manifest, "Attention"), region(manifest, "LayerNorm")
    regions = [entry(r, write_candidate(out, r["task"], f"s{i}.py")) for i, r in enumerate((mlp, attn, norm))]
    seen: list[list[str]] = []
    rounds = [
        {"eager": 10.0, "r0": 9.0, "r1": 9.0, "r2": 10.5, "together": 8.0},
        {"eager": 10.2, "survivors": 8.1, "together": 8.4},  # the survivors, timed again, win
        {"eager": 10.0, "patched": 8.0},
    ]

    def fake(variants: dict[str, Any], *args: Any, **kwargs: Any) -> dict[str, float]:
        seen.append(list(variants))
        return rounds[len(seen) - 1]

    monkeypatch.setattr(e2e, "time_variants", fake)
    figures = measure(out, regions)
    assert seen[1] == ["eager", "survivors", "together"]
    assert figures["kept"] == [0, 1]


def test_the_whole_patched_model_through_torch_compile_is_a_candidate_and_the_patch_says_so(
    vit: tuple[Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    out, manifest = vit
    mlp = region(manifest, "Mlp")
    regions = [entry(mlp, write_candidate(out, mlp["task"], "m2.py"))]
    fast = {"eager": 10.0, "r0": 9.0, "patched": 9.0, "patched+compile:default": 6.0}
    monkeypatch.setattr(e2e, "time_variants", lambda variants, *a, **k: {n: fast[n] for n in variants})
    figures = measure(out, regions, whole_modes=("default",))
    assert figures["whole_verified"]["default"]["correct"], figures
    assert figures["whole_model"] == "default" and figures["kept"] == [0]
    graphed = measure(
        out, [regions[0] | {"strategy": "compile-default+cuda-graph"}], whole_modes=("default",)
    )
    assert graphed["whole_verified"]["default"]["reason"].startswith(
        "not tried: kept regions replay CUDA graphs"
    )
    assert graphed["whole_model"] is None and "patched+compile:default" not in graphed["times_ms"]
    fast |= {"compile:default": 5.0}  # torch.compile of the model as it is beats every patched variant
    beaten = measure(out, regions, whole_modes=("default",), compile_modes=("default",))
    assert beaten["kept"] == [] and beaten["whole_model"] == "default" and "fallback" in beaten
    from kforge.agent.model import summary

    result = summary.figures(
        {"model": "vit", "regions": [mlp]}, [regions[0] | {"speedup_vs_eager": 1.1}], beaten
    )
    assert (
        result["patched_ms"] == 5.0
        and result["speedup_vs_best_compile"] == 1.0
        and result["regions_kept"] == 0
    )
    path = patch.write(out, regions, "whole", figures["whole_model"])
    assert "WHOLE_MODEL = 'default'" in path.read_text()
    loaded = spec.load(VIT)
    patch.apply(loaded.model, path)
    assert loaded.model._compiled_call_impl is not None
    with torch.no_grad(), torch._dynamo.config.patch(error_on_recompile=True):
        for _ in range(3):  # compiled once: nothing in the wrapper changes between calls
            loaded.model(*loaded.inputs)
    patch.restore(loaded.model)
    assert loaded.model._compiled_call_impl is None


END_TO_END_CHEATS = {
    "a clock that runs at half speed": "import time\n_real = time.perf_counter\ntime.perf_counter = lambda: _real() * 0.5\n",
    "kforge's own timing replaced": (
        "import kforge.tools.model.e2e as _e2e\n"
        "_e2e.time_variants = lambda variants, *a, **k: {n: 1.0 if n.startswith('patched') else 9.0 for n in variants}\n"
    ),
    "TF32 switched on": "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n",
    "the comparison blinded": "import kforge.tools.compare as _c\n_c.flatten = lambda obj: []\n",
    "a looser precision class": (
        "import dataclasses, kforge.tools.precision as _p\n"
        "_p.PRECISIONS['fp32'] = dataclasses.replace(_p.PRECISIONS['fp32'], max_fp64_rel_err=1e9)\n"
    ),
}


@pytest.mark.parametrize("cheat", list(END_TO_END_CHEATS))
def test_a_replacement_that_cheats_the_end_to_end_measurement_is_rejected(
    cheat: str, vit: tuple[Path, dict[str, Any]]
) -> None:
    """A replacement passed its region's judge; imported beside the model for the end-to-end
    figures, its module-level code patches what they rely on."""
    out, manifest = vit
    r = region(manifest, "Mlp")
    name = f"cheat_{list(END_TO_END_CHEATS).index(cheat)}.py"
    write_candidate(out, r["task"], name)
    path = out / "candidates" / name
    path.write_text(END_TO_END_CHEATS[cheat] + path.read_text())
    job_spec = {
        "mode": "model-measure", "model_spec": VIT, "precision": "fp32", "device": "cpu", "trials": 6,
        "patch": [entry(r, {"candidate": f"candidates/{name}"})], "root": str(out), "compile_modes": [],
    }  # fmt: skip
    code = f"import json; from kforge.tools.model import job; print(json.dumps(job.run({job_spec!r})))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    figures = json.loads(run.stdout.strip().splitlines()[-1])
    assert figures.get("error", "").startswith("rejected end to end"), (figures, run.stderr[-2000:])


HONEST_ONLY_WHEN_VERIFIED = """
import sys as _sys

_honest = ModelNew.forward


def _forward(self, *args):
    frame = _sys._getframe(1)
    while frame is not None:  # the reference and the verifier are on the stack: compute
        if frame.f_code.co_name == "verify":
            return _honest(self, *args)
        frame = frame.f_back
    return args[0] * 0  # timed: nothing computed


ModelNew.forward = _forward
"""


def test_a_replacement_honest_only_while_verified_is_rejected_by_its_timed_outputs(
    vit: tuple[Path, dict[str, Any]],
) -> None:
    """It walks the frames to see whether kforge's verify called it; while timed it returns
    zeros, so the model looks faster. The outputs of the timed calls are checked too."""
    out, manifest = vit
    r = region(manifest, "Mlp")
    write_candidate(out, r["task"], "frames.py")
    path = out / "candidates" / "frames.py"
    path.write_text(path.read_text() + HONEST_ONLY_WHEN_VERIFIED)
    figures = measure(out, [entry(r, {"candidate": "candidates/frames.py"})])
    assert figures.get("error", "").startswith("rejected end to end"), figures
    # caught when timed alone in the model, whether or not it was fast enough there to be kept
    assert "region 0 alone in the model computed other values while timed" in figures["error"]


MARKS_ITS_RUN = """
import builtins as _builtins

_attention = ModelNew.forward


def _marked(self, *args):
    _builtins._kforge_test_attention_ran = True
    return _attention(self, *args)


ModelNew.forward = _marked
"""

HONEST_UNLESS_TOGETHER = """
import builtins as _builtins
import sys as _sys

_honest = ModelNew.forward


def _forward(self, *args):  # zeros only when timed with the attention's replacement on too
    together = getattr(_builtins, "_kforge_test_attention_ran", False)
    _builtins._kforge_test_attention_ran = False
    frame = _sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "time_many" and together:
            return args[0] * 0
        frame = frame.f_back
    return _honest(self, *args)


ModelNew.forward = _forward
"""


def test_a_replacement_that_cheats_only_beside_the_other_regions_is_caught_together(
    vit: tuple[Path, dict[str, Any]],
) -> None:
    """Honest alone in the model and while verified; timed with every region swapped (the keep
    step's "together"), it computes nothing. The timed outputs of that variant are checked too."""
    out, manifest = vit
    mlp, attn = region(manifest, "Mlp"), region(manifest, "Attention")
    for name, task, code in (
        ("mark.py", attn["task"], MARKS_ITS_RUN),
        ("sly.py", mlp["task"], HONEST_UNLESS_TOGETHER),
    ):
        write_candidate(out, task, name)
        path = out / "candidates" / name
        path.write_text(path.read_text() + code)
    figures = measure(
        out,
        [entry(mlp, {"candidate": "candidates/sly.py"}), entry(attn, {"candidate": "candidates/mark.py"})],
    )
    assert figures.get("error", "").startswith("rejected end to end"), figures
    assert "the regions together in the model computed other values while timed" in figures["error"]
    assert "alone in the model" not in figures["error"]


CRASHES_WHEN_TIMED = """
import os as _os
import sys as _sys

_honest = ModelNew.forward


def _forward(self, *args):  # a CUDA graph's replay faulting, as torch.cuda.graph( did on GPT-2
    frame = _sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "time_many":
            print("dying while timed", file=_sys.stderr, flush=True)
            _os._exit(3)
        frame = frame.f_back
    return _honest(self, *args)


ModelNew.forward = _forward
"""


def test_a_measurement_worker_that_dies_is_started_again_without_the_graph_replaying_region(
    vit: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """A fault in the end-to-end worker loses the process (on the GPU a CUDA fault is sticky).
    The measurement runs again without the region that replays CUDA graphs; it says why, and
    the other region's figures keep their numbers."""
    from kforge.agent.model import run as model_run
    from kforge.agent.model import summary
    from kforge.agent.settings import RunSettings

    out, manifest = vit
    mlp, attn = region(manifest, "Mlp"), region(manifest, "Attention")
    write_candidate(out, mlp["task"], "dies.py")
    (out / "candidates" / "dies.py").write_text(
        (out / "candidates" / "dies.py").read_text() + CRASHES_WHEN_TIMED
    )
    regions = [
        entry(mlp, {"candidate": "candidates/dies.py", "strategy": "compile-default+cuda-graph"}),
        entry(attn, write_candidate(out, attn["task"], "fine.py")),
    ]
    assert model_run.attempts(regions, out) == [[0, 1], [1], []]
    options = model_run.ModelOptions(
        spec=VIT,
        out=out,
        settings=RunSettings(device="cpu", out=tmp_path / "runs"),
        compile_modes=(),
        trials=6,
    )
    said: list[Any] = []
    figures = model_run.measure(options, MODELS / "tiny_vit.py", manifest, regions, said.append)
    assert figures["dropped"] == {
        "0": "the measurement worker died with it in the patch (exited with code 3 before writing a result)"
    }
    assert any("measuring again without blocks.0.mlp" in str(line) for line in said), said
    assert "dying while timed" in (out / "worker-1.log").read_text()
    assert figures["verified_all"]["correct"] and set(figures["alone"]) == {"1"}
    assert set(figures["kept"]) <= {1} and figures["times_ms"]["eager"] > 0
    result = summary.figures(manifest, [r | {"speedup_vs_eager": 1.1} for r in regions], figures)
    table = summary._plain(summary.gains_table(regions, result))
    assert "no: left out" in table and "blocks.0.mlp: the measurement worker died" in table


def test_the_command_refuses_a_bad_spec_in_one_line(tmp_path: Path) -> None:
    run = subprocess.run(
        [
            *KFORGE,
            "model",
            str(tmp_path / "none.py"),
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        env=os.environ | {"COLUMNS": "200"},
        timeout=120,
    )
    assert run.returncode == 1
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "give a Python file" in lines[0], run.stderr


@pytest.mark.slow
def test_kforge_model_killed_mid_run_resumes_and_finishes_on_the_cpu(tmp_path: Path) -> None:
    """The whole command on the tiny ViT (its two largest regions get tasks): killed once the first task has
    landed, started again on the same folder, it keeps the extraction and that task, and
    finishes with a patch that imports, applies and computes what the model does."""
    out = tmp_path / "vit"
    argv = [*KFORGE, "model", VIT, "--out", str(out), "--device", "cpu", "--rounds", "1", "--candidates", "1"]
    argv += ["--min-share", "0", "--max-regions", "2", "--compile-modes", "default", "--trials", "6"]
    env = os.environ | {"COLUMNS": "200"}
    results = out / "batch" / "results.jsonl"
    first = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True
    )
    deadline = time.monotonic() + 600
    while not (results.is_file() and results.read_text().strip()) and first.poll() is None:
        assert time.monotonic() < deadline, "no task finished in 600 s"
        time.sleep(0.5)
    os.killpg(first.pid, signal.SIGTERM)
    first.wait(timeout=60)
    done_first = [json.loads(x)["task"] for x in results.read_text().splitlines()]
    again = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "(an earlier run)" in again.stderr and f"{done_first[0]}: done earlier" in again.stderr
    assert again.stdout.strip() == str(out / "kforge_patch.py")
    lines = [json.loads(x) for x in results.read_text().splitlines()]
    regions = json.loads((out / "manifest.json").read_text())["regions"]
    tasks = [Path(r["task"]).stem for r in regions if r["task"]]
    assert any("not among the 2 largest" in str(r["note"]) for r in regions), regions
    assert len(tasks) == 2 and sorted(x["task"] for x in lines) == sorted(tasks), lines  # each task once
    assert all(x["status"] in ("ok", "no_candidate", "unconfirmed") for x in lines)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["eager_ms"] and summary["compile_ms"]["default"] and summary["device"] == "cpu"
    assert len(patch.read(out / "kforge_patch.py")[0]) == summary["regions_kept"]  # empty when nothing won
    assert "<html" in (out / "report.html").read_text()
    loaded = spec.load(VIT)
    with torch.no_grad():
        want = loaded.model(*loaded.inputs)
        patch.apply(loaded.model, out)
        torch.testing.assert_close(loaded.model(*loaded.inputs), want, rtol=1e-4, atol=1e-5)


def test_chat_model_runs_the_pipeline_and_llm_sets_the_llm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from kforge.agent.chat.session import ChatError, Session
    from kforge.agent.chat.slash import dispatch
    from kforge.agent.model import run as model_run
    from kforge.agent.settings import RunSettings
    from rich.console import Console

    calls: list[Any] = []
    monkeypatch.setattr(
        model_run, "optimize_model", lambda options, say: calls.append(options) or say("done")
    )
    console = Console(file=io.StringIO(), width=200)
    session = Session(RunSettings(device="cpu", out=tmp_path / "runs"), console)
    dispatch(session, f"/model {VIT}")
    (options,) = calls
    assert options.spec == VIT and options.out == tmp_path / "kforge-models" / "tiny_vit-tiny"
    assert options.settings.out == options.out / "batch" / "runs"
    with pytest.raises(ChatError, match="the LLM is /llm NAME"):
        dispatch(session, "/model")
    dispatch(session, "/llm replay")
    assert session.settings.model == "replay"


def test_strategies_restrict_the_policy_on_every_regions_task(
    vit: tuple[Path, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``kforge model --strategies A,B`` hands the families to each region's optimize run."""
    import shutil

    from kforge.agent.model import run
    from kforge.agent.settings import RunSettings

    out, manifest = vit
    shutil.copytree(out, tmp_path / "m")
    seen: list[Any] = []

    def fake_run_task(entry: Any, options: Any) -> dict[str, Any]:
        seen.append(options.families)
        return {"task": entry.key, "status": "ok", "speedup_vs_eager": 1.0}

    monkeypatch.setattr(run, "run_task", fake_run_task)
    options = run.ModelOptions(spec=VIT, out=tmp_path / "m", settings=RunSettings(device="cpu"))
    options.families = ("tf32x3-gemm", "cuda-graph")
    lines = run.optimize_tasks(options, manifest, say=lambda message: None)
    assert len(lines) == len([r for r in manifest["regions"] if r["task"]]) >= 2
    assert seen == [("tf32x3-gemm", "cuda-graph")] * len(lines)
    done = subprocess.run([*KFORGE, "model", "--help"], capture_output=True, text=True, timeout=120)
    assert "--strategies" in done.stdout
