"""Upstream chat models: endpoints (``base``), model-name resolution (``models``), the
factory that builds them (``factory``), the upstream client plugins (``clients/``: the
registry, litellm, the direct OpenAI-compatible path and their ``auto`` composition),
embeddings (``embeddings``) and the local model launcher (the shipped fakes are in
``dmt_proxy.testing``)."""
