"""Free text to the LLM, which answers in streamed tokens and can call kforge's tools
(evaluate a file, run a round, look at attempts, profile one, search the retrieval store)
through the OpenAI tools API. A tool's failure goes back to the model as the tool's answer."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
from rich.text import Text

from ..policy.llm import EndpointError, EndpointUnreachable
from ..settings import RunSettings
from .session import ChatError, Session

SYSTEM = (
    "You are kforge's assistant in an engineer's terminal. kforge writes, verifies and times faster "
    "replacements (ModelNew) for a PyTorch task. Use the tools to measure instead of guessing, and "
    "explain what the figures mean (speedups, roofline, why a candidate failed). Be brief."
)


def _tool(name: str, description: str, **params: str) -> dict[str, Any]:
    properties = {
        p: {"type": "integer" if p == "rounds" else "string", "description": d} for p, d in params.items()
    }
    required = [p for p in params if p != "rounds"]
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


TOOLS = [
    _tool(
        "evaluate",
        "Verify and time a candidate file (defining ModelNew) on the loaded task; it joins the attempts.",
        path="file path",
    ),
    _tool(
        "run_round",
        "Run more rounds of the optimization loop, or finish a stopped one (the user approves the plan).",
        rounds="rounds to run from here",
    ),
    _tool("attempts", "Every attempt of the run with status and speedup vs eager."),
    _tool("profile", "Timings, roofline and ncu figures of one attempt.", attempt_id="e.g. r1-c0"),
    _tool(
        "search",
        "Search the retrieval store (guides, hardware sheets, prior kernels).",
        query="what to look for",
    ),
]


def _steps(s: Session) -> list[dict[str, Any]]:
    return [
        {"id": st.attempt.attempt_id, "strategy": st.attempt.strategy}
        | (st.result.headline() if st.result else {})
        for st in s.steps()
    ]


def _run(s: Session, rounds: int | None = None) -> dict[str, Any]:
    summary = s.run(rounds)
    return {"status": summary.status, "reason": summary.reason, "best": summary.best_attempt_id,
            "best_speedup": summary.best_speedup}  # fmt: skip


def _profile(s: Session, attempt_id: str) -> dict[str, Any]:
    result = s.step(attempt_id).result
    if result is None:
        raise ChatError(f"{attempt_id} was not evaluated yet")
    roofline = dataclasses.asdict(result.roofline) if result.roofline else None
    return result.headline() | {"roofline": roofline, "ncu": result.ncu}


def _evaluate(s: Session, path: str) -> dict[str, Any]:
    step = s.evaluate_file(Path(path))
    return {"id": step.attempt.attempt_id} | (step.result.headline() if step.result else {})


HANDLERS: dict[str, Callable[..., Any]] = {
    "evaluate": _evaluate,
    "run_round": _run,
    "attempts": _steps,
    "profile": _profile,
    "search": lambda s, query: [{"id": h.id, "text": h.text[:800]} for h in s.search(query)],
}


class Assistant:
    def __init__(self, session: Session, client: openai.OpenAI, model: str, max_tool_turns: int = 4) -> None:
        self.session, self.client, self.model, self.max_tool_turns = session, client, model, max_tool_turns

    @classmethod
    def from_settings(cls, session: Session, settings: RunSettings) -> Assistant:
        client = openai.OpenAI(
            base_url=settings.base_url, api_key=settings.api_key or "not-needed",
            timeout=settings.timeout_s, max_retries=settings.retries,
        )  # fmt: skip
        return cls(session, client, settings.model or "")

    def _history(self) -> list[dict[str, Any]]:
        turns = [(r, c) for r, c in self.session.log.entries if not (r == "user" and c.startswith("/"))]
        return [{"role": "system", "content": SYSTEM}, *({"role": r, "content": c} for r, c in turns)]

    def answer(self, text: str) -> str:
        """Stream the model's answer to the screen, calling tools as it asks; the final text."""
        messages = self._history()
        if not messages or messages[-1].get("content") != text:
            messages.append({"role": "user", "content": text})
        for _ in range(self.max_tool_turns + 1):
            content, calls = self._stream(messages)
            if not calls:
                return content
            messages.append({"role": "assistant", "content": content or None, "tool_calls": calls})
            for call in calls:
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": self._call(call)})
        return content

    def _call(self, call: dict[str, Any]) -> str:
        name = call["function"]["name"]
        console = self.session.console
        console.print(Text(f"tool {name}({call['function']['arguments']})", style="dim"), highlight=False)
        handler = HANDLERS.get(name)
        if handler is None:
            return f"error: no tool named {name}"
        try:
            out = handler(self.session, **json.loads(call["function"]["arguments"] or "{}"))
        except (ChatError, TypeError, json.JSONDecodeError) as err:
            return f"error: {err}"
        return json.dumps(out, default=str)

    def _stream(self, messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
        where = str(self.client.base_url).rstrip("/")
        parts: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        try:
            stream = self.client.chat.completions.create(
                model=self.model,
                messages=messages,  # type: ignore[arg-type]
                tools=TOOLS,  # type: ignore[arg-type]
                stream=True,
            )
            for chunk in stream:
                delta = chunk.choices[0].delta if chunk.choices else None  # type: ignore[union-attr]
                if delta is None:
                    continue
                if delta.content:
                    parts.append(delta.content)
                    self.session.console.print(delta.content, end="", markup=False, highlight=False)
                for tc in delta.tool_calls or []:
                    entry = calls.setdefault(
                        tc.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                    )
                    entry["id"] = tc.id or entry["id"]
                    if tc.function is not None:
                        entry["function"]["name"] += tc.function.name or ""
                        entry["function"]["arguments"] += tc.function.arguments or ""
        except openai.APIConnectionError:
            raise EndpointUnreachable(f"LLM endpoint {where} is unreachable") from None
        except openai.APIStatusError as err:
            raise EndpointError(f"LLM endpoint {where} answered HTTP {err.status_code}") from None
        if parts:
            self.session.console.print()
        return "".join(parts), [calls[i] for i in sorted(calls)]
