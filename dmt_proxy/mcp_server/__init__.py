"""The MCP memory server: mem0's memory tools over the proxy's memory service.

``tools`` holds what each tool does (over ``DurableMemoryService``: one write path,
the outbox), ``server`` puts the tools on the ``mcp`` SDK's server, ``stdio`` runs it
alone for desktop agents (``dmt-proxy mcp``); ``dmt_proxy.api.mcp`` serves it at
``/mcp``. Nothing here imports the web framework.
"""
