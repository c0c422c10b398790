"""The LLM policy: any OpenAI-compatible endpoint (OpenAI, vLLM, SGLang, Ollama).

:class:`LLMClient` is the one small model interface (messages in, text and usage out);
:class:`OpenAIChatClient` implements it over the ``openai`` SDK with the SDK client passed
in. Endpoint failures become typed :class:`LLMError` subclasses with one-line messages;
every request and response (or error) is handed to ``on_call`` to be recorded.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from ..store import LLMCallRecord
from .base import AttemptView, Context, Proposal
from .parse import to_proposal
from .render import coder_prompt, critic_prompt, planner_prompt

if TYPE_CHECKING:
    import openai

    from ..settings import RunSettings

Messages = list[dict[str, str]]
SYSTEM = (
    "You are kforge, an expert in GPU kernels (CUDA, Triton) and PyTorch. Answer in the sections asked for."
)


class LLMError(RuntimeError):
    """An LLM request that failed. The message is one line."""


class EndpointUnreachable(LLMError):
    pass


class AuthError(LLMError):
    pass


class PromptTooLong(LLMError):
    pass


class EndpointError(LLMError):
    """Any other refusal by the endpoint (unknown model, bad request, server error)."""


@dataclasses.dataclass
class Completion:
    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    model: str | None


class LLMClient(Protocol):
    model: str

    def complete(self, messages: Messages, *, temperature: float, max_tokens: int) -> Completion: ...


_TOO_LONG = ("context length", "context_length", "too long", "maximum context", "too many tokens")


class OpenAIChatClient:
    """Chat completions through an ``openai.OpenAI`` client (its retries and timeout apply)."""

    def __init__(self, client: openai.OpenAI, model: str) -> None:
        self.client = client
        self.model = model

    def complete(self, messages: Messages, *, temperature: float, max_tokens: int) -> Completion:
        import openai

        where = str(self.client.base_url).rstrip("/")
        try:
            response = self.client.chat.completions.create(
                model=self.model,
                messages=messages,  # type: ignore[arg-type]
                temperature=temperature,
                max_tokens=max_tokens,
            )
        except openai.APITimeoutError:
            raise EndpointUnreachable(f"LLM endpoint {where} timed out") from None
        except openai.APIConnectionError:
            raise EndpointUnreachable(f"LLM endpoint {where} is unreachable") from None
        except (openai.AuthenticationError, openai.PermissionDeniedError) as err:
            raise AuthError(f"LLM endpoint {where} refused the API key (HTTP {err.status_code})") from None
        except openai.APIStatusError as err:
            text = _first_line(err.message)
            if err.status_code in (400, 413, 422) and any(m in text.lower() for m in _TOO_LONG):
                raise PromptTooLong(f"prompt too long for {self.model} at {where}: {text}") from None
            raise EndpointError(f"LLM endpoint {where} answered HTTP {err.status_code}: {text}") from None
        if not response.choices:
            raise EndpointError(f"LLM endpoint {where} returned no choices")
        usage = response.usage
        return Completion(
            text=response.choices[0].message.content or "",
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,
            model=response.model,
        )


def openai_client(settings: RunSettings) -> OpenAIChatClient:
    """The SDK client for the configured endpoint. Raises LLMError when no model is named."""
    import openai

    if not settings.model:
        raise EndpointError("no model named: pass --model or set KFORGE_MODEL")
    client = openai.OpenAI(
        base_url=settings.base_url,
        api_key=settings.api_key or "not-needed",  # local servers (vLLM, Ollama) take any key
        timeout=settings.timeout_s,
        max_retries=settings.retries,
    )
    return OpenAIChatClient(client, settings.model)


class LLMPolicy:
    name = "llm"
    reads_docs = True  # the prompts carry the retrieved documents

    def __init__(
        self,
        client: LLMClient,
        *,
        device: str,
        temperature: float = 0.7,
        max_tokens: int = 8192,
        on_call: Callable[[LLMCallRecord], None] | None = None,
    ) -> None:
        self.client = client
        self.device = device
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.on_call = on_call

    def plan(self, ctx: Context) -> str:
        return self._ask("planner", ctx.round, planner_prompt(ctx, self.device))

    def propose(self, ctx: Context, k: int) -> list[Proposal]:
        """k candidates; each builds on the attempt the user chose, when there is one."""
        return [
            dataclasses.replace(
                to_proposal(
                    self._ask("coder", ctx.round, coder_prompt(ctx, self.device, i, k)), strategy="llm"
                ),
                parent=ctx.base or "",
            )
            for i in range(k)
        ]

    def analyse(self, ctx: Context, new: list[AttemptView]) -> str:
        return self._ask("critic", ctx.round, critic_prompt(ctx, self.device, new))

    def _ask(self, role: str, round: int, prompt: str) -> str:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
        started = time.monotonic()
        try:
            completion = self.client.complete(
                messages, temperature=self.temperature, max_tokens=self.max_tokens
            )
        except LLMError as err:
            self._record(
                LLMCallRecord(
                    role,
                    round,
                    self.client.model,
                    messages,
                    "",
                    None,
                    None,
                    time.monotonic() - started,
                    error=f"{type(err).__name__}: {err}",
                )
            )
            raise
        self._record(
            LLMCallRecord(
                role,
                round,
                completion.model or self.client.model,
                messages,
                completion.text,
                completion.prompt_tokens,
                completion.completion_tokens,
                time.monotonic() - started,
            )
        )
        return completion.text

    def _record(self, call: LLMCallRecord) -> None:
        if self.on_call is not None:
            self.on_call(call)


def _first_line(text: str) -> str:
    text = text.strip()
    return text.splitlines()[0][:300] if text else "(no message)"
