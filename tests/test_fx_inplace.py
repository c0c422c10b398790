"""Dead-code elimination that keeps in-place writes which are seen (``fx_inplace``): FX counts a
method call as pure and drops ``x.masked_fill_(...)`` whose result is unused, which changed
CLIP's causal mask into a mask of the dtype's minimum."""

from __future__ import annotations

import torch
import torch.fx
from kforge.agent.policy.strategies import fx_inplace


def _graph(fn) -> torch.fx.GraphModule:
    return torch.fx.symbolic_trace(fn)


def _ops(gm: torch.fx.GraphModule) -> list[str]:
    return [
        str(n.target) if n.op == "call_method" else getattr(n.target, "__name__", str(n.target))
        for n in gm.graph.nodes
        if n.op in ("call_method", "call_function")
    ]


def test_a_write_read_later_through_a_view_or_to_an_input_stays_and_a_dead_one_goes() -> None:
    def read_later(x):
        mask = torch.zeros(4, 4, device=x.device)
        view = mask[None]
        mask.masked_fill_(x > 0, 1.0)  # read below through the view taken before it
        return view * 2

    def to_an_input(x):
        x.mul_(2)  # the caller's tensor: seen outside
        return torch.ones(3)

    def dead(x):
        t = x * 3
        t += 1  # nothing reads t afterwards
        t.clamp_(0, 1)
        return x + 1

    kept = _graph(read_later)
    fx_inplace.eliminate_dead_code(kept.graph)
    kept.recompile()
    x = torch.randn(4, 4)
    assert "masked_fill_" in _ops(kept) and torch.equal(kept(x), read_later(x))
    plain = _graph(read_later)
    plain.graph.eliminate_dead_code()  # FX's own: the write goes, the result changes
    plain.recompile()
    assert "masked_fill_" not in _ops(plain) and not torch.equal(plain(x), read_later(x))

    inputs = _graph(to_an_input)
    fx_inplace.eliminate_dead_code(inputs.graph)
    assert "mul_" in _ops(inputs)

    gone = _graph(dead)
    fx_inplace.eliminate_dead_code(gone.graph)
    assert _ops(gone) == ["add"], _ops(gone)


def test_written_names_every_in_place_form() -> None:
    def forms(x, y):
        a = x * 1
        a.clamp_(0, 1)
        b = x * 1
        b.masked_fill_(y > 0, 0.0)
        c = x * 1
        torch.relu_(c)
        d = x * 1
        torch.nn.functional.relu(d, inplace=True)
        return a, b, c, d

    gm = _graph(forms)
    writes = [n for n in gm.graph.nodes if fx_inplace.written(n) is not None]
    assert len(writes) == 4, [n.format_node() for n in writes]


class _Stateful(torch.nn.Module):
    """KernelBench's vanilla RNN (L3 33) in small: the forward keeps its hidden state on self."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = torch.randn(2, 8)
        self.i2h = torch.nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.hidden = torch.tanh(self.i2h(torch.cat((x, self.hidden.to(x.device)), 1)))
        return self.hidden * 2


class _StatefulInside(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.inner.last = x.sum(1)  # state on a submodule, only written
        return x + 1


class _RevIN(torch.nn.Module):
    """PatchTST's RevIN (unseen9) in small: statistics kept on ``self`` from ``norm`` to
    ``denorm`` within one call; ``__init__`` runs the forward once (a calibration pass), so
    they hold a value before any trace."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        with torch.no_grad():
            self(torch.randn(2, 4, 8))

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        self.mean = x.mean(1, keepdim=True).detach()
        self.stdev = torch.sqrt(x.var(1, keepdim=True, unbiased=False) + 1e-5).detach()
        return (x - self.mean) / self.stdev

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self._norm(x)) * self.stdev + self.mean


def test_module_state_read_before_it_is_written_is_not_traced() -> None:
    """The graph cannot write ``self.hidden``: the RNN reads last call's value, and a rewrite
    would drop the assignment. Both tracers refuse it, by name. The traced module once held
    the tracing proxy under that name, which shape propagation then read (it added nodes to
    the graph and gave no shapes): no proxy is left on it now."""
    import pytest
    from kforge.tools.fx_source import trace

    model = _Stateful().to("meta")
    before = model.hidden
    with pytest.raises(torch.fx.proxy.TraceError, match=r"self\.hidden.*reads before it assigns"):
        trace(model, meta_inputs=[torch.randn(2, 8, device="meta")])
    assert model.hidden is before


def test_module_state_written_before_it_is_read_is_traced() -> None:
    """State the forward writes and reads back within one call (PatchTST's RevIN, whose trace
    was refused on unseen9, so its 255-GFLOP encoder got no rewrite), or only writes, is an
    edge of the graph: traced, computing the forward, with the module's attributes as they
    were (no proxy left on it)."""
    from kforge.tools.fx_source import trace

    torch.manual_seed(0)
    for model, x in ((_RevIN(), torch.randn(3, 5, 8)), (_StatefulInside(), torch.randn(2, 8))):
        kept = {p: dict(vars(m)) for p, m in model.named_modules()}
        gm = trace(model, meta_inputs=[x.to("meta")])
        assert {p: dict(vars(m)) for p, m in model.named_modules()} == kept
        with torch.no_grad():
            torch.testing.assert_close(gm(x), model(x), rtol=0, atol=0)
        assert not any(n.op == "get_attr" and n.target in ("mean", "stdev") for n in gm.graph.nodes)


CACHED_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        if getattr(self, "scale", None) is None:  # the first call's statistic, kept for every call after
            self.scale = x.abs().mean()
        return x * self.scale * 1.0


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
"""


def test_state_the_tracer_cannot_see_carried_over_is_caught_by_the_judge(tmp_path, make_cpu_options) -> None:
    """The attack on the rule above: a forward that keeps its first call's value behind
    ``getattr(self, "scale", None)``. The attribute did not exist when traced, so the trace
    takes the first call's path, and the rewrite computes a fresh scale every call. The
    reference keeps the first. The judge runs both over several calls with fresh inputs, so
    the rewrite is caught as incorrect, never timed as a speedup."""
    from kforge.agent.policy.features import task_features
    from kforge.agent.policy.strategies import fx_rewrite, registry
    from kforge.tools.evaluate import evaluate_many
    from kforge.tools.result import Status
    from kforge.tools.task import load_task

    path = tmp_path / "cached_scale.py"
    path.write_text(CACHED_TASK)
    task = load_task(path, check_import=False)
    analysis = registry.analyse_task(task, task_features(task, None, "fp32", None))
    assert analysis.fx is not None and "identities" in analysis.fx[1]  # traced: the `* 1.0` removed
    source = registry.build(task, fx_rewrite.spec(analysis.fx[1]), analysis)
    (result,) = evaluate_many(load_task(path), [source], make_cpu_options(trials=3, timing_trials=1))
    assert result.status is Status.INCORRECT and not result.correct, result.log[-1500:]
