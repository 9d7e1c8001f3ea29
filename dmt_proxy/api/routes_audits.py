"""The audit API: ``POST /v1/audits`` judges a text, ``GET /v1/audits/{audit_id}`` polls it.

Any tool that writes text an agent will later read (a vector store's ingest job, a CRM,
a gateway) asks here whether the text is biased or carries a planted instruction,
without faking a chat turn. The text is judged by the memory write path's own audit
pipeline and decided by its own decision function (``AuditJobs`` in
``dmt_proxy.api.audits``, on ``app.state.audits``), so it gets the verdict, status and
tag a memory of it would get. Nothing is stored: no memory, no outbox row, no review
trail event.

The tenant's key is checked first (a 401 before the body is read), then the body (a 400
naming the field). An audit that finishes within the request's ``wait`` answers 200 and
its outcome; one that does not, 202 ``pending`` with a ``Location`` to poll; one whose
auditor could not answer, the error (503, or 502 for a refused request, type
``auditor_unavailable``). A poll answers the audit (200; a failed one carries its
error), or 404 for an id this key does not have: unknown, another tenant's, expired, or
accepted by another process. Results live in the process that accepted them, for
``TTL_S`` seconds after they finished.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from dmt_proxy.api.admission import authenticate, read_request
from dmt_proxy.api.audits import AuditJob, AuditJobs
from dmt_proxy.api.bodies import parse_json_object, validate_body
from dmt_proxy.api.routes import CREATE_AUDIT, GET_AUDIT
from dmt_proxy.api.routing import serve
from dmt_proxy.audit_types import AuditRequest
from dmt_proxy.errors import NotFound

router = APIRouter()


def parse_audit_request(body: bytes) -> AuditRequest:
    """Parse and validate an audit request body."""
    return validate_body(AuditRequest, parse_json_object(body))


def _audit(job: AuditJob, status_code: int = 200) -> JSONResponse:
    location = GET_AUDIT.path.replace("{audit_id}", job.id)
    headers = {"location": location} if status_code == 202 else None
    return JSONResponse(job.result().model_dump(mode="json"), status_code=status_code,
                        headers=headers)  # fmt: skip


@serve(router, CREATE_AUDIT)
async def create_audit(request: Request) -> JSONResponse:
    """Judge the body's text; its outcome, or 202 while the audit is still running."""
    parsed = await read_request(request, parse_audit_request)
    audits: AuditJobs = request.app.state.audits
    job = audits.submit(parsed.body, parsed.tenant)
    await audits.wait(job, parsed.body.wait)
    if job.error is not None:
        raise job.error  # mapped like any other: AuditorUnavailable is a 503 (or 502)
    return _audit(job, 200 if job.finished else 202)


@serve(router, GET_AUDIT)
async def get_audit(request: Request, audit_id: str) -> JSONResponse:
    """The audit ``audit_id`` of this key's tenant, pending or finished."""
    tenant = authenticate(request)
    audits: AuditJobs = request.app.state.audits
    job = audits.get(audit_id, tenant)
    if job is None:
        raise NotFound(f"No audit '{audit_id}' for this key. Audits are kept "
                       f"{audits.ttl_s / 60:g} minutes after they finish, in the proxy "
                       "process that accepted them.", param="audit_id")  # fmt: skip
    return _audit(job)
