"""Render the role prompts (``kforge.prompts``) from a policy Context."""

from __future__ import annotations

import functools
import string
from importlib import resources

from ...tools.hardware import GpuSpec
from ...tools.result import Result
from .base import AttemptView, Context, Doc
from .contrast import Labelled, figures, format_attempt, format_attempts, select_contrastive

ROLES = ("planner", "coder", "critic")


@functools.cache
def template(role: str) -> string.Template:
    if role not in ROLES:
        raise ValueError(f"no prompt for role {role!r}: one of {', '.join(ROLES)}")
    return string.Template(resources.files("kforge.prompts").joinpath(f"{role}.md").read_text())


def hardware_summary(gpu: GpuSpec | None, device: str) -> str:
    if gpu is None:
        if device == "cpu":
            return "No GPU: candidates run on the CPU (Triton under its interpreter); timings are CPU wall clock."
        return "GPU not detected."
    peaks = ", ".join(f"{k} {v:g} TFLOP/s" for k, v in sorted(gpu.tflops.items()))
    bandwidth = f"{gpu.peak_gbps:g} GB/s" if gpu.peak_gbps else "unknown bandwidth"
    return (
        f"{gpu.name} ({gpu.arch}, {gpu.sms} SMs, L2 {gpu.l2_bytes / 2**20:.0f} MiB, "
        f"{gpu.smem_per_block_bytes // 1024} KiB shared memory per block, {bandwidth}; {peaks or 'peaks unknown'})"
        + (f"; features: {', '.join(gpu.features)}" if gpu.features else "")
    )


def baseline_summary(baseline: Result | None) -> str:
    if baseline is None:
        return "(not measured)"
    parts = [f"eager {baseline.eager_ms:.4g} ms" if baseline.eager_ms is not None else "eager -"]
    if baseline.compile_ms is not None:
        parts.append(f"torch.compile {baseline.compile_ms:.4g} ms")
    roof = baseline.roofline
    if roof is not None:
        parts.append(f"{roof.flops:.3g} FLOP, {roof.min_bytes:.3g} bytes at least, {roof.bound}-bound")
        if roof.floor_ms is not None:
            parts.append(f"floor {roof.floor_ms:.4g} ms")
    if baseline.timing_label:
        parts.append(f"timed by {baseline.timing_label}")
    return "; ".join(parts)


def docs_block(docs: list[Doc], budget_chars: int = 12000) -> str:
    if not docs:
        return "(none)"
    out, used = [], 0
    for doc in docs:
        block = f"[{doc.id}] ({doc.kind})\n{doc.text.strip()}"
        if used + len(block) > budget_chars:
            break
        out.append(block)
        used += len(block)
    return "\n\n".join(out)


def _common(ctx: Context, device: str) -> dict[str, str]:
    return {
        "task_name": ctx.task.name,
        "task_source": ctx.task.source.strip(),
        "hardware": hardware_summary(ctx.hardware, device),
        "precision": ctx.precision,
        "baseline": baseline_summary(ctx.baseline),
        "docs": docs_block(ctx.docs),
        "attempts": format_attempts(select_contrastive(ctx.attempts)),
        "plan": ctx.plan.strip() or "(no plan)",
        "analysis": ctx.analysis.strip() or "(none yet)",
        "profile": ctx.profile.strip() or "(none yet)",
        "round": str(ctx.round),
    }


def planner_prompt(ctx: Context, device: str) -> str:
    return template("planner").substitute(_common(ctx, device))


def base_block(ctx: Context) -> str:
    """The attempt the user chose to build on, as a prompt section ("" when none was chosen)."""
    view = next((a for a in ctx.attempts if a.attempt_id == ctx.base), None)
    if view is None:
        return ""
    return (
        "\n# Build on this candidate (chosen by the user)\n"
        + format_attempt(Labelled(view, "chosen by the user"))
        + f"\n\nStart from {view.attempt_id}'s code: keep what works, change what its figures say is slow.\n"
    )


def coder_prompt(ctx: Context, device: str, index: int, k: int) -> str:
    return template("coder").substitute(
        _common(ctx, device), base=base_block(ctx), candidate_index=str(index + 1), k=str(k)
    )


def critic_prompt(ctx: Context, device: str, new: list[AttemptView]) -> str:
    new_block = format_attempts([Labelled(view, "this round") for view in new])
    earlier = [a for a in ctx.attempts if a.attempt_id not in {n.attempt_id for n in new}]
    values = _common(ctx, device)
    values["attempts"] = format_attempts(select_contrastive(earlier)) if earlier else "(none)"
    return template("critic").substitute(values, new_attempts=new_block)


__all__ = ["coder_prompt", "critic_prompt", "figures", "planner_prompt"]
