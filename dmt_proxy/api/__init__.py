"""The HTTP layer: the only package that imports FastAPI."""

from dmt_proxy.api.app import create_app

__all__ = ["create_app"]
