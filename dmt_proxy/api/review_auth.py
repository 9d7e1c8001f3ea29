"""Who is reviewing: the admin key, a reviewing tenant's key, or a console session.

Two ways in, one ``Reviewer`` out (``dmt_proxy.memory.review.Reviewer``):

- ``Authorization: Bearer <key>``: the admin key (``DMT_ADMIN_KEY``; every tenant) or
  the key of a tenant marked ``review: true`` in the tenants file (that tenant only).
  ``X-DMT-Reviewer`` names the person for the trail. A browser never attaches this
  header on its own, so these requests need no CSRF token.
- The console's session cookie, set by ``/console/login`` after the same key check.
  It is signed (HMAC-SHA256 under a per-process secret), ``HttpOnly`` and
  ``SameSite=Strict``, expires after ``SESSION_S``, and dies when the admin key
  changes. A state-changing request carried by the cookie must also send the
  session's CSRF token in ``X-CSRF-Token`` (double submit: the page has it, another
  site cannot read it), and an ``Origin`` header, when sent, must be this host.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass

from fastapi import Request

from dmt_proxy.api.auth import Tenants
from dmt_proxy.api.routes_memory import Forbidden
from dmt_proxy.errors import NotFound, Unauthorized
from dmt_proxy.memory.review import Reviewer, ReviewService

COOKIE = "dmt_console"
SESSION_S = 8 * 3600
CSRF_HEADER = "x-csrf-token"
_NAME_CHARS = 100


@dataclass(frozen=True)
class Session:
    """A signed-in console reviewer and the CSRF token of their session."""

    reviewer: Reviewer
    csrf: str


def _fingerprint(key: str | None) -> str:
    return hashlib.sha256((key or "").encode()).hexdigest()[:16]


def clean_name(name: str, default: str) -> str:
    """A reviewer's name for the trail: printable, bounded; ``default`` when blank."""
    kept = "".join(ch for ch in name if ch.isprintable()).strip()[:_NAME_CHARS]
    return kept or default


def reviewer_for_key(request: Request, key: str, name: str) -> Reviewer | None:
    """The reviewer ``key`` identifies (``None``: it opens no review)."""
    admin_key = request.app.state.settings.admin_key
    key = key.strip()
    if not key:
        return None
    if admin_key and hmac.compare_digest(key.encode(), admin_key.encode()):
        return Reviewer(name=clean_name(name, "admin"))
    tenants: Tenants | None = request.app.state.tenants
    tenant = tenants.identify(key) if tenants is not None else None
    if tenant is not None and tenants is not None and tenant in tenants.reviewers:
        return Reviewer(name=f"{tenant}/{clean_name(name, 'reviewer')}", tenant=tenant)
    return None


def _secret(request: Request) -> bytes:
    secret: bytes = request.app.state.console_secret
    return secret


def _sign(request: Request, payload: bytes) -> str:
    return hmac.new(_secret(request), payload, hashlib.sha256).hexdigest()


def issue_session(request: Request, reviewer: Reviewer) -> tuple[str, Session]:
    """A new session for ``reviewer``: the cookie value and the session."""
    csrf = secrets.token_urlsafe(32)
    payload = json.dumps({
        "n": reviewer.name, "t": reviewer.tenant, "c": csrf, "e": int(time.time()) + SESSION_S,
        "k": _fingerprint(request.app.state.settings.admin_key),
    }).encode()  # fmt: skip
    value = base64.urlsafe_b64encode(payload).decode() + "." + _sign(request, payload)
    return value, Session(reviewer=reviewer, csrf=csrf)


def read_session(request: Request) -> Session | None:
    """The console session the request's cookie carries (``None``: none, or not valid)."""
    value = request.cookies.get(COOKIE, "")
    encoded, _, signature = value.partition(".")
    try:
        payload = base64.urlsafe_b64decode(encoded.encode())
    except ValueError:
        return None
    if not signature or not hmac.compare_digest(signature, _sign(request, payload)):
        return None
    data = json.loads(payload)
    if data["e"] < time.time() or data["k"] != _fingerprint(request.app.state.settings.admin_key):
        return None
    tenants: Tenants | None = request.app.state.tenants
    if data["t"] is not None and (tenants is None or data["t"] not in tenants.reviewers):
        return None  # the tenant lost its review right since
    return Session(reviewer=Reviewer(name=data["n"], tenant=data["t"]), csrf=data["c"])


def same_origin(request: Request) -> bool:
    """``Origin``, when the browser sends it, names this host (a cross-site form does not)."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    return origin.split("://", 1)[-1].rstrip("/") == host


def review_service(request: Request) -> ReviewService:
    """The review operations of this proxy (404 without memory)."""
    memory = request.app.state.memory
    review: ReviewService | None = None if memory is None else memory.review
    if review is None:
        raise NotFound("Memory is disabled in this proxy's policy.")
    return review


def require_reviewer(request: Request, *, changes_state: bool) -> Reviewer:
    """The reviewer of an API request (bearer key, or console cookie with its CSRF token)."""
    header = request.headers.get("authorization", "")
    if header:
        scheme, _, key = header.partition(" ")
        reviewer = None
        if scheme.lower() == "bearer":
            name = request.headers.get("x-dmt-reviewer", "")
            reviewer = reviewer_for_key(request, key, name)
        if reviewer is None:
            raise Unauthorized("Missing or wrong review key (Authorization: Bearer <key>).")
        return reviewer
    session = read_session(request)
    if session is None:
        if not request.app.state.settings.admin_key and request.app.state.tenants is None:
            raise Forbidden("Review is disabled: start the proxy with DMT_ADMIN_KEY set.")
        raise Unauthorized("Sign in to the console, or send Authorization: Bearer <key>.")
    if changes_state:
        token = request.headers.get(CSRF_HEADER, "")
        if not same_origin(request) or not hmac.compare_digest(token, session.csrf):
            raise Forbidden("Missing or wrong CSRF token (X-CSRF-Token).")
    return session.reviewer


_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def reviewer(request: Request) -> Reviewer:
    """The review routes' dependency: the caller, authenticated before the route's query
    and body are read (a request that changes state also needs the console's CSRF token)."""
    return require_reviewer(request, changes_state=request.method not in _SAFE_METHODS)
