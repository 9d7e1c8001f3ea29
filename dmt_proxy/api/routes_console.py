"""The review console: HTML pages over the review service, behind the review keys.

Pages: ``/console`` (overview), ``/console/queue``, ``/console/memories/{id}``,
``/console/users?user=``; ``/console/login`` and ``/console/logout``; the assets
under ``/console/static/``. Actions are not routes here: the page's script posts
to the JSON review API (``dmt_proxy.api.routes_review``) with the session's CSRF
token. Why templates and no front-end library: ``dmt_proxy.api.console``.

Memory text is user-controlled and rendered as text: Jinja2 escapes every value,
and ``visible`` shows invisible format characters (bidi overrides, zero-width
characters) as their code points, so a memory cannot reorder or hide what the
reviewer reads. A tag's group, tendency and rationale are shown grounded in the memory's
text (``dmt_proxy.audit.grounding``): verdicts stored since grounding arrive so, and an
older tag or trail entry is grounded for display, so an ungrounded rationale never
reaches the page. Every answer carries a Content-Security-Policy without inline
script, and the console may not be framed.
"""

from __future__ import annotations

import asyncio
import unicodedata
from datetime import UTC, date, datetime, time
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape

from dmt_proxy.api.review_auth import (
    COOKIE,
    SESSION_S,
    Session,
    issue_session,
    read_session,
    review_service,
    reviewer_for_key,
    same_origin,
)
from dmt_proxy.api.routes import (
    CONSOLE_LOGIN,
    CONSOLE_LOGIN_FORM,
    CONSOLE_LOGOUT,
    CONSOLE_MEMORY,
    CONSOLE_OVERVIEW,
    CONSOLE_QUEUE,
    CONSOLE_STATIC,
    CONSOLE_USERS,
)
from dmt_proxy.api.routes_memory import Forbidden
from dmt_proxy.api.routing import serve
from dmt_proxy.audit.grounding import ground, ground_tag
from dmt_proxy.domains import BIAS_TYPES
from dmt_proxy.errors import NotFound, RequestError
from dmt_proxy.memory.review import QUEUE_STATUSES, MemoryDetail, QueueFilter
from dmt_proxy.tags import AuditStatus

router = APIRouter()

SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    # Not no-referrer: with it the browser sends "Origin: null", which the CSRF check refuses.
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}
STATIC = {"console.css": "text/css", "console.js": "text/javascript"}
_KEPT = {"\n", "\t"}


def visible(value: object) -> str:
    """``value`` as text with invisible format and control characters shown as code points."""
    text = "" if value is None else str(value)
    return "".join(
        f"\u27e6U+{ord(ch):04X}\u27e7"
        if ch not in _KEPT and unicodedata.category(ch) in ("Cf", "Cc", "Zl", "Zp")
        else ch
        for ch in text
    )


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


_ENV = Environment(
    loader=PackageLoader("dmt_proxy.api.console", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENV.filters["visible"] = visible
_ENV.globals["fmt"] = _fmt


def page(name: str, session: Session | None, status: int = 200, **context: Any) -> HTMLResponse:
    """A rendered template with the console's security headers."""
    html = _ENV.get_template(name).render(
        reviewer=session.reviewer if session else None, csrf=session.csrf if session else "",
        **context,
    )  # fmt: skip
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def _signed_in(request: Request) -> Session | Response:
    session = read_session(request)
    if session is None:
        return RedirectResponse("/console/login", status_code=303, headers=SECURITY_HEADERS)
    return session


def _error_page(session: Session, exc: RequestError) -> HTMLResponse:
    return page("base.html", session, status=exc.status_code, error=str(exc))


@serve(router, CONSOLE_LOGIN_FORM)
async def login_form(request: Request) -> Response:
    """The sign-in form."""
    return page("login.html", None)


async def _form(request: Request) -> dict[str, str]:
    body = (await request.body())[:8192].decode("utf-8", "replace")
    return {k: v[0] for k, v in parse_qs(body).items()}


@serve(router, CONSOLE_LOGIN)
async def login(request: Request) -> Response:
    """Check the key, then set the session cookie and go to the overview."""
    if not same_origin(request):
        raise Forbidden("Cross-site sign-in refused.")
    form = await _form(request)
    reviewer = reviewer_for_key(request, form.get("key", ""), form.get("name", ""))
    if reviewer is None:
        return page("login.html", None, status=401, error="That key opens no review console.")
    value, _ = issue_session(request, reviewer)
    resp = RedirectResponse("/console", status_code=303, headers=SECURITY_HEADERS)
    resp.set_cookie(COOKIE, value, max_age=SESSION_S, httponly=True, samesite="strict",
                    secure=request.url.scheme == "https", path="/")  # fmt: skip
    return resp


@serve(router, CONSOLE_LOGOUT)
async def logout(request: Request) -> Response:
    """End the session (a form post carrying the CSRF token)."""
    session = read_session(request)
    form = await _form(request)
    if session is not None and (form.get("csrf") != session.csrf or not same_origin(request)):
        raise Forbidden("Missing or wrong CSRF token.")
    resp = RedirectResponse("/console/login", status_code=303, headers=SECURITY_HEADERS)
    resp.delete_cookie(COOKIE, path="/")
    return resp


@serve(router, CONSOLE_OVERVIEW)
async def overview(request: Request) -> Response:
    """Audits over time, the outbox and the review rates."""
    session = _signed_in(request)
    if not isinstance(session, Session):
        return session
    o = await review_service(request).overview(session.reviewer)
    statuses = [s.value for s in AuditStatus if s is not AuditStatus.PENDING] + ["dropped"]
    return page("overview.html", session, o=o, statuses=statuses)


def _day(value: str, end: bool) -> datetime | None:
    if not value:
        return None
    try:
        day = date.fromisoformat(value)
    except ValueError:
        raise RequestError(f"Invalid date {value!r} (YYYY-MM-DD).", param="since") from None
    return datetime.combine(day, time.max if end else time.min, tzinfo=UTC)


@serve(router, CONSOLE_QUEUE)
async def queue(
    request: Request,
    domain: str = "",
    status: str = "",
    user: str = "",
    since: str = "",
    until: str = "",
) -> Response:
    """The review queue, filtered, most uncertain first."""
    session = _signed_in(request)
    if not isinstance(session, Session):
        return session
    try:
        flt = QueueFilter(domain=domain or None, status=status or None, user=user or None,
                          since=_day(since, False), until=_day(until, True))  # fmt: skip
    except RequestError as exc:
        return _error_page(session, exc)
    items = await review_service(request).queue(session.reviewer, flt)
    return page("queue.html", session, items=items, flt=flt, since=since, until=until,
                domains=BIAS_TYPES, queue_statuses=sorted(QUEUE_STATUSES))  # fmt: skip


def grounded_detail(detail: MemoryDetail) -> MemoryDetail:
    """``detail`` as the console shows it: the tag grounded in the memory's text (one
    stored before grounding is grounded here), and the evidence's group, tendency and
    rationale grounded too (the judge's own words only where they name the text's group)."""
    memory = detail.memory
    text = memory.query or memory.text
    tag = memory.tag
    if tag is not None and tag.bias_type is not None and tag.grounding is None:
        tag = ground_tag(tag, text)
    evidence = detail.evidence
    if evidence is not None and tag is not None and tag.grounding is not None:
        evidence = evidence.model_copy(update={"target_group": tag.target_group,
                                               "tendency": tag.tendency,
                                               "rationale": tag.rationale})  # fmt: skip
    elif evidence is not None and evidence.bias_type is not None:
        g = ground(text, domain=evidence.bias_type, target_group=evidence.target_group,
                   tendency=evidence.tendency, rationale=evidence.rationale)  # fmt: skip
        evidence = evidence.model_copy(update={"target_group": g.target_group,
                                               "tendency": g.tendency, "rationale": g.rationale})  # fmt: skip
    return detail.model_copy(
        update={"memory": memory.model_copy(update={"tag": tag}), "evidence": evidence}
    )


@serve(router, CONSOLE_MEMORY)
async def memory(request: Request, memory_id: str) -> Response:
    """One memory: text, evidence, history, and how each mode shows it."""
    session = _signed_in(request)
    if not isinstance(session, Session):
        return session
    try:
        detail = await review_service(request).detail(memory_id, session.reviewer)
    except (NotFound, RequestError) as exc:
        return _error_page(session, exc)
    # Grounding a long memory is pure-Python work: off the event loop.
    grounded = await asyncio.to_thread(grounded_detail, detail)
    return page("memory.html", session, d=grounded, domains=BIAS_TYPES)


@serve(router, CONSOLE_USERS)
async def user(request: Request, user: str = "") -> Response:
    """A user's memories and the block the agent sees in DMT mode."""
    session = _signed_in(request)
    if not isinstance(session, Session):
        return session
    try:
        if not user.strip():
            raise RequestError("Name a user.", param="user")
        view = await review_service(request).user_view(user, session.reviewer)
    except RequestError as exc:
        return _error_page(session, exc)
    return page("user.html", session, u=view)


@serve(router, CONSOLE_STATIC)
async def static(name: str) -> Response:
    """The console's own CSS and JavaScript, from the package."""
    if name not in STATIC:
        raise NotFound(f"No console asset '{name}'.")
    body = resources.files("dmt_proxy.api.console").joinpath("static", name).read_bytes()
    return Response(body, media_type=STATIC[name], headers=SECURITY_HEADERS)
