"""Upstream chat models: endpoints and the factory that builds them, the seam over litellm
and the direct OpenAI-compatible path, and the local model launcher (the shipped fakes
are in ``dmt_proxy.testing``)."""
