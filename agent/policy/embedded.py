"""The embedded strategy policy: no LLM. Each candidate is the task's own module with a
strategy applied to its forward (torch.compile modes, CUDA graphs, cuDNN autotuning and
channels-last, FX algebraic rewrites, prior Triton kernels, precision lowering when allowed),
evaluated like any other candidate.

plan: features of the task (ops, FLOPs, bytes, roofline position, measured baseline) and
the applicable strategies ordered by the fitted cost model. propose: the next untried
strategies; from round 2 on, tuned variants of the winners first (of the attempt the user
chose, when there is one). analyse: the measured variants side by side.
"""

from __future__ import annotations

from collections.abc import Collection

from ...tools.result import Status
from ...tools.task import source_hash
from .base import AttemptView, Context, Proposal
from .embedded_analysis import analysis, plan_text
from .features import TaskFeatures, task_features
from .ranker import RankerModel, fixed_order, load_model
from .ranker_data import features_line
from .strategies.registry import TaskAnalysis, analyse_task, base_specs, build, kernels_alone, variants
from .strategies.source import Spec

SAFE_FAMILIES = ("compile-default", "cuda-graph")
# Device time a family costs beyond one evaluation (GEMM/conv autotuning takes minutes), in
# the ranker's log2-speedup units: a small predicted gain does not pay for it.
COST_PENALTY = {"compile-max-autotune": 0.15, "compile-max-autotune-no-cudagraphs": 0.1, "tf32": 0.05}
CATALOGUE_DEPTH = 3
# Families that run eager's own kernels in eager's order, so they compute eager's answer. Where
# every candidate so far computed another (all incorrect: KernelBench's Mamba2, L3 49, sums
# exponentials near 1e13 with mixed signs, and each torch.compile mode reordered them past
# rtol 1e-4), the next round tries these first.
EAGER_NUMERICS = ("cuda-graph",)
# What the task's analysis found and the ranker's features cannot see, in the same units: a
# scaled_dot_product_attention the 3xTF32 pass put on kforge's flash kernel (1.29-1.43x over
# PyTorch's fp32 attention at GPT-2's and ViT's shapes, 4.6x with Llama's grouped heads, H200,
# bench/bench_tf32x3_attention.py). Without it the ranker put compile and CUDA graphs first on
# Llama's attention region, and its one round never tried the kernel (2026-11-26).
ATTENTION_ON_KERNEL = 1.0
# Convolutions the 3xTF32 pass put on kforge's NHWC kernel with a BatchNorm folded in (the
# residual and ReLU go into its epilogue too): ResNet-50 whole at batch 32 took 8.14 ms against
# eager's 11.79 (1.45x; H100, bench/bench_resnet_convs.py, 2026-11-26). The ranker learned the
# family on the NCHW kernel it replaced (0.54-1.36x cuDNN) and put it fourth on ResNet's
# bottleneck, after two compile modes and a CUDA graph: a region's one round never measured it.
# Without a norm to fold, no bonus: KernelBench's GoogleNet (L3 7, batch 10, small convolutions,
# no norm) took 7.81 ms on the kernel against eager's 4.00 (H100, same day).
CONV_ON_KERNEL = 1.0
# A norm, cross-entropy or softmax the template pass put on kforge's Triton kernels (not a
# hand-written attention's softmax: the algebraic passes before it made that SDPA). The ranker
# has never seen the family (UNSEEN_SCORE), so it came fifth on every task it applies to and a
# three-candidate round never measured it. It goes second, after the ranker's first choice.
# Only where the task is memory-bound: on compute-bound tasks the patterns are a small share of
# the time. On the realistic sets' compute-bound blocks the template was measured 24 times (23
# blocks, H100, 2026-11-26/27: a LayerNorm beside GEMMs or attention) and was never the best:
# 0.70-1.21x over eager where the best reached 1.15-5.56x, and its round-one place pushed out
# the 3xTF32 GEMM (Conformer's, which then had no round left to go under compile and a graph).
TEMPLATE_ON_KERNEL = 2.0
# The 3xTF32 GEMMs are offered under torch.compile and one CUDA graph (registry.compiled_kernels);
# the shipped model learnt the family from the kernels run alone. Composed they measured a median
# 1.48x faster than alone over 13 realistic tasks (log2: 0.57), which the model cannot see yet.
# Once a model is trained on runs that offered the composed form, this goes.
GEMMS_UNDER_COMPILE = 0.57
# Work moved before a gather (fx_gathers), which the ranker has never seen: it put the rewrite
# after five others on TiSASRec. A gathered embedding table contracted on the table: TiSASRec's
# time-interval attention (unseen10) went from compile's 5.14 ms to 1.68 under compile and 1.24
# in one graph (3.07x and 4.13x over compile); a Linear of gathered rows run on the rows:
# EGNN's edge MLPs, 5.25 -> 3.68 and 5.41 -> 3.20 (1.43x and 1.69x; its set's best, max-autotune,
# 1.10x). H200, 2026-11-28.
GATHERS_MOVED = 2.0
GATHER_PASSES = ("gathered-tables", "gathered-linears")
SECOND = ("triton-template",)  # families placed second when the analysis found their pattern
# Families the ranker has no trajectories of, scored as the family they refine (the same
# kernels), just before it where a call is short (host time is most of it), just after where not.
# The shipped model learnt compile-cpp-wrapper from the realistic sets' runs (2026-11-26); a
# model without it (an older file through KFORGE_RANKER) still uses the alias.
ALIASES = {"compile-cpp-wrapper": "compile-default"}
HOST_BOUND_MS = 1.0  # eager's time below which the C++ wrapper goes before the default mode


def _aliased(family: str, features: TaskFeatures, known: Collection[str] = ()) -> tuple[str, float]:
    """(the family the ranker scores for ``family``, the score added): ``family`` itself once
    the ranker has weights for it (``known``)."""
    if family not in ALIASES or family in known:
        return family, 0.0
    short = features.eager_ms is not None and 0 < features.eager_ms < HOST_BOUND_MS
    return ALIASES[family], 0.1 if short else -0.1


def evidence(task: TaskAnalysis) -> dict[str, float]:
    """Score added to a family for what the analysis found in this task."""
    bonus: dict[str, float] = {}
    if task.gemm3 is not None:
        attention = "_kforge_sdpa3(" in task.gemm3[0].method
        bonus["tf32x3-gemm"] = GEMMS_UNDER_COMPILE + (ATTENTION_ON_KERNEL if attention else 0.0)
    if task.conv3 is not None and "_kforge_conv3_bn(" in task.conv3[0].method:
        bonus["tf32x3-conv"] = CONV_ON_KERNEL
    if task.fx is not None and any(p in task.fx[1] for p in GATHER_PASSES):
        bonus["fx-rewrite-compile"] = GATHERS_MOVED
    if task.templates is not None and task.features.bound == "memory":
        bonus["triton-template"] = TEMPLATE_ON_KERNEL
    return bonus


def _all_incorrect(attempts: list[AttemptView]) -> bool:
    """Whether no attempt verified and at least one ran and computed a wrong answer."""
    statuses = {a.result.status for a in attempts}
    return Status.OK not in statuses and Status.INCORRECT in statuses


def _second(specs: list[Spec], bonus: dict[str, float]) -> list[Spec]:
    """The first spec of each SECOND family with a bonus moved to second place (if later)."""
    out = list(specs)
    for family in SECOND:
        at = next((i for i, s in enumerate(out) if s.family == family), None)
        if family in bonus and at is not None and at > 1:
            out.insert(1, out.pop(at))
    return out


class EmbeddedPolicy:
    name = "embedded"
    reads_docs = False  # its strategies come from the task's features and the ranker, not from documents

    def __init__(
        self,
        ranker: RankerModel | None = None,
        *,
        use_ranker: bool = True,
        families: tuple[str, ...] | None = None,
    ) -> None:
        """``families`` restricts the strategies to those families (None: all that apply)."""
        self.ranker = ranker if ranker is not None or not use_ranker else load_model()
        self.families = families
        self._analyses: dict[str, TaskAnalysis] = {}

    # Planning

    def _analysis(self, ctx: Context) -> TaskAnalysis:
        key = f"{ctx.task.hash}:{ctx.precision}:{ctx.baseline is not None}"
        if key not in self._analyses:
            features = task_features(ctx.task, ctx.hardware, ctx.precision, ctx.baseline)
            self._analyses[key] = analyse_task(ctx.task, features)
        return self._analyses[key]

    @staticmethod
    def _device(ctx: Context) -> str:
        if ctx.baseline is not None:
            return ctx.baseline.device
        return "cuda" if ctx.hardware is not None else "cpu"

    def ordered(self, ctx: Context) -> list[Spec]:
        """Applicable base strategies, best first."""
        task = self._analysis(ctx)
        if task.features.random:
            return []
        specs = base_specs(task, ctx.precision, self._device(ctx))
        if task.features.graph_cannot_win:
            specs = [s for s in specs if not s.replays_graph]
        if self.families is not None:
            specs = [s for s in specs if s.family in self.families]
        bonus = evidence(task)
        if self.ranker is None:
            rank = {family: float(i) for i, family in enumerate(fixed_order(s.family for s in specs))}
            return _second(sorted(specs, key=lambda s: (-bonus.get(s.family, 0.0), rank[s.family])), bonus)
        vector = task.features.vector()
        aliased = {s.family: _aliased(s.family, task.features, self.ranker.weights) for s in specs}
        score = {
            s.family: self.ranker.score(aliased[s.family][0], vector)
            + aliased[s.family][1]
            - COST_PENALTY.get(s.family, 0.0)
            + bonus.get(s.family, 0.0)
            for s in specs
        }
        order = fixed_order(score)
        return _second(sorted(specs, key=lambda s: (-score[s.family], order.index(s.family))), bonus)

    def plan(self, ctx: Context) -> str:
        task = self._analysis(ctx)
        ordered = [(s.name, s.note) for s in self.ordered(ctx)]
        return plan_text(task.features, ordered, task.notes, features_line(task.features))

    # Proposing

    def propose(self, ctx: Context, k: int) -> list[Proposal]:
        task = self._analysis(ctx)
        tried_sources = {source_hash(a.source) for a in ctx.attempts}
        tried_names = {a.strategy for a in ctx.attempts}
        queue = self._queue(ctx, task, tried_names, k)
        proposals: list[Proposal] = []
        for spec, parent in queue:
            if len(proposals) >= k:
                break
            if spec.name in tried_names:
                continue
            source = build(ctx.task, spec, task)
            if source_hash(source) in tried_sources:
                continue
            tried_sources.add(source_hash(source))
            tried_names.add(spec.name)
            proposals.append(Proposal(source=source, strategy=spec.name, analysis=spec.note, parent=parent))
        return proposals

    def _queue(self, ctx: Context, task: TaskAnalysis, tried: set[str], k: int) -> list[tuple[Spec, str]]:
        """The specs to try in order, each with the attempt it tunes ("": the task's module)."""
        offered = self.ordered(ctx)
        ordered = [s for s in offered if s.name not in tried]
        if not ctx.attempts:
            first = ordered[:k]
            if first and not any(s.family in SAFE_FAMILIES for s in first):
                safe = [
                    s
                    for s in ordered
                    if s.family in SAFE_FAMILIES
                    and not (task.features.launch_bound and s.family == "compile-default")
                ]
                safe = safe or [s for s in ordered if s.family in SAFE_FAMILIES]
                if safe:
                    first = [*first[: k - 1], safe[0]]
            return [(s, "") for s in first + ordered]
        if _all_incorrect(ctx.attempts):
            ordered.sort(key=lambda s: s.family not in EAGER_NUMERICS)  # stable: the rest keep their order
        device = self._device(ctx)
        # kforge's kernels offered under a compiler that failed there (torch.compile cannot take
        # every forward): alone next, before any new strategy. Not after a wrong answer: the body
        # computes it (ModernBERT's finfo.min rows were wrong composed and alone alike)
        failed = {a.strategy for a in ctx.attempts if a.result.status not in (Status.OK, Status.INCORRECT)}
        alone = [kernels_alone(s) for s in offered if s.name in failed]
        ordered = [s for s in alone if s is not None and s.name not in tried] + ordered
        tuned = [(v, aid) for aid, spec in self._winners(ctx)[:2] for v in variants(spec, task, device)]
        if task.features.graph_cannot_win:
            tuned = [(v, aid) for v, aid in tuned if not v.replays_graph]
        # Half the round (at least one) tunes the winners, the rest tries new strategies.
        n_tuned = max(1, k // 2) if tuned else 0
        return tuned[:n_tuned] + [(s, "") for s in ordered] + tuned[n_tuned:]

    def _winners(self, ctx: Context) -> list[tuple[str, Spec]]:
        """The verified attempts fastest first, after the one the user chose to build on (if any),
        each with its strategy's spec."""
        ok = [a for a in ctx.attempts if a.result.status is Status.OK and a.result.speedup_vs_eager]
        ok.sort(key=lambda a: -(a.result.speedup_vs_eager or 0.0))
        chosen = [a for a in ctx.attempts if a.attempt_id == ctx.base]
        order = chosen + [a for a in ok if a.attempt_id != ctx.base]
        catalogue = self._catalogue(ctx, {a.strategy for a in order})
        return [(a.attempt_id, catalogue[a.strategy]) for a in order if a.strategy in catalogue]

    def _catalogue(self, ctx: Context, wanted: set[str]) -> dict[str, Spec]:
        """Specs by name: the base ones and their variants, expanded until ``wanted`` is covered."""
        task, device = self._analysis(ctx), self._device(ctx)
        level = base_specs(task, ctx.precision, device)
        found = {s.name: s for s in level}
        for _ in range(CATALOGUE_DEPTH):
            if wanted <= found.keys():
                break
            level = [v for s in level for v in variants(s, task, device) if v.name not in found]
            found.update({s.name: s for s in level})
        return found

    # Analysing

    def analyse(self, ctx: Context, new: list[AttemptView]) -> str:
        ok = [a for a in ctx.attempts if a.result.status is Status.OK and a.result.speedup_vs_eager]
        best = max(ok, key=lambda a: a.result.speedup_vs_eager or 0.0, default=None)
        return analysis(new, ctx.baseline, best)
