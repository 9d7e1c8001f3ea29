"""Upstream chat models: endpoints and the factory that builds them, the upstream client
registry (litellm, the direct OpenAI-compatible path and their ``auto`` composition),
shipped fakes, and the local model launcher."""
