"""``kforge chat``: an interactive terminal session over the same LangGraph loop.

``session`` holds the run a chat drives, ``slash`` the slash commands, ``approval`` the
terminal answers to the graph's interrupts (shared with ``kforge optimize --approve``),
``assistant`` the LLM with kforge's tools, ``log`` the conversation kept in the run folder.
"""
