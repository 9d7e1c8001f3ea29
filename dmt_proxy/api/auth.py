"""Tenant API keys: which tenant a chat request belongs to.

Keys are configured in a YAML file (``DMT_TENANTS_FILE``) as SHA-256 hashes, never in
clear::

    version: 1
    tenants:
      - name: acme
        key_sha256: 9f86d081884c7d65...   # dmt-proxy tenants hash-key <key>

With a tenants file, every ``/v1/chat/completions`` and ``/v1/models`` request must
carry ``Authorization: Bearer <key>`` (or ``x-api-key: <key>``, as the Anthropic SDK
sends it); the memory scope becomes ``<tenant>/<user>``,
so two tenants' users never share memories even under the same user name.
Without a file the proxy is single-tenant and open (bind it to localhost).

A tenant entry with ``review: true`` lets that tenant's key open the review console
and API (``dmt_proxy.api.routes_review``) for its own users only; the admin key
(``DMT_ADMIN_KEY``) reviews every tenant.

Which key a request used is known too (``Credential.key_id``: the first 16 hex digits of
its SHA-256, the start of its entry's ``key_sha256``), so a memory's provenance can name it
(``dmt_proxy.provenance``) without ever holding the key.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from pathlib import Path

import yaml
from fastapi import Request

from dmt_proxy.errors import ConfigError, Unauthorized
from dmt_proxy.provenance import KEY_ID_HEX

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_HEX = re.compile(r"^[0-9a-f]{64}$")


def hash_key(key: str) -> str:
    """The SHA-256 hex digest stored for an API key."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Credential:
    """Who a request authenticated as."""

    tenant: str
    key_id: str
    """The first ``KEY_ID_HEX`` hex digits of the key's SHA-256: which key, never the key."""


@dataclass(frozen=True)
class Tenants:
    """Hashed keys -> tenant names."""

    by_hash: dict[str, str]
    reviewers: frozenset[str] = frozenset()
    """Tenants whose key may review their own users' memories (``review: true``)."""

    @classmethod
    def load(cls, path: Path) -> Tenants:
        """Read and validate a tenants file (clear ConfigError on any problem)."""
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read tenants file {path}: {exc.strerror or exc}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"tenants file {path} is not valid YAML: {exc}") from exc
        if (
            not isinstance(raw, dict)
            or raw.get("version") != 1
            or not isinstance(raw.get("tenants"), list)
        ):
            raise ConfigError(f"tenants file {path}: expected 'version: 1' and a 'tenants' list")
        by_hash: dict[str, str] = {}
        reviewers: set[str] = set()
        for i, entry in enumerate(raw["tenants"]):
            if not isinstance(entry, dict):
                raise ConfigError(f"tenants file {path}: entry {i} is not a mapping")
            name, digest = str(entry.get("name", "")), str(entry.get("key_sha256", "")).lower()
            if not _NAME.match(name):
                raise ConfigError(
                    f"tenants file {path}: entry {i}: bad name {name!r} ([A-Za-z0-9_.-], ≤64)"
                )
            if not _HEX.match(digest):
                raise ConfigError(
                    f"tenants file {path}: tenant {name}: key_sha256 must be 64 hex digits"
                )
            if digest in by_hash:
                raise ConfigError(f"tenants file {path}: tenant {name} reuses another tenant's key")
            by_hash[digest] = name
            if entry.get("review") is True:
                reviewers.add(name)
        if not by_hash:
            raise ConfigError(f"tenants file {path} lists no tenants")
        return cls(by_hash=by_hash, reviewers=frozenset(reviewers))

    def identify(self, key: str) -> str | None:
        """The tenant whose key is ``key`` (``None``: no tenant), in constant time."""
        supplied = hash_key(key.strip()) if key.strip() else ""
        found = None
        for digest, name in self.by_hash.items():
            if hmac.compare_digest(supplied.encode(), digest.encode()):
                found = name
        return found

    def authenticate(self, request: Request) -> str:
        """The tenant of ``request``, or ``Unauthorized``."""
        return self.credential(request).tenant

    def credential(self, request: Request) -> Credential:
        """The tenant of ``request`` and which of its keys it sent, or ``Unauthorized``."""
        scheme, _, key = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            key = request.headers.get("x-api-key", "")  # the Anthropic SDK's header
        supplied = hash_key(key.strip()) if key.strip() else ""
        found: Credential | None = None
        # Compare against every entry so the time taken does not depend on which matched.
        for digest, name in self.by_hash.items():
            if hmac.compare_digest(supplied.encode(), digest.encode()):
                found = Credential(tenant=name, key_id=digest[:KEY_ID_HEX])
        if found is None:
            raise Unauthorized(
                "Missing or unknown API key (Authorization: Bearer <key>, or x-api-key: <key>)."
            )
        return found


def scoped_user(tenant: str | None, user: str | None) -> str | None:
    """The memory scope's user id: namespaced by tenant when tenancy is on."""
    if user is None:
        return None
    return f"{tenant}/{user}" if tenant else user
