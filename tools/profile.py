"""Nsight Compute metrics and compute-sanitizer checks of a candidate's forward pass.

Both wrap a worker in ``forward`` mode (warm-up, then the profiled calls inside an NVTX
range named ``kforge_profile``) and parse what the tool prints.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .sandbox import WorkerOutcome

STALL_REASONS = (
    "barrier",
    "branch_resolving",
    "dispatch_stall",
    "drain",
    "imc_miss",
    "lg_throttle",
    "long_scoreboard",
    "math_pipe_throttle",
    "membar",
    "mio_throttle",
    "no_instruction",
    "not_selected",
    "short_scoreboard",
    "sleeping",
    "tex_throttle",
    "wait",
)
DURATION = "gpu__time_duration.sum"
HEADLINE = {
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_throughput_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
}
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"

RunForward = Callable[[list[str]], WorkerOutcome]


def ncu_available() -> bool:
    return shutil.which("ncu") is not None


def ncu_command(log_file: Path) -> list[str]:
    metrics = [DURATION, *HEADLINE, *(STALL_METRIC.format(r) for r in STALL_REASONS)]
    return [
        "ncu",
        "--log-file",
        str(log_file),
        "--target-processes",
        "all",
        "--nvtx",
        "--nvtx-include",
        "kforge_profile/",
        "--metrics",
        ",".join(metrics),
        "--csv",
        "--page",
        "raw",
    ]


def ncu_metrics(run_forward: RunForward, scratch: Path) -> dict[str, Any]:
    """Time-weighted DRAM and SM throughput, achieved occupancy and the top stall reasons
    over the kernels of one forward pass."""
    if not ncu_available():
        return {"error": "ncu not found on PATH"}
    log_file = scratch / "ncu.csv"
    outcome = run_forward(ncu_command(log_file))
    rows = _ncu_rows(log_file.read_text(errors="replace") if log_file.exists() else "")
    if not rows:
        return {
            "error": f"ncu reported no kernels ({outcome.crash_reason if outcome.result is None else 'no rows'})",
            "log": outcome.log[-2000:],
        }
    return summarize_ncu(rows)


def _ncu_rows(text: str) -> list[dict[str, str]]:
    lines = [line for line in text.splitlines() if line.startswith('"')]
    if len(lines) < 2:
        return []
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    rows = list(reader)
    return [r for r in rows if r.get(DURATION, "").replace(".", "", 1).replace(",", "").isdigit()]


def _time_weighted(rows: list[dict[str, str]], metric: str) -> float:
    """A metric's mean over kernels, each weighted by its duration."""
    total = sum(_num(r.get(DURATION)) for r in rows) or 1.0
    return sum(_num(r.get(metric)) * _num(r.get(DURATION)) for r in rows) / total


def summarize_ncu(rows: list[dict[str, str]]) -> dict[str, Any]:
    summary: dict[str, Any] = {"kernels": len(rows), "gpu_time_ns": sum(_num(r.get(DURATION)) for r in rows)}
    for metric, name in HEADLINE.items():
        summary[name] = round(_time_weighted(rows, metric), 2)
    stalls = {reason: _time_weighted(rows, STALL_METRIC.format(reason)) for reason in STALL_REASONS}
    top = sorted(stalls.items(), key=lambda kv: kv[1], reverse=True)[:3]
    summary["top_stalls"] = [{"reason": r, "cycles_per_issue": round(v, 2)} for r, v in top if v > 0]
    summary["top_kernels"] = top_kernels(rows)
    return summary


def top_kernels(rows: list[dict[str, str]], n: int = 5) -> list[dict[str, Any]]:
    """The kernels that took the most GPU time, by name (launches of one kernel summed):
    share of the forward's time, launches, and their time-weighted SM and DRAM throughput.
    This says which kernel bounds a forward and by what (a cuDNN convolution at 30% of SM
    throughput, an elementwise kernel at 80% of DRAM)."""
    groups: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        groups.setdefault(row.get("Kernel Name", "?"), []).append(row)
    total = sum(_num(r.get(DURATION)) for r in rows) or 1.0
    out: list[dict[str, Any]] = []
    for name, group in groups.items():
        time_ns = sum(_num(r.get(DURATION)) for r in group)
        sm = _time_weighted(group, "sm__throughput.avg.pct_of_peak_sustained_elapsed")
        dram = _time_weighted(group, "dram__throughput.avg.pct_of_peak_sustained_elapsed")
        out.append(
            {
                "name": name[:120],
                "share_pct": round(100.0 * time_ns / total, 1),
                "launches": len(group),
                "sm_throughput_pct": round(sm, 1),
                "dram_throughput_pct": round(dram, 1),
            }
        )
    return sorted(out, key=lambda k: -float(k["share_pct"]))[:n]


def describe_ncu(ncu: dict[str, Any], kernels: int = 3) -> str:
    """One line for the critic and the report: throughputs, top stalls, the longest kernels."""
    if "error" in ncu:
        return f"ncu failed: {ncu['error']}"
    parts = [
        f"SM {ncu.get('sm_throughput_pct', 0):.0f}%, DRAM {ncu.get('dram_throughput_pct', 0):.0f}%, "
        f"occupancy {ncu.get('achieved_occupancy_pct', 0):.0f}% over {ncu.get('kernels', 0)} kernels"
    ]
    stalls = ncu.get("top_stalls") or []
    if stalls:
        parts.append("stalls " + ", ".join(f"{s['reason']} {s['cycles_per_issue']}" for s in stalls))
    top = (ncu.get("top_kernels") or [])[:kernels]
    if top:
        parts.append(
            "longest "
            + "; ".join(
                f"{k['name'][:60]} {k['share_pct']:.0f}% (SM {k['sm_throughput_pct']:.0f}%, "
                f"DRAM {k['dram_throughput_pct']:.0f}%)"
                for k in top
            )
        )
    return "; ".join(parts)


def sanitize(run_forward: RunForward) -> dict[str, Any]:
    """compute-sanitizer memcheck and racecheck of one forward pass."""
    if shutil.which("compute-sanitizer") is None:
        return {"error": "compute-sanitizer not found on PATH"}
    report: dict[str, Any] = {}
    for tool in ("memcheck", "racecheck"):
        outcome = run_forward(["compute-sanitizer", "--tool", tool, "--target-processes", "all"])
        report[tool] = parse_sanitizer(outcome.log)
    return report


def parse_sanitizer(text: str) -> dict[str, Any]:
    summary = re.search(r"(ERROR|RACECHECK) SUMMARY: (\d+) (errors?|hazards?)", text)
    findings = [
        line.strip("= ").strip()
        for line in text.splitlines()
        if line.startswith("========= ")
        and "SUMMARY:" not in line
        and ("Invalid" in line or "Race" in line or "Error" in line or "hazard" in line.lower())
    ]
    return {
        "errors": int(summary.group(2)) if summary else None,
        "findings": findings[:10],
        "completed": summary is not None,
    }


def _num(text: str | None) -> float:
    try:
        return float((text or "0").replace(",", ""))
    except ValueError:
        return 0.0
