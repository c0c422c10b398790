"""The read-eval-print loop: prompt_toolkit line editing and history, slash commands, free text
to the LLM (or a one-line pointer to the commands when none is configured)."""

from __future__ import annotations

from prompt_toolkit import PromptSession
from prompt_toolkit.history import InMemoryHistory
from rich.markdown import Markdown
from rich.markup import escape

from ..policy.llm import LLMError
from ..run import RunStopped
from .assistant import Assistant
from .session import ChatError, Session
from .slash import Quit, dispatch

PROMPT = "kforge> "
NO_LLM = (
    "no LLM configured: /task FILE, /run and /help drive the embedded policy; "
    "set OPENAI_BASE_URL and KFORGE_MODEL (or --base-url/--model) to talk to a model"
)


def replay_screen(s: Session) -> None:
    """On --resume: the conversation so far, as it was on the screen."""
    for role, content in s.log.entries:
        if role == "user":
            s.console.print(f"[dim]>[/] {escape(content)}", highlight=False)
        else:
            s.console.print(Markdown(content))


def _answer(s: Session, line: str, assistant: Assistant | None) -> None:
    if line.startswith("/"):
        dispatch(s, line)
    elif assistant is None:
        s.console.print(NO_LLM, highlight=False)
    else:
        s.log.add("assistant", assistant.answer(line))


def loop(s: Session, assistant: Assistant | None) -> None:
    history = InMemoryHistory()
    for line in s.log.user_lines():
        history.append_string(line)
    prompt: PromptSession[str] = PromptSession(history=history)
    while True:
        if s.typed_ahead:  # typed while a round ran: run now, as if typed at this prompt
            line = s.typed_ahead.pop(0)
            s.console.print(f"{PROMPT}{escape(line)}", highlight=False)
        else:
            try:
                line = prompt.prompt(PROMPT).strip()
            except KeyboardInterrupt:
                continue  # Ctrl-C at the prompt clears the line
            except EOFError:
                return
        if not line:
            continue
        s.log.add("user", line)
        try:
            _answer(s, line, assistant)
        except Quit:
            return
        except (KeyboardInterrupt, RunStopped):  # during the model's answer or a run it started
            s.console.print("[yellow]stopped[/]: what landed is kept; /run continues", highlight=False)
        except (ChatError, LLMError) as err:
            s.console.print(f"[red]error:[/] {escape(str(err))}", highlight=False, soft_wrap=True)
