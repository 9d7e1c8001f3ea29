"""Upstream chat models: the seam over litellm, shipped fakes, and the local model launcher."""
