"""The batch report's plots, drawn with matplotlib into PNG data URIs (the page stays one
self-contained file): speedup distribution per level, fast_p curves against eager and
torch.compile, and the roofline scatter (fraction of the floor against arithmetic intensity)."""

from __future__ import annotations

import base64
import io
from typing import Any

BINS = [2 ** (i / 4) for i in range(-16, 29)]  # quarter octaves from 1/16x to 128x
P_GRID = [2 ** (i / 16) for i in range(-32, 65)]  # p from 0.25 to 16


def _figure(size: tuple[float, float] = (6.4, 3.6)) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=size)


def _data_uri(fig: Any) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _correct(lines: list[dict[str, Any]], key: str) -> list[float]:
    return [x[key] for x in lines if x["status"] == "ok" and x.get(key)]


def _level_name(line: dict[str, Any]) -> str:
    return f"level {line['level']}" if line.get("level") is not None else "tasks"


def speedup_distribution(lines: list[dict[str, Any]]) -> str | None:
    """Histogram of the best verified speedup over eager, one series per level."""
    groups: dict[str, list[float]] = {}
    for line in lines:
        if line["status"] == "ok" and line.get("speedup_vs_eager"):
            groups.setdefault(_level_name(line), []).append(line["speedup_vs_eager"])
    if not groups:
        return None
    everything = [v for values in groups.values() for v in values]
    bins = [b for b in BINS if min(everything) / 1.5 <= b <= max(everything) * 1.5]
    fig, ax = _figure()
    for name, values in sorted(groups.items()):
        ax.hist(values, bins=bins if len(bins) > 2 else BINS, alpha=0.55, label=f"{name} ({len(values)})")
    ax.set_xscale("log", base=2)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xlabel("speedup of the best verified candidate over eager")
    ax.set_ylabel("tasks")
    ax.legend()
    return _data_uri(fig)


def fast_p_curves(lines: list[dict[str, Any]]) -> str | None:
    """fast_p against p: the fraction of valid tasks that are correct and more than p times
    faster than eager, and than torch.compile."""
    valid = [x for x in lines if x["status"] != "invalid_task"]
    if not _correct(valid, "speedup_vs_eager"):
        return None
    fig, ax = _figure()
    for key, label in (("speedup_vs_eager", "vs eager"), ("speedup_vs_compile", "vs torch.compile")):
        values = _correct(valid, key)
        if values:
            ax.plot(P_GRID, [sum(v > p for v in values) / len(valid) for p in P_GRID], label=label)
    ax.set_xscale("log", base=2)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_ylim(0, 1)
    ax.set_xlabel("p (speedup threshold)")
    ax.set_ylabel("fast_p (fraction of valid tasks)")
    ax.grid(alpha=0.3)
    ax.legend()
    return _data_uri(fig)


def roofline_points(lines: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """(level, arithmetic intensity in FLOP/byte, fraction of the roofline floor) per correct
    task whose best result has a roofline estimate."""
    points = []
    for line in lines:
        result = line.get("result") or {}
        roof, fraction = result.get("roofline") or {}, result.get("roofline_fraction")
        if line["status"] == "ok" and fraction and roof.get("flops") and roof.get("min_bytes"):
            points.append((_level_name(line), roof["flops"] / roof["min_bytes"], fraction))
    return points


def roofline_scatter(lines: list[dict[str, Any]]) -> str | None:
    points = roofline_points(lines)
    if not points:
        return None
    fig, ax = _figure()
    for name in sorted({p[0] for p in points}):
        chosen = [p for p in points if p[0] == name]
        ax.scatter([p[1] for p in chosen], [p[2] for p in chosen], s=18, alpha=0.7, label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of the minimum traffic)")
    ax.set_ylabel("fraction of the roofline floor")
    ax.grid(alpha=0.3)
    ax.legend()
    return _data_uri(fig)
