"""``kforge train ranker [RUNS...]``: fit the embedded policy's strategy cost model (CPU)
from recorded trajectories (run folders, batch folders or trajectories.db files)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from ..policy.ranker import Example, RankerModel

train_app = typer.Typer(help="Fit models from recorded trajectories.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(train_app, name="train")


@train_app.command("ranker")
def ranker_command(
    runs: Annotated[
        list[Path] | None, typer.Argument(help="run or batch folders, or trajectories.db files")
    ] = None,
    out: Annotated[
        Path, typer.Option(help="where the model JSON goes (use it with KFORGE_RANKER=PATH)")
    ] = Path("ranker_model.json"),
    synthetic: Annotated[int, typer.Option(min=0, help="add N synthetic tasks (see ranker_synth)")] = 0,
    seed: Annotated[int, typer.Option(help="seed of the synthetic tasks")] = 0,
    ridge: Annotated[float, typer.Option(min=0.0, help="L2 penalty of the per-family regressions")] = 0.3,
    real_weight: Annotated[
        int, typer.Option(min=1, help="measured examples of a prior-fitted family count this many times")
    ] = 1,
    min_measured: Annotated[
        int, typer.Option(min=1, help="families measured this often are fit on measurements alone")
    ] = 5,
    base: Annotated[
        str | None, typer.Option(help="move this model (a path, or 'shipped') toward the runs")
    ] = None,
    strength: Annotated[
        float, typer.Option(min=0.0, help="with --base: how hard the weights are pulled back to the base's")
    ] = 0.1,
) -> None:
    """Fit the strategy ranker; prints how many examples per family it saw."""
    from ..policy.ranker import fit_with_prior
    from ..policy.ranker_data import load_examples

    console = Console(stderr=True)
    if not runs and synthetic == 0:
        console.print("[red]error:[/] give run folders to learn from, or --synthetic N", highlight=False)
        raise typer.Exit(2)
    sources = [str(p) for p in runs or []]
    try:
        measured = load_examples(runs or [])
    except (FileNotFoundError, ValueError) as err:
        console.print(f"[red]error:[/] {escape(str(err))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    prior = _synthetic(synthetic, seed)
    if synthetic:
        sources.append(f"synthetic: {synthetic} tasks, seed {seed} (kforge.agent.policy.ranker_synth)")
    if not measured and not prior:
        console.print("[red]error:[/] no embedded-policy trajectories with features found", highlight=False)
        raise typer.Exit(2)
    meta = {"sources": sources, "synthetic": synthetic > 0, "real_weight": real_weight}
    if base is not None:
        model = _updated(base, strength, measured + prior, sources, console)
    else:
        model = fit_with_prior(
            measured,
            prior,
            ridge=ridge,
            min_measured=min_measured,
            measured_weight=real_weight,
            metadata=meta,
        )
    model.save(out)
    for family, count in sorted(model.counts.items()):
        console.print(f"{escape(family)}: {count} examples", highlight=False)
    typer.echo(str(out))


def _synthetic(tasks: int, seed: int) -> list[Example]:
    """Examples of ``tasks`` synthetic tasks (none for 0)."""
    from ..policy.ranker_data import load_examples
    from ..policy.ranker_synth import synth_tasks, write_store

    if not tasks:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "trajectories.db"
        write_store(db, synth_tasks(tasks, seed))
        return load_examples([db])


def _updated(
    base: str, strength: float, examples: list[Example], sources: list[str], console: Console
) -> RankerModel:
    """The model at ``base`` (a path, or 'shipped') moved toward ``examples``."""
    from ..policy.ranker import fit_toward, load_model

    try:
        start = load_model(None if base == "shipped" else Path(base))
    except (OSError, ValueError) as err:
        console.print(f"[red]error:[/] --base {escape(base)}: {escape(str(err))}", highlight=False)
        raise typer.Exit(2) from None
    if start is None:
        console.print(
            "[red]error:[/] no shipped ranker model to update; fit one without --base", highlight=False
        )
        raise typer.Exit(2)
    return fit_toward(start, examples, strength, {"update_sources": sources, "base": base})


@train_app.command("tiny-model")
def tiny_model_command(
    data: Annotated[
        Path, typer.Option(help="dataset folder from kforge export (its texts train the tokenizer)")
    ],
    out: Annotated[Path, typer.Option(help="folder for the model (use it as --base OUT)")],
    max_positions: Annotated[int, typer.Option(min=64, help="the longest prompt plus answer, tokens")] = 4096,
    hidden: Annotated[int, typer.Option(min=8, help="hidden size")] = 32,
    layers: Annotated[int, typer.Option(min=1)] = 2,
) -> None:
    """Build a small random Llama and its tokenizer offline, to try `train llm` with no download."""
    from ..train.tiny import build_random_model, dataset_texts

    if not (data / "train.jsonl").is_file():
        Console(stderr=True).print(
            f"[red]error:[/] {escape(str(data))}/train.jsonl: no such file; make it with kforge export"
        )
        raise typer.Exit(2)
    build_random_model(dataset_texts(data), out, hidden=hidden, layers=layers, max_positions=max_positions)
    typer.echo(str(out))


@train_app.command("llm")
def llm_command(
    method: Annotated[str, typer.Option(help="sft, dpo or grpo")],
    base: Annotated[
        str, typer.Option(help="base model: a folder (offline: kforge train tiny-model) or a Hugging Face id")
    ],
    data: Annotated[Path, typer.Option(help="dataset folder from kforge export (sft, pairs, groups)")],
    out: Annotated[Path, typer.Option(help="folder for checkpoints and the LoRA adapter")],
    max_steps: Annotated[int, typer.Option(min=1)] = 100,
    learning_rate: Annotated[float, typer.Option(min=0.0)] = 1e-4,
    batch_size: Annotated[int, typer.Option(min=1)] = 2,
    max_length: Annotated[int, typer.Option(min=16, help="prompt plus completion tokens")] = 4096,
    max_completion_length: Annotated[int, typer.Option(min=1, help="grpo: generated tokens")] = 1024,
    num_generations: Annotated[int, typer.Option(min=2, help="grpo: answers per prompt")] = 4,
    lora_r: Annotated[int, typer.Option(min=0, help="LoRA rank; 0: full fine-tune")] = 16,
    save_steps: Annotated[int, typer.Option(min=1, help="checkpoint every N steps")] = 50,
    resume: Annotated[bool, typer.Option(help="continue from the last checkpoint in OUT")] = False,
    device: Annotated[str, typer.Option(help="cuda or cpu (training and grpo's evaluations)")] = "cuda",
    eval_parallel: Annotated[int, typer.Option(min=1, help="grpo: tasks evaluated at once")] = 1,
) -> None:
    """Fine-tune the kernel-writing policy with TRL and LoRA; use it with --model hf:OUT."""
    from ...tools.evaluate import EvalOptions
    from ..train.llm import TrainSettings, TrainSetupError, train_llm

    console = Console(stderr=True)
    settings = TrainSettings(
        method=method, base=base, data=data, out=out, max_steps=max_steps, learning_rate=learning_rate,
        batch_size=batch_size, max_length=max_length, max_completion_length=max_completion_length,
        num_generations=num_generations, lora_r=lora_r, lora_alpha=2 * lora_r, save_steps=save_steps,
        resume=resume, use_cpu=device == "cpu", eval_parallel=eval_parallel,
        eval_options=EvalOptions(device=device, compile_baseline=False, timing_trials=20 if device == "cuda" else 3),
    )  # fmt: skip
    try:
        trainer = train_llm(settings)
    except TrainSetupError as err:
        console.print(f"[red]error:[/] {escape(str(err))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    console.print(f"{method}: {trainer.state.global_step} steps; adapter in {out}")
    typer.echo(str(out))
