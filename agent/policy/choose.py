"""Which policy a run uses: the LLM policy when an endpoint is configured or the model is
``hf:PATH``, else the embedded one (when installed). ``check_policy`` fails before a run folder
is made; ``choose_policy`` builds the policy for a run."""

from __future__ import annotations

import importlib

from ..settings import RunSettings
from ..store import LLMCallRecord, TrajectoryStore
from .base import Policy
from .hf import HFChatClient, check_hf_model, hf_path
from .llm import LLMClient, LLMError, LLMPolicy, openai_client


class SetupError(RuntimeError):
    """The run cannot start (no policy, unknown run folder). The message is one line."""


NO_ENDPOINT = "no LLM endpoint configured: set OPENAI_BASE_URL (and OPENAI_API_KEY) or pass --base-url"


def _embedded_policy_class() -> type | None:
    try:
        module = importlib.import_module("kforge.agent.policy.embedded")
    except ModuleNotFoundError as err:
        if err.name != "kforge.agent.policy.embedded":
            raise
        return None
    policy_class: type = module.EmbeddedPolicy
    return policy_class


def check_policy(settings: RunSettings) -> None:
    """Fail before a run folder is made when no policy can run."""
    path = hf_path(settings.model)
    if path is not None:
        try:
            check_hf_model(path)
        except LLMError as err:
            raise SetupError(str(err)) from None
        return
    if settings.endpoint_configured and not settings.model:
        raise SetupError("no model named: pass --model or set KFORGE_MODEL")
    if not settings.endpoint_configured and _embedded_policy_class() is None:
        raise SetupError(NO_ENDPOINT)


def choose_policy(settings: RunSettings, store: TrajectoryStore, run_id: str) -> tuple[Policy, str | None]:
    """The LLM policy when an endpoint is configured or the model is ``hf:PATH`` (generating in
    process), its calls recorded in the store; else the embedded one."""
    path = hf_path(settings.model)
    if settings.endpoint_configured or path is not None:
        client: LLMClient = HFChatClient(path, device=settings.device) if path else openai_client(settings)

        def on_call(call: LLMCallRecord) -> None:
            store.add_llm_call(run_id, call)

        policy = LLMPolicy(
            client,
            device=settings.device,
            temperature=settings.temperature,
            max_tokens=settings.max_tokens,
            on_call=on_call,
        )
        return policy, client.model
    embedded = _embedded_policy_class()
    if embedded is None:
        raise SetupError(NO_ENDPOINT)
    return embedded(), None
