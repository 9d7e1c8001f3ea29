"""Every exception dmt-proxy raises on purpose, in one tree; HTTP ones map to one status each.

Exception tree (a class outside this module is named with its module, relative to
``dmt_proxy``, or in full for the research harness's ``dmt_bench``; it stays there
because only that module raises it, and subclasses a class of this tree)::

    DmtError
    ├── ConfigError                bad settings or policy file (start-up, not HTTP)
    ├── RequestError               the client's request is wrong             -> 4xx
    │   ├── InvalidRequest         400  invalid_request_error
    │   │   └── ToolInputError     a wrong MCP tool argument   (mcp_server.tools)
    │   ├── Unauthorized           401  authentication_error
    │   ├── Forbidden              403  permission_error  (api.routes_memory)
    │   ├── NotFound               404  not_found_error
    │   │   └── ModelNotFound      404  model_not_found
    │   ├── PayloadTooLarge        413  request_too_large
    │   └── TooManyRequests        429  rate_limit_error: a bound of the proxy's own
    ├── UpstreamError              a model upstream failed                   -> 502
    │   ├── UpstreamTimeout        504
    │   ├── UpstreamRejected       upstream answered 4xx; its status is kept
    │   ├── AuditorUnavailable     the auditor model failed      (audit.protocol)
    │   ├── ProxyUnavailable       a benchmark's proxy stopped answering  (dmt_bench.harness.proxy)
    │   └── GeneratorUnavailable   the simulation's generator failed   (dmt_bench.sim.injection)
    ├── ReplyInvalid               a model answered, but not in the shape asked for
    │   ├── VerdictInvalid         + ValueError  not a schema-valid verdict  (audit.parsing)
    │   ├── NoLogprobs             + ValueError  no token log-probs     (audit.logprob)
    │   └── ConsolidationError     not a valid memory plan  (memory.backends.consolidation)
    ├── MemoryStoreError           the memory store failed at run time  (memory.base)
    │   ├── StoreClosed            the backend was closed               (memory.base)
    │   ├── StorageClosed          + RuntimeError  the outbox or review trail was closed
    │   │                          (a caller bug)               (memory.write.storage)
    │   └── CircuitOpenError       + ConnectionError  the store's circuit is open: the
    │                              database is unreachable, so it is not called  (memory.circuit)
    ├── RecordConflict             + ValueError  a record id written again under another
    │                              user: a caller bug, not a store failure  (memory.base)
    ├── AuditAPIError              the audit API answered an error, or no answer  (client)
    │   └── AuditTimeout           an audit still pending when the client stopped waiting  (client)
    └── RunInterrupted             a benchmark run stopped before its end; resumable
        ├── RunStopped             the simulation's turns kept failing  (dmt_bench.sim.loop)
        └── DoseStopped            the dose run's decisions kept failing  (dmt_bench.dose.runner)

    KeyboardInterrupt              (Python's; not an ``Exception``, so no ``except Exception``
    └── Terminated                 swallows it) SIGTERM raised as Ctrl-C is  (cli.framework)

Anything else that escapes is a bug: the API logs it and answers 500 without
details. A ``ValueError`` is never turned into a 400 by accident.

``+ ValueError``: those classes were ``ValueError`` subclasses before the tree had a
place for them, and stay ones (multiple inheritance), so code that reads a reply or
writes a record inside ``except ValueError`` (a parse error is one) keeps catching
them; likewise ``StorageClosed`` stays the ``RuntimeError`` that a closed outbox or
trail raised before. ``RunInterrupted`` is not an ``UpstreamError``: a stopped
benchmark run is not a failed model call, and nothing that retries or maps upstream
failures must treat it as one; the benchmark commands catch it by name.
``tests/unit/test_errors_tree.py`` walks every exception class defined in ``dmt_proxy``
and ``dmt_bench`` and checks that it is drawn here, under its parent, with the module it is defined in.
"""

from __future__ import annotations


class DmtError(Exception):
    """Base of every error dmt-proxy raises on purpose."""


class ConfigError(DmtError):
    """Settings, policy or model configuration is invalid; raised at start-up."""


class RequestError(DmtError):
    """The client's request cannot be served as sent."""

    status_code = 400
    error_type = "invalid_request_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


class InvalidRequest(RequestError):
    """Malformed or unsupported request content (400)."""


class Unauthorized(RequestError):
    """Missing or wrong credentials (401)."""

    status_code = 401
    error_type = "authentication_error"


class NotFound(RequestError):
    """The addressed resource does not exist (404)."""

    status_code = 404
    error_type = "not_found_error"


class ModelNotFound(NotFound):
    """The requested model is neither a configured alias nor a provider model (404)."""

    error_type = "invalid_request_error"

    def __init__(self, model: str, known: list[str]):
        super().__init__(
            f"The model '{model}' does not exist or is not served by this proxy. "
            f"Known aliases: {', '.join(known) or 'none'}; other models must be litellm "
            "names with a provider prefix (for example 'openai/gpt-4o-mini').",
            param="model",
            code="model_not_found",
        )


class PayloadTooLarge(RequestError):
    """Request body larger than the configured limit (413)."""

    status_code = 413
    error_type = "invalid_request_error"


class TooManyRequests(RequestError):
    """The proxy is at a bound of its own (audits in progress); retry later (429)."""

    status_code = 429
    error_type = "rate_limit_error"


class UpstreamError(DmtError):
    """The upstream model could not produce an answer (502)."""

    status_code = 502
    error_type = "upstream_error"

    def __init__(self, message: str, *, upstream: str, status_code: int | None = None):
        super().__init__(message)
        self.message = message
        self.upstream = upstream
        if status_code is not None:
            self.status_code = status_code


class UpstreamTimeout(UpstreamError):
    """The upstream did not answer in time (504)."""

    status_code = 504
    error_type = "upstream_timeout"


class UpstreamRejected(UpstreamError):
    """The upstream refused the request with a 4xx; the status is passed on."""

    error_type = "invalid_request_error"


class ReplyInvalid(DmtError):
    """A model answered, but its reply is not what was asked for (JSON, a plan, log-probs)."""


class RunInterrupted(DmtError):
    """A benchmark run stopped before its end; it can be resumed from its checkpoint.

    ``upstream`` names what kept failing (a proxy's or an endpoint's base URL), if anything.
    """

    def __init__(self, message: str, *, upstream: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.upstream = upstream
