"""Upstream chat models: endpoints and the factory that builds them, the seam over litellm
and the direct OpenAI-compatible path, shipped fakes, and the local model launcher."""
