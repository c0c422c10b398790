"""``kforge model SPEC``: make the user's own model faster end to end, with a patch they can
read (``kforge.apply(model, "OUT/kforge_patch.py")``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from .options import Candidates, Config, Device, Precision, TimingTrials

_Spec = Annotated[
    str,
    typer.Argument(help="FILE.py:factory returning (model, inputs), or FILE.py with get_model/get_inputs"),
]
_Out = Annotated[Path, typer.Option(help="output folder (a killed run started again here resumes)")]
_Rounds = Annotated[
    int, typer.Option(min=1, help="optimization rounds over all regions, spent by their share of the time")
]
_MinShare = Annotated[float, typer.Option(help="regions under this share of the forward's time get no task")]
_MaxRegions = Annotated[
    int | None,
    typer.Option(min=1, help="at most this many regions get tasks, the largest shares first (default: all)"),
]
_Policy = Annotated[str, typer.Option(help="embedded or llm")]
_Modes = Annotated[
    str, typer.Option(help="torch.compile modes to measure against (GPU; the CPU measures default)")
]
_Trials = Annotated[int, typer.Option(min=5, help="timed whole-model calls per variant")]
_Strategies = Annotated[
    str | None, typer.Option(help="only these strategy families, e.g. tf32x3-conv,cuda-graph")
]
_ExtractOnly = Annotated[bool, typer.Option(help="profile and write the region tasks, then stop")]


def register(app: typer.Typer) -> None:
    app.command("model")(model_command)


def model_command(
    spec: _Spec,
    out: _Out = Path("kforge-model"),
    device: Device = None,
    precision: Precision = None,
    rounds: _Rounds = 6,
    candidates: Candidates = None,
    timing_trials: TimingTrials = None,
    min_share: _MinShare = 0.02,
    max_regions: _MaxRegions = None,
    policy: _Policy = "embedded",
    strategies: _Strategies = None,
    compile_modes: _Modes = "default,reduce-overhead,max-autotune",
    trials: _Trials = 30,
    extract_only: _ExtractOnly = False,
    config: Config = None,
) -> None:
    """Profile the model, cut its hot regions into tasks, optimize them, and measure the patch end to end."""
    from ..model.run import ModelOptions, ModelRunError, optimize_model
    from ..settings import SettingsError, resolve

    console = Console(stderr=True)
    if precision not in (None, "fp32", "tf32", "bf16"):
        console.print("[red]error:[/] --precision must be fp32, tf32 or bf16 for a model", highlight=False)
        raise typer.Exit(2)
    try:
        flags = dict(device=device, precision=precision, candidates=candidates, timing_trials=timing_trials)
        settings = resolve(flags, config=config)
        options = ModelOptions(
            spec=spec,
            out=out,
            settings=settings.replace(out=out / "batch" / "runs"),
            policy=policy,
            families=tuple(f for f in (strategies or "").split(",") if f) or None,
            rounds=rounds,
            min_share=min_share,
            max_regions=max_regions,
            compile_modes=tuple(m for m in compile_modes.split(",") if m),
            trials=trials,
            extract_only=extract_only,
        )
        optimize_model(options, say=console.print)
    except (ModelRunError, SettingsError) as err:
        console.print(f"[red]error:[/] {escape(str(err))}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        console.print(f"stopped: run kforge model {spec} --out {out} again to resume")
        raise typer.Exit(130) from None
    print(out / "kforge_patch.py" if not extract_only else out / "manifest.json")
