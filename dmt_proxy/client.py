"""The audit API's client: ``AuditClient`` and ``AsyncAuditClient``, over httpx.

Ask a running dmt-proxy whether a text is biased or carries a planted instruction,
before it goes where an agent will read it (a vector store, a CRM)::

    from dmt_proxy.client import AuditClient

    with AuditClient("http://127.0.0.1:8080", api_key="my-tenant-key") as client:
        result = client.audit("Women are bad at math.", channel="crm")
    result.outcome.audit_status  # AuditStatus.TAGGED: what a memory of it would become
    result.outcome.tag           # the bias tag it would be stored with (None when clean)

``audit`` sends the text (``POST /v1/audits``), lets the proxy wait for the verdict up to
``wait`` seconds, then polls ``GET /v1/audits/{id}`` until the audit is done or
``timeout_s`` has passed since the call began. It returns a completed ``AuditResult``
(``dmt_proxy.audit_types``; ``outcome`` is set). An error answer (4xx, 5xx), an audit
that failed and a proxy that does not answer raise ``AuditAPIError`` with the HTTP
status and the error's type, code and param as the proxy sent them (an auditor that is
down: 503, ``auditor_unavailable``); a still pending audit at the deadline raises
``AuditTimeout``, which names the audit's id so it can be polled later with ``get``.
The two clients differ only in their I/O; the request, the reading of answers and the
deadline are the functions below, shared. Nothing here imports the server side.
"""

from __future__ import annotations

import asyncio
import json
import time
from types import TracebackType
from typing import Any

import httpx
from pydantic import ValidationError

from dmt_proxy.audit_types import DEFAULT_WAIT_S, MAX_WAIT_S, AuditResult, Speaker
from dmt_proxy.domains import BiasType
from dmt_proxy.errors import DmtError

AUDITS_PATH = "/v1/audits"
DEFAULT_TIMEOUT_S = 120.0
"""How long ``audit`` waits for a verdict in all, polls included."""
POLL_INTERVAL_S = 0.5
HTTP_SLACK_S = 30.0
"""Added to the proxy's own wait for one HTTP exchange's timeout."""


class AuditAPIError(DmtError):
    """The audit API answered an error (4xx, 5xx), the audit failed, or no answer came."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None,
        error_type: str | None = None,
        code: str | None = None,
        param: str | None = None,
        audit_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        """The HTTP status (``None``: the proxy did not answer)."""
        self.error_type = error_type
        self.code = code
        self.param = param
        self.audit_id = audit_id
        """The audit concerned, where there is one (a failed or still pending audit)."""


class AuditTimeout(AuditAPIError):
    """The audit was still pending when the client's ``timeout_s`` ran out."""


def api_root(base_url: str) -> str:
    """The proxy's root URL from its root or its ``/v1`` (as ``OPENAI_BASE_URL`` names it)."""
    root = base_url.rstrip("/")
    return root.removesuffix("/v1")


def _headers(api_key: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


def audit_body(
    text: str, *, speaker: Speaker, channel: str | None, user: str | None,
    domain_hint: BiasType | None, wait: float,
) -> dict[str, Any]:  # fmt: skip
    """The JSON body of ``POST /v1/audits`` (fields left unset are not sent)."""
    body: dict[str, Any] = {"text": text, "speaker": speaker, "wait": wait}
    optional = {"channel": channel, "user": user, "domain_hint": domain_hint}
    body.update({name: value for name, value in optional.items() if value is not None})
    return body


def error_of(response: httpx.Response) -> AuditAPIError:
    """The error an answer of status 4xx or 5xx carries (OpenAI's shape, when it is)."""
    try:
        detail = json.loads(response.content)["error"]
        message = str(detail["message"])
    except (ValueError, KeyError, TypeError):
        text = response.text.strip()[:500] or response.reason_phrase
        return AuditAPIError(f"dmt-proxy answered {response.status_code}: {text}",
                             status_code=response.status_code)  # fmt: skip
    return AuditAPIError(message, status_code=response.status_code,
                         error_type=detail.get("type"), code=detail.get("code"),
                         param=detail.get("param"))  # fmt: skip


def read_audit(response: httpx.Response) -> AuditResult:
    """The audit object of an answer; ``AuditAPIError`` for an error or a failed audit."""
    if response.status_code >= 400:
        raise error_of(response)
    try:
        result = AuditResult.model_validate_json(response.content)
    except ValidationError as exc:
        raise AuditAPIError(f"dmt-proxy's answer is not an audit object: {exc}",
                            status_code=response.status_code) from None  # fmt: skip
    if result.status == "failed":
        failure = result.error
        raise AuditAPIError(
            failure.message if failure else "the audit failed",
            status_code=failure.status if failure else None,
            error_type=failure.type if failure else None,
            code=failure.code if failure else None, audit_id=result.id,
        )  # fmt: skip
    return result


class _Deadline:
    """The time left of one ``audit`` call, and what it allows next."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._end = time.monotonic() + timeout_s

    def left(self) -> float:
        return self._end - time.monotonic()

    def server_wait(self, wait: float) -> float:
        """The ``wait`` to ask the proxy for: no longer than the call has left."""
        return max(0.0, min(wait, MAX_WAIT_S, self.left()))

    def next_poll(self, result: AuditResult, interval_s: float) -> float:
        """Seconds to sleep before polling ``result`` again; ``AuditTimeout`` when none left."""
        left = self.left()
        if left <= 0:
            raise AuditTimeout(
                f"Audit {result.id} is still pending after {self.timeout_s:g} s; poll it "
                "later with get() (the proxy keeps it for a while after it finishes).",
                status_code=None, error_type="timeout", audit_id=result.id,
            )  # fmt: skip
        return min(interval_s, left)


def _unreachable(root: str, exc: httpx.HTTPError) -> AuditAPIError:
    return AuditAPIError(f"No answer from dmt-proxy at {root}: {type(exc).__name__}: {exc}",
                         status_code=None)  # fmt: skip


class AuditClient:
    """The audit API, blocking: ``audit(text)`` returns the completed audit."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        poll_interval_s: float = POLL_INTERVAL_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.root = api_root(base_url)
        self.timeout_s = timeout_s
        self.poll_interval_s = poll_interval_s
        self._http = httpx.Client(base_url=self.root, headers=_headers(api_key),
                                  transport=transport, timeout=HTTP_SLACK_S)  # fmt: skip

    def audit(
        self, text: str, *, speaker: Speaker = "user", channel: str | None = None,
        user: str | None = None, domain_hint: BiasType | None = None,
        wait: float = DEFAULT_WAIT_S, timeout_s: float | None = None,
    ) -> AuditResult:  # fmt: skip
        """Judge ``text`` as a memory write would be judged; poll until it is done."""
        deadline = _Deadline(self.timeout_s if timeout_s is None else timeout_s)
        asked = deadline.server_wait(wait)
        body = audit_body(text, speaker=speaker, channel=channel, user=user,
                          domain_hint=domain_hint, wait=asked)  # fmt: skip
        result = self._call("POST", AUDITS_PATH, json=body, timeout=asked + HTTP_SLACK_S)
        while result.status == "pending":
            time.sleep(deadline.next_poll(result, self.poll_interval_s))
            result = self.get(result.id)
        return result

    def get(self, audit_id: str) -> AuditResult:
        """The audit ``audit_id`` as the proxy has it now (pending or completed)."""
        return self._call("GET", f"{AUDITS_PATH}/{audit_id}")

    def _call(self, method: str, path: str, **kwargs: Any) -> AuditResult:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise _unreachable(self.root, exc) from exc
        return read_audit(response)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> AuditClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncAuditClient:
    """The audit API for asyncio: ``await audit(text)`` returns the completed audit."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        poll_interval_s: float = POLL_INTERVAL_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.root = api_root(base_url)
        self.timeout_s = timeout_s
        self.poll_interval_s = poll_interval_s
        self._http = httpx.AsyncClient(base_url=self.root, headers=_headers(api_key),
                                       transport=transport, timeout=HTTP_SLACK_S)  # fmt: skip

    async def audit(
        self, text: str, *, speaker: Speaker = "user", channel: str | None = None,
        user: str | None = None, domain_hint: BiasType | None = None,
        wait: float = DEFAULT_WAIT_S, timeout_s: float | None = None,
    ) -> AuditResult:  # fmt: skip
        """Judge ``text`` as a memory write would be judged; poll until it is done."""
        deadline = _Deadline(self.timeout_s if timeout_s is None else timeout_s)
        asked = deadline.server_wait(wait)
        body = audit_body(text, speaker=speaker, channel=channel, user=user,
                          domain_hint=domain_hint, wait=asked)  # fmt: skip
        result = await self._call("POST", AUDITS_PATH, json=body, timeout=asked + HTTP_SLACK_S)
        while result.status == "pending":
            await asyncio.sleep(deadline.next_poll(result, self.poll_interval_s))
            result = await self.get(result.id)
        return result

    async def get(self, audit_id: str) -> AuditResult:
        """The audit ``audit_id`` as the proxy has it now (pending or completed)."""
        return await self._call("GET", f"{AUDITS_PATH}/{audit_id}")

    async def _call(self, method: str, path: str, **kwargs: Any) -> AuditResult:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise _unreachable(self.root, exc) from exc
        return read_audit(response)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncAuditClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
