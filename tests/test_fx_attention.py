"""The attention rewrite (``fx_attention``): hand-written attention in the forms models use
becomes ``scaled_dot_product_attention`` and computes the same function; the forms that are
not the same function are left alone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from kforge.agent.policy.features import task_features
from kforge.agent.policy.strategies import registry
from kforge.tools.evaluate import EvalOptions, evaluate_many
from kforge.tools.result import Result, Status
from kforge.tools.static_checks import static_cheats
from kforge.tools.task import load_task

TAIL = """
def get_inputs():
    return [torch.randn(2, 4, 16, 8), torch.randn(2, 4, 16, 8), torch.randn(2, 4, 16, 8)]


def get_init_inputs():
    return []
"""
REALISTIC_DEV = Path(__file__).resolve().parents[1] / "bench" / "realistic" / "dev"
REALISTIC_FIXTURES = Path(__file__).parent / "fixtures" / "tasks"  # small copies of realistic forms
HEAD = "import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"

GPT_CAUSAL = '''
batch, seq, embd, heads = 2, 16, 32, 4


class Model(nn.Module):
    """minGPT's causal self-attention: a tril buffer, masked_fill(-inf), dropout with p = 0."""

    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(embd, 3 * embd)
        self.c_proj = nn.Linear(embd, embd)
        self.attn_dropout = nn.Dropout(0.0)
        self.register_buffer("bias", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(embd, dim=2)
        k = k.view(B, T, heads, C // heads).transpose(1, 2)
        q = q.view(B, T, heads, C // heads).transpose(1, 2)
        v = v.view(B, T, heads, C // heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


def get_inputs():
    return [torch.randn(batch, seq, embd)]


def get_init_inputs():
    return []
'''

ADDITIVE_BMM = '''
class Model(nn.Module):
    """3-D batches through torch.bmm, an additive mask after the scale, nn.Softmax."""

    def __init__(self):
        super().__init__()
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, q, k, v, mask):
        scores = torch.bmm(q, torch.transpose(k, 1, 2)) / 4.0
        return torch.bmm(self.softmax(scores + mask), v)


def get_inputs():
    return [torch.randn(6, 16, 8), torch.randn(6, 12, 8), torch.randn(6, 12, 5), torch.randn(6, 16, 12)]


def get_init_inputs():
    return []
'''


TRANSFORMERS_EAGER = '''
def repeat_kv(x, groups):
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, groups, s, d).reshape(b, h * groups, s, d)


class Model(nn.Module):
    """transformers' eager attention with grouped key heads: repeat_kv, a causal mask added from
    a buffer, softmax with dtype=float32, as Qwen2 and Llama write it."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mask", torch.full((16, 16), float("-inf")).triu(1)[None, None])

    def forward(self, q, k, v):
        k, v = repeat_kv(k, 3), repeat_kv(v, 3)
        scores = torch.matmul(q, k.transpose(2, 3)) / 8**0.5
        scores = scores + self.mask[:, :, : q.shape[2], : k.shape[2]]
        return torch.matmul(nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype), v)


def get_inputs():
    return [torch.randn(2, 6, 16, 8), torch.randn(2, 2, 16, 8), torch.randn(2, 2, 16, 8)]


def get_init_inputs():
    return []
'''


BLOOM = (REALISTIC_FIXTURES / "alibi_small.py").read_text()  # BLOOM's eager attention core, small


T5 = '''
class Model(nn.Module):
    """T5's attention core: unscaled scores, a position bias plus the padding mask added in
    place (the bias built on ``scores.device``), softmax of ``scores.float()`` cast back with
    ``type_as``."""

    def __init__(self):
        super().__init__()
        self.position_bias = nn.Parameter(torch.randn(1, 4, 16, 16))

    def forward(self, q, k, v, mask):
        scores = torch.matmul(q, k.transpose(3, 2))
        position_bias = self.position_bias.to(scores.device) + mask
        scores += position_bias
        probs = nn.functional.softmax(scores.float(), dim=-1).type_as(scores)
        return torch.matmul(probs, v)


def get_inputs():
    mask = torch.where(torch.arange(16) < 13, 0.0, torch.finfo(torch.float32).min).expand(2, 1, 1, 16)
    return [torch.randn(2, 4, 16, 8), torch.randn(2, 4, 16, 8), torch.randn(2, 4, 16, 8), mask]


def get_init_inputs():
    return []
'''

SHAPE_UNPACKED = '''
class Model(nn.Module):
    """Shapes unpacked as transformers and diffusers write them: ``(*x.shape[:-1], -1, d)`` and
    ``int(c)``, which plain FX tracing cannot follow."""

    def forward(self, x):
        hidden_shape = (*x.shape[:-1], -1, 8)
        q = x.view(hidden_shape).transpose(1, 2)
        b, h, n, c = q.shape
        scores = torch.matmul(q, q.transpose(-1, -2)) * int(c) ** -0.5
        return torch.matmul(scores.softmax(dim=-1), q)


def get_inputs():
    return [torch.randn(2, 16, 32)]


def get_init_inputs():
    return []
'''


SLIDING = (REALISTIC_FIXTURES / "sliding_window_small.py").read_text()  # Mistral's local attention


CHANNELS_FIRST = '''
class Model(nn.Module):
    """Stable Diffusion's VAE attention block (CompVis ldm's AttnBlock), small: q, k, v as 1x1
    convolutions, q as (b, hw, c), k as (b, c, hw), the product v @ probs^T."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = (nn.Conv2d(16, 16, 1) for _ in range(3))

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        b, c, h, w = q.shape
        q = q.reshape(b, c, h * w).permute(0, 2, 1)
        k = k.reshape(b, c, h * w)
        w_ = torch.bmm(q, k) * (int(c) ** (-0.5))
        w_ = torch.nn.functional.softmax(w_, dim=2)
        v = v.reshape(b, c, h * w)
        h_ = torch.bmm(v, w_.permute(0, 2, 1))
        return x + h_.reshape(b, c, h, w)


def get_inputs():
    return [torch.randn(2, 16, 6, 5)]


def get_init_inputs():
    return []
'''


DIFFUSERS = '''
class Model(nn.Module):
    """diffusers' classic AttnProcessor, small: heads folded into the batch (``head_to_batch_dim``,
    which asks ``tensor.ndim``), scores as ``baddbmm(torch.empty(...), q, k^T, beta=0,
    alpha=scale)`` (beta 0: the empty operand is ignored), cross-attention to 7 tokens."""

    def __init__(self):
        super().__init__()
        self.heads, self.scale = 4, 8**-0.5
        self.to_q, self.to_k, self.to_v = nn.Linear(32, 32), nn.Linear(24, 32), nn.Linear(24, 32)

    def head_to_batch_dim(self, tensor):
        if tensor.ndim == 3:
            batch_size, seq_len, dim = tensor.shape
        tensor = tensor.reshape(batch_size, seq_len, self.heads, dim // self.heads).permute(0, 2, 1, 3)
        return tensor.reshape(batch_size * self.heads, seq_len, dim // self.heads)

    def forward(self, x, context):
        query = self.head_to_batch_dim(self.to_q(x))
        key, value = self.head_to_batch_dim(self.to_k(context)), self.head_to_batch_dim(self.to_v(context))
        empty = torch.empty(query.shape[0], query.shape[1], key.shape[1], dtype=query.dtype, device=query.device)
        scores = torch.baddbmm(empty, query, key.transpose(-1, -2), beta=0, alpha=self.scale)
        probs = scores.softmax(dim=-1)
        out = torch.bmm(probs, value)
        b, n, d = out.shape
        return out.reshape(b // self.heads, self.heads, n, d).permute(0, 2, 1, 3).reshape(b // self.heads, n, d * self.heads)


def get_inputs():
    return [torch.randn(2, 16, 32), torch.randn(2, 7, 24)]


def get_init_inputs():
    return []
'''


MULTI_QUERY = '''
class Model(nn.Module):
    """Falcon-7B's multi-query attention, small: one key and one value head for 6 query heads,
    broadcast by the matmuls (not repeated), the scores divided in place, an additive mask."""

    def forward(self, q, k, v, mask):
        scores = q @ k.transpose(-1, -2)
        scores /= math.sqrt(8)
        probs = F.softmax(scores + mask, dim=-1, dtype=q.dtype)
        return probs @ v


def get_inputs():
    mask = torch.where(torch.rand(2, 1, 16, 16) < 0.2, -1e4, 0.0)
    return [torch.randn(2, 6, 16, 8), torch.randn(2, 1, 16, 8), torch.randn(2, 1, 16, 8), mask]


def get_init_inputs():
    return []
'''


def _forward(body: str) -> str:
    return HEAD + "class Model(nn.Module):\n    def forward(self, q, k, v):\n" + body + TAIL


CLIP_MASK = (
    "        mask = torch.full((16, 16), torch.finfo(q.dtype).min, device=q.device)\n"
    "        cond = torch.arange(mask.size(-1), device=q.device)\n"
    "        mask.masked_fill_(cond < (cond + 1).view(mask.size(-1), 1), 0)\n"
    "        mask = mask.to(q.dtype)[None, None, :, :].expand(2, 1, 16, 16)\n"
    "        s = torch.matmul(q, k.transpose(-1, -2)) * 0.25 + mask\n"
    "        return torch.matmul(torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype), v)\n"
)

MATCHES = {
    "unscaled": _forward("        return torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v\n"),
    "method_softmax_scaled": _forward(
        "        s = torch.matmul(q, k.transpose(-2, -1)) * 0.125\n        return torch.matmul(s.softmax(-1), v)\n"
    ),
    "gpt_causal": HEAD + GPT_CAUSAL,
    "inline_triu": _forward(
        "        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
        "        m = torch.triu(torch.ones(16, 16, device=q.device, dtype=torch.bool), diagonal=1)\n"
        "        return torch.softmax(s.masked_fill(m, float('-inf')), dim=-1) @ v\n"
    ),
    "inline_tril_eq": _forward(
        "        m = torch.tril(torch.ones(16, 16, device=q.device)) == 0\n"
        "        return torch.softmax((q @ k.transpose(-2, -1)).masked_fill(m, -math.inf), dim=-1) @ v\n"
    ),
    "transformers_eager_gqa": HEAD + TRANSFORMERS_EAGER,
    "repeat_interleave_gqa": HEAD
    + TRANSFORMERS_EAGER.replace(
        "k, v = repeat_kv(k, 3), repeat_kv(v, 3)",
        "k, v = k.repeat_interleave(3, dim=1), v.repeat_interleave(3, 1)",
    ),
    "additive_bias_second_diagonal": HEAD + TRANSFORMERS_EAGER.replace(".triu(1)", ".triu(2)"),
    "channels_first_vae": HEAD + CHANNELS_FIRST,
    "sliding_window": SLIDING,
    "arange_causal": SLIDING.replace("(j > i - 7)", "(j > i - 1000)"),
    "sliding_window_from_an_input": SLIDING.replace(
        "(j > i - 7)", "(j > i - 7 - (q[0, 0, 0, 0] > 9).long())"
    ),
    "t5_position_bias": HEAD + T5,
    "shape_unpacked": HEAD + SHAPE_UNPACKED,
    "bloom_alibi": BLOOM,
    "falcon_multi_query": HEAD + MULTI_QUERY,
    "diffusers_baddbmm_beta_zero": HEAD + DIFFUSERS,
    # beta 0: not even NaN in the ignored operand reaches the scores (torch.baddbmm's contract)
    "diffusers_baddbmm_beta_zero_nan_operand": HEAD
    + DIFFUSERS.replace("torch.empty(", "torch.full((").replace(
        "key.shape[1], dtype", "key.shape[1]), float('nan'), dtype"
    ),
    "bloom_alibi_no_scale": BLOOM.replace(", beta=1.0, alpha=1 / math.sqrt(DIM))", ")"),
    "fill_then_bias_not_causal": _forward(  # the fill keeps an entry past the diagonal: joined, not causal
        "        m = torch.triu(torch.ones(16, 16, device=q.device, dtype=torch.bool), diagonal=2)\n"
        "        s = (q @ k.transpose(-2, -1)) * 0.3 + q[..., :1, :1].transpose(-2, -1).expand(2, 4, 1, 16)\n"
        "        return torch.softmax(s.masked_fill(m, float('-inf')), dim=-1) @ v\n"
    ),
    # DeBERTa's scale: a tensor the forward makes from numbers, which the tracer keeps as a
    # constant; ModelNew must make it too
    "tensor_made_in_the_forward": _forward(
        "        s = torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v\n"
        "        return s / torch.sqrt(torch.tensor(q.size(-1), dtype=torch.float))\n"
    ),
    # CLIP's causal mask (transformers' _make_causal_mask): full(finfo.min), then masked_fill_ in
    # place; the write is what makes it causal, and dead-code elimination must not drop it
    "clip_causal_in_place": _forward(CLIP_MASK),
    "clip_in_place_not_causal": _forward(CLIP_MASK.replace("(cond + 1)", "(cond + 2)")),
    "triu_second_diagonal": _forward(  # keeps one entry past the diagonal: not causal, a boolean mask
        "        m = torch.triu(torch.ones(16, 16, device=q.device, dtype=torch.bool), diagonal=2)\n"
        "        return torch.softmax((q @ k.transpose(-2, -1)).masked_fill(m, float('-inf')), dim=-1) @ v\n"
    ),
}
LEFT_ALONE = {
    "probs_returned": _forward(
        "        p = torch.softmax(q @ k.transpose(-2, -1), dim=-1)\n        return p @ v, p\n"
    ),
    "finite_fill": _forward(
        "        s = (q @ k.transpose(-2, -1)).masked_fill(q[..., :1] > 0, -1e9)\n"
        "        return torch.softmax(s, dim=-1) @ v\n"
    ),
    "bloom_finite_fill_not_causal": BLOOM.replace("diagonal=1)", "diagonal=2)"),
    "bloom_beta_not_one": BLOOM.replace("beta=1.0", "beta=0.5"),
    # one key head broadcast over the batch, not the heads: no grouping means that
    "keys_broadcast_over_the_batch": HEAD
    + MULTI_QUERY.replace(
        "torch.randn(2, 1, 16, 8), torch.randn(2, 1, 16, 8)",
        "torch.randn(1, 6, 16, 8), torch.randn(1, 6, 16, 8)",
    ),
    "diffusers_scaled_twice": HEAD
    + DIFFUSERS.replace("probs = scores.softmax", "probs = (scores * 0.5).softmax"),
    "bloom_scaled_after_the_bias": BLOOM.replace(", beta=1.0, alpha=1 / math.sqrt(DIM))", ") * 0.3"),
    "bloom_mask_per_batch_over_the_view": BLOOM.replace(
        "torch.triu(torch.ones(LENGTH, LENGTH, dtype=torch.bool), diagonal=1)",
        "torch.rand(BATCH, HEADS, LENGTH, LENGTH) < 0.2",
    ).replace("torch.finfo(scores.dtype).min", "float('-inf')"),
    "softmax_over_queries": _forward("        return torch.softmax(q @ k.transpose(-2, -1), dim=-2) @ v\n"),
    "mask_before_scale": _forward(
        "        s = (q @ k.transpose(-2, -1) + q[..., :1]) / 8.0\n        return torch.softmax(s, dim=-1) @ v\n"
    ),
    "not_transposed_k": _forward("        return torch.softmax(q @ k.mT.mT.transpose(0, 1), dim=-1) @ v\n"),
    "softmax_cast_to_float64": HEAD
    + TRANSFORMERS_EAGER.replace("dtype=torch.float32", "dtype=torch.float64"),
    "probs_cast_to_float64": HEAD
    + TRANSFORMERS_EAGER.replace(".to(q.dtype), v)", ".to(torch.float64), v.double())"),
}


def _task(tmp_path: Path, name: str, source: str):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    task = load_task(path, check_import=False)
    analysis = registry.analyse_task(task, task_features(task, None, "fp32", None))
    return task, analysis


@pytest.mark.parametrize("name", sorted(MATCHES))
def test_hand_written_attention_becomes_sdpa_and_computes_the_same(
    tmp_path: Path, name: str, load_source
) -> None:
    task, analysis = _task(tmp_path, name, MATCHES[name])
    assert analysis.fx is not None and "attention-sdpa" in analysis.fx[1], analysis.notes
    spec = next(s for s in registry.base_specs(analysis, "fp32", "cpu") if s.family == "fx-rewrite")
    source = registry.build(task, spec, analysis)
    assert "scaled_dot_product_attention" in source and "softmax" not in analysis.fx[0].method
    assert static_cheats(source, task.source, "fp32") == []
    reference = load_source(MATCHES[name], f"ref_{name}")
    candidate = load_source(source, f"cand_{name}")
    torch.manual_seed(0)
    ref = reference.Model(*reference.get_init_inputs()).eval()
    new = candidate.ModelNew(*reference.get_init_inputs()).eval()
    new.load_state_dict(ref.state_dict())
    inputs = reference.get_inputs()
    with torch.no_grad():
        torch.testing.assert_close(new(*inputs), ref(*inputs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(LEFT_ALONE))
def test_attention_that_is_not_the_same_function_is_left_alone(tmp_path: Path, name: str) -> None:
    _, analysis = _task(tmp_path, name, LEFT_ALONE[name])
    assert analysis.fx is None or "attention-sdpa" not in analysis.fx[1], analysis.fx


@pytest.mark.slow
def test_the_rewritten_attention_is_ok_by_the_evaluator(
    tmp_path: Path,
    make_session_cpu_options: Callable[..., EvalOptions],
    loaded_host_only: Callable[[Result], None],
) -> None:
    """Judged like any candidate: the judge's inputs and weights, float64, the timing checks."""
    task, analysis = _task(tmp_path, "gpt_causal", MATCHES["gpt_causal"])
    spec = next(s for s in registry.base_specs(analysis, "fp32", "cpu") if s.family == "fx-rewrite")
    (result,) = evaluate_many(task, [registry.build(task, spec, analysis)], make_session_cpu_options())
    if result.status != Status.OK:  # the one rejection a loaded CPU host may cause
        loaded_host_only(result)
    assert result.fp64_rel_err is not None and result.fp64_rel_err < 1e-5


@pytest.mark.parametrize(
    ("name", "causal"),
    [
        ("inline_triu", True),
        ("inline_tril_eq", True),
        ("gpt_causal", True),
        ("triu_second_diagonal", False),
        ("transformers_eager_gqa", True),
        ("additive_bias_second_diagonal", False),
    ],
)
def test_a_causal_mask_built_in_the_forward_becomes_is_causal(
    tmp_path: Path, name: str, causal: bool
) -> None:
    """A mask built from ones in the forward, or minGPT's tril buffer (its value read from the
    Model built on the CPU), is causal; one that keeps an entry past the diagonal is not."""
    _, analysis = _task(tmp_path, name, MATCHES[name])
    method = analysis.fx[0].method
    assert ("is_causal = True" in method) == causal and ("attn_mask" in method) != causal, method


def test_a_forward_plain_tracing_cannot_follow_is_traced_with_shapes_known(load_source) -> None:
    """The fallback is what makes the shape-unpacking forward match: plain tracing fails on it."""
    from kforge.tools.fx_source import trace

    module = load_source(HEAD + SHAPE_UNPACKED, "shape_unpacked_plain")
    with pytest.raises(Exception, match="Proxy"):
        trace(module.Model())
    gm = trace(module.Model(), meta_inputs=[x.to("meta") for x in module.get_inputs()])
    assert any(n.target == "softmax" for n in gm.graph.nodes)


def test_size_of_dim_zero_is_a_number_when_traced_with_shapes_known(load_source) -> None:
    """DeBERTa's ``query_layer.size(0) // heads`` beside a shape unpacked: FX's MetaTracer reads
    ``size(0)`` as ``size()`` (``if dim``); kforge's gives the number, and the graph computes
    the same."""
    from kforge.tools.fx_source import trace

    source = HEAD + SHAPE_UNPACKED.replace(
        "        return torch.matmul(scores.softmax(dim=-1), q)",
        "        return torch.matmul(scores.softmax(dim=-1), q).repeat(x.size(0) // 2, 1, 1, 1)",
    )
    module = load_source(source, "size_zero")
    x = module.get_inputs()[0]
    gm = trace(module.Model(), meta_inputs=[x.to("meta")])
    torch.testing.assert_close(gm(x), module.Model()(x))


@pytest.mark.parametrize(
    ("name", "window"), [("sliding_window", 7), ("arange_causal", 0), ("sliding_window_from_an_input", None)]
)
def test_a_mask_built_from_aranges_is_read_for_its_window(
    tmp_path: Path, name: str, window: int | None, load_source
) -> None:
    """A mask built in the forward from no input's values is computed on the CPU: a causal one
    becomes ``is_causal`` (its finite fill taken); a sliding window stays SDPA's mask, marked
    with its width for the flash kernel. One that reads an input's values is not marked."""
    from kforge.agent.policy.strategies import fx_attention
    from kforge.agent.policy.strategies.fx_rewrite import _Shapes, trace

    _, analysis = _task(tmp_path, name, MATCHES[name])
    method = analysis.fx[0].method
    assert ("is_causal = True" in method) == (window == 0), method
    module = load_source(MATCHES[name], f"window_{name}")
    inputs = [t.to("meta") for t in module.get_inputs()]
    gm = trace(module.Model(), meta_inputs=inputs)
    _Shapes(gm).run(*inputs)
    assert fx_attention.sdpa_attention(gm) == 1
    marked = [
        n.meta[fx_attention.CAUSAL_WINDOW] for n in gm.graph.nodes if fx_attention.CAUSAL_WINDOW in n.meta
    ]
    assert marked == ([window] if window else []), marked


def test_t5s_scores_read_for_their_device_are_not_computed_any_more(tmp_path: Path) -> None:
    """T5 builds its bias on ``scores.device``: the rewrite reads q's device instead, so the
    (B, H, L, S) scores matmul is gone from the candidate, not kept alive for its device."""
    _, analysis = _task(tmp_path, "t5", MATCHES["t5_position_bias"])
    method = analysis.fx[0].method
    assert "matmul" not in method and "scale = 1.0" in method, method
    assert "add.clamp(min = -2.3e+38)" in method and "attn_mask = where" in method, method  # floored


@pytest.mark.parametrize("name", ["bloom_alibi", "fill_then_bias_not_causal"])
def test_a_fill_and_a_bias_join_in_one_mask_marked_when_the_fill_is_causal(
    tmp_path: Path, name: str, load_source
) -> None:
    """BLOOM's ALiBi bias and causal fill (its finite minimum taken because the mask is proved
    causal) become one ``where(mask, -inf, bias)`` over q's flat batch, the views dropped; the
    mask carries the bias for the flash kernel only when it is causal."""
    from kforge.agent.policy.strategies import fx_attention
    from kforge.agent.policy.strategies.fx_rewrite import _Shapes, trace

    _, analysis = _task(tmp_path, name, MATCHES[name])
    method = analysis.fx[0].method
    assert "torch.where(" in method and "attn_mask = where" in method and "view" not in method, method
    module = load_source(MATCHES[name], f"marked_{name}")
    with torch.device("meta"):
        model = module.Model()
    gm = trace(model)
    gm.meta["buffers"] = lambda: dict(module.Model().named_buffers())
    _Shapes(gm).run(*[t.to("meta") for t in module.get_inputs()])
    assert fx_attention.sdpa_attention(gm) == 1
    marked = [n for n in gm.graph.nodes if fx_attention.CAUSAL_KEY_BIAS in n.meta]
    assert len(marked) == (name == "bloom_alibi"), gm.graph


@pytest.mark.parametrize("name", ["transformers_eager_gqa", "repeat_interleave_gqa", "falcon_multi_query"])
def test_repeated_key_heads_become_enable_gqa_on_the_unrepeated_tensors(tmp_path: Path, name: str) -> None:
    """Key and value heads repeated for grouped-query attention (transformers' repeat_kv, or
    repeat_interleave), or one head broadcast by the matmul (Falcon), are SDPA's enable_gqa over
    the tensors before the repeat: no repeated copy is made (the outputs match:
    test_hand_written_attention_becomes_sdpa...)."""
    _, analysis = _task(tmp_path, name, MATCHES[name])
    method = analysis.fx[0].method
    assert "enable_gqa = True" in method and "expand" not in method and "repeat" not in method, method


@pytest.mark.parametrize(
    "name", ["llama_eager_attention", "qwen_gqa_attention_eager", "bloom_alibi_attention"]
)
def test_transformers_eager_attention_at_real_shapes_goes_to_the_3xtf32_flash_kernel(name: str) -> None:
    """The realistic development tasks in transformers' eager form (Llama 3.2 3B, Qwen2 7B:
    head dim 128, grouped heads; BLOOM-560m: ALiBi over flat heads): the 3xTF32 pass puts the
    SDPA the attention pass made on kforge's flash kernel, causal, over the unrepeated key and
    value heads (with BLOOM's bias as the kernel's key bias), and the policy gives the family
    its attention bonus (round one)."""
    from kforge.agent.policy import embedded

    task = load_task(REALISTIC_DEV / f"{name}.py")
    analysis = registry.analyse_task(task, task_features(task, None, "fp32", None))
    assert analysis.gemm3 is not None, analysis.notes
    assert "_kforge_sdpa3(q, k, v, True, " in analysis.gemm3[0].method, analysis.gemm3[0].method
    bonus = embedded.evidence(analysis).get("tf32x3-gemm")
    assert bonus == embedded.GEMMS_UNDER_COMPILE + embedded.ATTENTION_ON_KERNEL


def test_clips_mask_written_in_place_is_read_with_its_write(tmp_path: Path) -> None:
    """The mask is ``full(finfo.min)`` made causal by ``masked_fill_``: read with the write it is
    causal (the mask is not built any more); keeping one key past the diagonal, it is an additive
    mask, and the write stays in the candidate (it computes the same: the test above)."""
    _, analysis = _task(tmp_path, "clip", MATCHES["clip_causal_in_place"])
    method = analysis.fx[0].method
    assert "is_causal = True" in method and "masked_fill_" not in method and "full" not in method, method
    _, analysis = _task(tmp_path, "clip_not_causal", MATCHES["clip_in_place_not_causal"])
    method = analysis.fx[0].method
    assert "is_causal" not in method and "attn_mask" in method and "masked_fill_" in method, method


def test_a_buffer_that_is_not_causal_stays_a_boolean_mask(tmp_path: Path) -> None:
    """minGPT's forward with a buffer that keeps one entry past the diagonal (tril with
    diagonal=1): not SDPA's causal mask."""
    source = MATCHES["gpt_causal"].replace(
        "torch.tril(torch.ones(seq, seq))", "torch.tril(torch.ones(seq, seq), 1)"
    )
    _, analysis = _task(tmp_path, "gpt_not_causal", source)
    method = analysis.fx[0].method
    assert "is_causal" not in method and "attn_mask" in method, method
