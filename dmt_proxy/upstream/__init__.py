"""Upstream chat models: endpoints and the factory that builds them, the upstream client
registry (litellm, the direct OpenAI-compatible path and their ``auto`` composition),
and the local model launcher (the shipped fakes are in ``dmt_proxy.testing``)."""
