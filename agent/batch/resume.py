"""What a batch runs with: the choices of a new batch, or those a resumed one saved in its
``batch.json`` (the same rules as optimize's ``--resume``: what the folder recorded wins, and
only a new evaluation limit applies to the tasks still to run). Plain functions of the
options; errors are ``BatchInputError`` (one line)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ...tools.precision import PRECISIONS
from ..settings import RunSettings, SettingsError, resolve
from .tasks import BATCH_META, BatchInputError

POLICIES = ("embedded", "llm")


@dataclasses.dataclass(kw_only=True)
class BatchChoice:
    """Everything a batch run was asked for, after the defaults and a resume's saved choices."""

    selection: dict[str, Any]  # paths, level, tasks, limit
    policy: str
    settings: RunSettings
    families: tuple[str, ...] | None
    trials: int
    confirm: bool
    ray: str | None
    finalists: int = 3  # the confirmation's choice among the search's best (job.finalists)


def _families(text: str | None) -> tuple[str, ...] | None:
    return tuple(f.strip() for f in text.split(",") if f.strip()) or None if text else None


def resumed(folder: Path, *, config: Path | None, eval_timeout: float | None, ray: str | None) -> BatchChoice:
    """The choices ``folder``'s batch saved; a new ``eval_timeout`` applies from now on."""
    if not (folder / BATCH_META).is_file():
        raise BatchInputError(f"{folder}: no batch to resume (no {BATCH_META})")
    try:
        saved = json.loads((folder / BATCH_META).read_text())
        settings = resolve({}, config=config, saved=saved["settings"])
        selection, policy = saved["selection"], saved["policy"]
    except (ValueError, KeyError, SettingsError) as err:
        raise BatchInputError(f"{folder / BATCH_META}: unreadable ({err}); start a new batch") from None
    if eval_timeout is not None:  # tasks already in results.jsonl keep the limit they ran under
        settings = settings.replace(eval_timeout_s=eval_timeout)
    return BatchChoice(
        selection=selection, policy=policy, settings=settings, families=tuple(saved.get("families") or ()) or None,
        trials=saved.get("trials", 5), confirm=saved.get("confirm", True), ray=ray or saved.get("ray"),
        finalists=saved.get("finalists", 1),  # a batch saved before finalists confirmed its best alone
    )  # fmt: skip


def new(paths: list[Path], flags: dict[str, Any], *, config: Path | None, **chosen: Any) -> BatchChoice:
    """A new batch's choices: ``chosen`` holds level, tasks, limit, policy, strategies, trials,
    confirm, finalists and ray as given; ``flags`` the run settings given (None: not given)."""
    if not paths:
        raise BatchInputError("give task paths (or --resume DIR)")
    policy = chosen["policy"]
    if policy not in POLICIES:
        raise BatchInputError(f"unknown policy {policy!r}: use embedded or llm")
    if flags.get("device") not in (None, "cuda", "cpu"):
        raise BatchInputError(f"unknown device {flags['device']!r}: use cuda or cpu")
    if flags.get("precision") not in (None, *PRECISIONS):
        raise BatchInputError(
            f"unknown precision {flags['precision']!r}: choose one of {', '.join(PRECISIONS)}"
        )
    defaults = {"rounds": 2, "candidates": 3, "eval_timeout_s": 300.0}  # a batch spends less per task
    given = {k: v for k, v in flags.items() if v is not None}
    try:
        settings = resolve(defaults | given | {"patience": 1, "retrieval": policy == "llm"}, config=config)
    except SettingsError as err:
        raise BatchInputError(str(err)) from None
    selection = {"paths": [str(p) for p in paths]} | {k: chosen[k] for k in ("level", "tasks", "limit")}
    return BatchChoice(
        selection=selection, policy=policy, settings=settings, families=_families(chosen["strategies"]),
        trials=chosen["trials"], confirm=chosen["confirm"], ray=chosen["ray"],
        finalists=chosen["finalists"],
    )  # fmt: skip


def check_endpoint(choice: BatchChoice) -> None:
    if choice.policy == "llm" and not choice.settings.endpoint_configured:
        raise BatchInputError("--policy llm needs an endpoint: set OPENAI_BASE_URL or a config file")
