"""Run settings: a typed, keyword-only dataclass. Every field says what it means.

Values come, in order of precedence, from command-line flags, a TOML config file
(``--config`` or ``~/.config/kforge/config.toml``) and the standard environment
variables ``OPENAI_BASE_URL``, ``OPENAI_API_KEY`` and ``KFORGE_MODEL``.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEFAULT_CONFIG = Path("~/.config/kforge/config.toml")
DEFAULT_OUT = Path("kforge-runs")


class SettingsError(ValueError):
    """A bad setting or config file. The message is one line."""


@dataclasses.dataclass(kw_only=True)
class RunSettings:
    # Budgets and stop rules
    rounds: int = 4  # rounds of propose -> evaluate -> critique at most
    candidates: int = 4  # candidates proposed and evaluated together each round
    wall_time_s: float = 3600.0  # stop after this much time spent in the loop (resumes included)
    target_speedup: float | None = None  # stop once a verified candidate is this much faster than eager
    patience: int = 2  # stop after this many rounds without improving the best speedup
    min_improvement: float = 0.01  # a round improves when its best beats the old best by this fraction
    replan_after_failed_rounds: int = 2  # consecutive rounds where every candidate failed -> new plan
    approve: bool = False  # stop (a LangGraph interrupt) for the user to approve or edit each plan
    choose: bool = False  # stop (a LangGraph interrupt) after each round to pick what the next builds on
    # Evaluation
    device: str = "cuda"  # "cuda" or "cpu"; resolve() detects it when no flag or file gives it
    precision: str = "fp32"  # precision class candidates are checked under
    timing_trials: int | None = None  # timed runs per callable; None: the engine's default (5 on the CPU)
    eval_timeout_s: float = 300.0  # wall-clock limit of one evaluation worker
    # LLM endpoint
    model: str | None = None
    base_url: str | None = None
    api_key: str | None = dataclasses.field(default=None, repr=False)  # never logged or saved
    temperature: float = 0.7
    max_tokens: int = 8192
    timeout_s: float = 300.0  # per LLM request
    retries: int = 2  # retries of a failed LLM request (connection errors, 429, 5xx)
    # Retrieval and output
    retrieval: bool = True  # retrieve docs and prior kernels for the planner when retrieval is installed
    retrieval_budget_chars: int = 12000
    out: Path = DEFAULT_OUT  # run folders are created under it

    def __post_init__(self) -> None:
        if self.device not in ("cuda", "cpu"):
            raise SettingsError(f"device must be cuda or cpu, got {self.device!r}")
        if self.rounds < 1 or self.candidates < 1:
            raise SettingsError("rounds and candidates must be at least 1")
        self.out = Path(self.out)

    @property
    def endpoint_configured(self) -> bool:
        return bool(self.base_url or self.api_key)

    def to_json(self) -> dict[str, Any]:
        """Everything but the API key, for run.json and the trajectory store."""
        out = dataclasses.asdict(self)
        out.pop("api_key")
        out["out"] = str(self.out)
        return out

    def replace(self, **changes: Any) -> RunSettings:
        return dataclasses.replace(self, **changes)


FIELDS = {f.name for f in dataclasses.fields(RunSettings)}


def load_config(path: Path | None) -> dict[str, Any]:
    """The ``[kforge]`` table (or the top level) of a TOML config file; {} when there is none."""
    explicit = path is not None
    path = (path or DEFAULT_CONFIG).expanduser()
    if not path.is_file():
        if explicit:
            raise SettingsError(f"{path}: no such config file")
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise SettingsError(f"{path}: not valid TOML ({err})") from None
    table = data.get("kforge", data)
    unknown = sorted(set(table) - FIELDS)
    if unknown:
        raise SettingsError(f"{path}: unknown settings {', '.join(unknown)}")
    return dict(table)


def from_env(env: Mapping[str, str]) -> dict[str, Any]:
    names = {"base_url": "OPENAI_BASE_URL", "api_key": "OPENAI_API_KEY", "model": "KFORGE_MODEL"}
    return {field: env[var] for field, var in names.items() if env.get(var)}


def detected_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve(
    flags: Mapping[str, Any],
    *,
    config: Path | None = None,
    saved: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> RunSettings:
    """Settings from (highest first) flags that were given, a resumed run's saved settings,
    the config file and the environment. A flag of None was not given."""
    merged: dict[str, Any] = {}
    merged.update(from_env(os.environ if env is None else env))
    merged.update(load_config(config))
    merged.update(saved or {})
    merged.update({k: v for k, v in flags.items() if v is not None})
    if "device" not in merged:  # given nowhere: the GPU when one is visible
        merged["device"] = detected_device()
    try:
        return RunSettings(**{k: v for k, v in merged.items() if k in FIELDS})
    except TypeError as err:
        raise SettingsError(f"bad settings: {err}") from None
