"""A fake OpenAI-compatible decision upstream, for tests. It is NOT a language model.

``FakeDecisionUpstream`` answers ``/chat/completions`` through an
``httpx.MockTransport``, so the real ``openai`` SDK parses its replies exactly as
it parses llama-server's. Replies are scripted (a string, or a function of the
request body). It can mimic llama-server (single-digit tokens with top
log-probabilities and the empty end step), a host that drops log-probabilities,
or one that rejects the ``grammar`` parameter with a 400.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from dmt_bench.endpoint import Endpoint


@dataclass(frozen=True)
class ScriptedSteps:
    """An explicit token-by-token reply: (token, {alternative: probability}) per step."""

    steps: tuple[tuple[str, Mapping[str, float]], ...]

    @property
    def text(self) -> str:
        return "".join(tok for tok, _ in self.steps)


Reply = str | ScriptedSteps
Script = Reply | Callable[[dict[str, Any]], Reply]


def prompt_of(body: Mapping[str, Any]) -> str:
    """The user message of a chat request body (the DIB prompt)."""
    return "\n".join(
        m.get("content", "") for m in body.get("messages", []) if m.get("role") == "user"
    )


@dataclass
class FakeDecisionUpstream:
    """Scripted chat-completions endpoint; records every request body it receives."""

    script: Script = "50"
    logprobs: bool = True
    """Return log-probabilities when asked (False: like a host or proxy that drops them)."""
    reject_grammar: bool = False
    fail_with: int | None = None
    """Answer every request with this HTTP status instead (e.g. 500)."""
    requests: list[dict[str, Any]] = field(default_factory=list)

    def _reply(self, body: dict[str, Any]) -> Reply:
        return self.script(body) if callable(self.script) else self.script

    def _logprobs(self, reply: Reply) -> dict[str, Any]:
        if isinstance(reply, ScriptedSteps):
            steps = [(tok, dict(alts)) for tok, alts in reply.steps]
        else:
            steps = [(ch, {ch: 1.0}) for ch in reply] + [("", {"": 1.0})]
        content = []
        for tok, alts in steps:
            alts.setdefault(tok, 1e-9)
            content.append(
                {
                    "token": tok,
                    "logprob": math.log(alts[tok]),
                    "bytes": list(tok.encode()),
                    "top_logprobs": [
                        {"token": a, "logprob": math.log(p), "bytes": list(a.encode())}
                        for a, p in sorted(alts.items(), key=lambda kv: -kv[1])
                        if p > 0
                    ],
                }
            )
        return {"content": content}

    def handle(self, request: httpx.Request) -> httpx.Response:
        """The ``httpx.MockTransport`` handler."""
        body = json.loads(request.content or b"{}")
        self.requests.append(body)
        if self.fail_with is not None:
            return httpx.Response(
                self.fail_with,
                json={
                    "error": {
                        "message": "scripted failure",
                        "type": "server_error",
                        "param": None,
                        "code": None,
                    }
                },
            )
        if self.reject_grammar and "grammar" in body:
            return httpx.Response(
                400,
                json={
                    "error": {
                        "message": "Unrecognized request argument supplied: grammar",
                        "type": "invalid_request_error",
                        "param": "grammar",
                        "code": None,
                    }
                },
            )
        reply = self._reply(body)
        text = reply.text if isinstance(reply, ScriptedSteps) else reply
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": "stop",
        }
        if body.get("logprobs") and self.logprobs:
            choice["logprobs"] = self._logprobs(reply)
        return httpx.Response(
            200,
            json={
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "fake"),
                "choices": [choice],
                "usage": {"prompt_tokens": 0, "completion_tokens": 1, "total_tokens": 1},
            },
        )

    def client(self, endpoint: Endpoint) -> Any:
        """An ``openai.AsyncOpenAI`` wired to this fake (no network)."""
        from openai import AsyncOpenAI

        return AsyncOpenAI(
            base_url=endpoint.base_url,
            api_key=endpoint.api_key,
            max_retries=0,
            default_headers=endpoint.headers(),
            # the SDK accepts a legacy ``httpx`` client as well as its own ``httpx2`` one
            http_client=httpx.AsyncClient(  # type: ignore[arg-type]
                transport=httpx.MockTransport(self.handle)
            ),
        )
