"""The gathered-table rewrite (``fx_gathers``): an embedding looked up per query and key pair,
then contracted with the queries or the attention weights (TiSASRec's time intervals, unseen10:
two 1.3 GB gathered tensors, 1.047x over compile), is contracted on the table instead. The
engine verifies the rewritten forward; a wrong one is caught; a table too large is left."""

from __future__ import annotations

from pathlib import Path

import torch
from kforge.agent.policy.features import task_features
from kforge.agent.policy.strategies import fx_gathers, fx_rewrite, registry
from kforge.tools.evaluate import evaluate_many
from kforge.tools.result import Status
from kforge.tools.static_checks import static_cheats
from kforge.tools.task import load_task

FIXTURE = Path(__file__).parent / "fixtures" / "tasks" / "time_interval_attention_small.py"
SPEC = "fx-rewrite[gathered-tables]"
PAIRS = Path(__file__).parent / "fixtures" / "tasks" / "message_passing_small.py"
LINEARS = "fx-rewrite[gathered-linears]"


def _candidate(path: Path, name: str = SPEC):
    """(task, analysis, the source of its eager FX candidate ``name``, or None)."""
    task = load_task(path, check_import=False)
    analysis = registry.analyse_task(task, task_features(task, None, "fp32", None))
    spec = next((s for s in registry.base_specs(analysis, "fp32", "cpu") if s.name == name), None)
    return task, analysis, (registry.build(task, spec, analysis) if spec is not None else None)


def test_the_contractions_run_on_the_table_and_the_pairs_are_never_gathered():
    _, analysis, source = _candidate(FIXTURE)
    assert analysis.fx is not None and analysis.fx[1] == ["gathered-tables"], analysis.notes
    assert source is not None
    method = analysis.fx[0].method
    # four contractions: two per layer (heads folded, then one head), none of the (B, L, L, D) lookups
    assert method.count("torch.gather(") == 2 and method.count(".scatter_add(") == 2, method
    assert "self.time_k(" not in method and "self.time_v(" not in method, method
    assert ".view(13, 2, 8)" in method and ".view(13, 1, 16)" in method  # per-head tables


def test_the_engine_verifies_the_rewrite_and_catches_heads_swapped(make_cpu_options):
    task, _, source = _candidate(FIXTURE)
    assert static_cheats(source, task.source, "fp32") == []
    broken = source.replace(".permute(1, 0, 2)", ".permute(1, 0, 2).flip(0)", 1)  # the keys' heads swapped
    assert broken != source
    good, bad = evaluate_many(task, [source, broken], make_cpu_options(trials=2, timing_trials=1))
    assert good.status == Status.OK and good.correct, good.log
    assert good.fp64_rel_err is not None and good.fp64_rel_err < 1e-5
    assert bad.status == Status.INCORRECT, bad.log


def test_a_table_with_many_more_rows_than_keys_is_left_gathered(tmp_path):
    """Past MAX_ROWS_PER_KEY rows a key, the product on the table costs more than the gather."""
    rows = fx_gathers.MAX_ROWS_PER_KEY * 10 + 1  # the fixture's 10 keys
    path = tmp_path / "wide_table.py"
    path.write_text(FIXTURE.read_text().replace("SPAN + 1, HIDDEN", f"{rows}, HIDDEN"))
    _, analysis, source = _candidate(path)
    assert source is None and (analysis.fx is None or "gathered-tables" not in analysis.fx[1])


def _computes_the_same(load_source, text: str, method: str, model, inputs, name: str) -> None:
    """The rewritten body as a ModelNew of the task ``text``, with ``model``'s weights: the
    same outputs on ``inputs``."""
    candidate = load_source(
        text
        + "\n\nclass ModelNew(Model):\n"
        + "\n".join("    " + line for line in method.splitlines())
        + "\n    def forward(self, *args):\n        return self._kforge_body(*args)\n",
        name,
    ).ModelNew()
    candidate.load_state_dict(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(candidate(*inputs), model(*inputs), rtol=1e-5, atol=1e-5)


def test_a_lookup_with_another_reader_keeps_it_and_still_computes_the_same(load_source):
    """The gathered tensor read beside the contractions stays; the contractions still move."""
    text = FIXTURE.read_text().replace(
        "        return x + self.single(x, time_k, time_v)",
        "        return x + self.single(x, time_k, time_v) + time_k.mean(dim=2)",
    )
    reference = load_source(text, "ref_gathers_reader")
    torch.manual_seed(0)
    model = reference.Model()
    inputs = reference.get_inputs()
    meta = reference.Model().to("meta")
    body, fired = fx_rewrite.rewrite(meta, [x.to("meta") for x in inputs])
    assert "gathered-tables" in fired and "self.time_k(" in body.method
    assert body.method.count("torch.gather(") == 2
    _computes_the_same(load_source, text, body.method, model, inputs, "cand_gathers_reader")


def test_the_policy_tries_the_rewrite_under_compile_first_and_tunes_it_into_one_graph():
    """The ranker has never seen the passes: without the analysis's evidence it put the rewrite
    after five others on TiSASRec. Its first tuned variant puts it in one CUDA graph (1.681 ->
    1.244 ms there, EGNN's 3.683 -> 3.197; H200)."""
    from kforge.agent.policy.base import Context
    from kforge.agent.policy.embedded import EmbeddedPolicy
    from kforge.tools.hardware import spec_for

    for path, name in ((FIXTURE, SPEC), (PAIRS, LINEARS)):
        task = load_task(path, check_import=False)
        context = Context(
            task=task, hardware=spec_for("H200"), precision="fp32", baseline=None, docs=[], attempts=[]
        )
        first = EmbeddedPolicy().ordered(context)[0]
        assert first.name == name + "+compile-default"
        analysis = registry.analyse_task(task, task_features(task, None, "fp32", None))
        assert registry.variants(first, analysis, "cuda")[0].name == name + "+compile-default+cuda-graph"


def test_a_linear_of_gathered_rows_runs_on_the_rows_verified_and_a_swapped_index_is_caught(make_cpu_options):
    """EGNN's edge MLP: Linear(cat([h[row], h[col], radial])) becomes the Linear's column blocks
    on h, then gathered, plus the radial's block and the bias: the (E, 33) concatenation is
    never built."""
    task, analysis, source = _candidate(PAIRS, LINEARS)
    assert source is not None and analysis.fx is not None, analysis.notes
    method = analysis.fx[0].method
    assert "torch.cat(" not in method and method.count("linear(") == 6, method  # 3 blocks, 2 layers
    assert static_cheats(source, task.source, "fp32") == []
    marker = "slice(0, 16, None))]\n"
    at = source.index(marker)
    line = source[at:].split("\n")[2]  # the gather of the first block's product: [row]
    assert "[getitem]" in line, line
    broken = source.replace(line, line.replace("[getitem]", "[getitem_1]"), 1)  # h[col] for h[row]
    good, bad = evaluate_many(task, [source, broken], make_cpu_options(trials=2, timing_trials=1))
    assert good.status == Status.OK and good.correct, good.log
    assert good.fp64_rel_err is not None and good.fp64_rel_err < 1e-5
    assert bad.status == Status.INCORRECT, bad.log


def test_rows_read_fewer_times_than_twice_are_left_to_the_linear(tmp_path):
    path = tmp_path / "few_pairs.py"  # 2 atoms a molecule: each row read once
    path.write_text(PAIRS.read_text().replace("= 3, 4, 5, 16", "= 3, 2, 5, 16"))
    task = load_task(path)  # a task that imports and runs
    assert task.name == "few_pairs"
    _, analysis, source = _candidate(path, LINEARS)
    assert source is None and (analysis.fx is None or "gathered-linears" not in analysis.fx[1])


LOOKUP_THEN_LINEAR = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.positions = nn.Embedding(8, 6)
        self.project = nn.Linear(6, 5)
        self.out = nn.Linear(6, 5, bias=False)
        self.eval()

    def forward(self, where, h, rows):
        return self.project(self.positions(where)).sum(1) + self.out(h[rows]).view(4, 10, 5).sum(1)


def get_inputs():
    return [torch.randint(0, 8, (4, 10)), torch.randn(7, 6), torch.randint(0, 7, (40,))]


def get_init_inputs():
    return []
"""


def test_a_linear_of_a_lookup_or_of_gathered_rows_alone_runs_on_the_rows(load_source):
    """Without a concatenation: a Linear of an embedding lookup with a 2-D index (the weight's
    8 rows read 40 times) and of ``h[rows]``, each the Linear of the rows, then the gather."""
    reference = load_source(LOOKUP_THEN_LINEAR, "ref_lookup_linear")
    torch.manual_seed(0)
    model = reference.Model()
    inputs = reference.get_inputs()
    body, fired = fx_rewrite.rewrite(reference.Model().to("meta"), [x.to("meta") for x in inputs])
    assert fired == ["gathered-linears"] and "self.positions(" not in body.method, body.method
    assert body.method.count("linear(") == 2 and "self.project(" not in body.method, body.method
    _computes_the_same(load_source, LOOKUP_THEN_LINEAR, body.method, model, inputs, "cand_lookup_linear")


MANY_FIELDS = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fields = nn.ModuleList(nn.Embedding(10, 4) for _ in range(FIELDS))
        self.mlp = nn.Linear(4 * FIELDS + DENSE, 8)
        self.eval()

    def forward(self, ids, dense):
        pieces = [emb(ids[:, i]) for i, emb in enumerate(self.fields)]
        return self.mlp(torch.cat([*pieces, dense], dim=1))


def get_inputs():
    return [torch.randint(0, 10, (64, FIELDS)), torch.randn(64, DENSE)]


def get_init_inputs():
    return []
"""


def test_a_linear_over_many_lookups_or_mostly_dense_features_is_left_whole(load_source):
    """A CTR model's first Linear over its fields' lookups would become a product and a sum per
    field in place of one GEMM (MAX_PIECES); a Linear whose work the gathered pieces do not halve
    is left too. Two small-table fields and no dense feature: taken."""
    for fields, dense, taken in ((6, 0, False), (1, 40, False), (2, 1, True)):
        head = f"FIELDS, DENSE = {fields}, {dense}\n"
        reference = load_source(head + MANY_FIELDS, f"ref_fields_{fields}_{dense}")
        inputs = reference.get_inputs()
        found = fx_rewrite.rewrite(reference.Model().to("meta"), [x.to("meta") for x in inputs])
        fired = found[1] if found is not None else []
        assert ("gathered-linears" in fired) is taken, (fields, dense, fired)
