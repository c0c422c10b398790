"""``kforge mcp``: kforge's tools, runs and corpus served over the Model Context Protocol.

``server`` wires the SDK's MCPServer; ``tools`` and ``resources`` hold what it offers;
``runs`` drives optimize and batch runs as child processes; ``workspace`` keeps every path
argument inside the root the server was started with.
"""
