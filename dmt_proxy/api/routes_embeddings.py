"""``/v1/embeddings`` (routed like chat), and the answer to the legacy ``/v1/completions``.

``/v1/completions`` is refused with a 404 in OpenAI's error shape that lists the
routes dmt-proxy serves: a bare prompt has no user turn, so it could be neither
retrieved for nor written to memory, and passing it through would let an agent's
traffic bypass the audit without anyone noticing.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from dmt_proxy.api.admission import authenticate, read_request
from dmt_proxy.api.bodies import parse_json_object, validate_body
from dmt_proxy.api.routes import EMBEDDINGS, LEGACY_COMPLETIONS, ROUTES
from dmt_proxy.api.routing import serve
from dmt_proxy.errors import NotFound
from dmt_proxy.upstream.embeddings import EmbeddingRequest, EmbeddingRouter

router = APIRouter()

SUPPORTED_ROUTES = tuple(route.name for route in ROUTES if route.model_api)


def parse_embedding_request(body: bytes) -> EmbeddingRequest:
    """Parse and validate an embeddings body."""
    return validate_body(EmbeddingRequest, parse_json_object(body))


@serve(router, EMBEDDINGS)
async def embeddings(request: Request) -> Response:
    req = (await read_request(request, parse_embedding_request)).body
    embedder: EmbeddingRouter = request.app.state.embeddings
    reply = await embedder.embed(req)
    return Response(reply.model_dump_json(), media_type="application/json")


@serve(router, LEGACY_COMPLETIONS)
async def legacy_completions(request: Request) -> Response:
    authenticate(request)
    raise NotFound(
        "dmt-proxy does not serve the legacy completions API (/v1/completions): a bare prompt "
        "has no user turn to retrieve memories for or to write. Send the prompt as a user "
        f"message instead. Supported routes: {', '.join(SUPPORTED_ROUTES)}.",
        code="unsupported_route",
    )
