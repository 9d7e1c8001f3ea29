"""Shipped fakes and test helpers. None of them is a language model.

Tests and users share these (STYLE: fakes, not mocks of our own interfaces):

- ``chat``: ``ScriptedChatModel``, a chat model answering from a script;
- ``auditor``: ``ScriptedAuditor``, registered as the ``scripted`` auditor;
- ``encoder``: ``WordHashEncoder``, a bag of hashed words standing in for the trained
  judge's sentence encoder in unit tests;
- ``upstream_server``: an instant OpenAI-compatible HTTP upstream, as an ASGI app or a
  process (``python -m dmt_proxy.testing.upstream_server``);
- ``dib``: ``FakeDecisionUpstream``, a scripted decision endpoint for DIB runs;
- ``sim``: ``FakeProxy`` and the scripted generator/agent for simulation runs;
- ``app``: ``app_client``, the real app in process behind an ``httpx`` client;
- ``pg``: ``PgCluster``, a throwaway PostgreSQL server with pgvector (tests and the
  PostgreSQL benchmark);
- ``fixtures`` and ``pg_fixtures``: the pytest fixtures built on ``app`` and ``pg`` (the
  only modules importing pytest).

Production modules do not import this package, except by name where a fake is a
plugin a user can select (the ``scripted`` auditor, loaded when asked for). Importing
the package imports none of its modules.
"""
