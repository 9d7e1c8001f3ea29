"""The JSON-lines log of every model call a run makes (``calls.jsonl`` in the run dir).

One line per call: time, role (``generator``, ``agent``, ``dib``), memory
architecture and condition when known, model, latency, the request (messages and
parameters) and the reply text, plus an outcome. Audits happen inside the proxy
and are not calls of ours; their verdicts are logged per turn (role ``audit``)
from the proxy's memory listing. The format is versioned (``CALL_LOG_VERSION``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CALL_LOG_VERSION = "sim-calls-v1"


class CallLog:
    """Appends one JSON object per call; every line is flushed (a killed run keeps its log)."""

    def __init__(self, path: Path | None, **context: Any) -> None:
        self.path = path
        self.context = context
        self._fh = path.open("a", encoding="utf-8") if path is not None else None
        self._owner = True

    def bind(self, **context: Any) -> CallLog:
        """A view writing to the same file with extra fields on every line."""
        view = CallLog.__new__(CallLog)
        view.path = self.path
        view.context = {**self.context, **context}
        view._fh = self._fh
        view._owner = False
        return view

    def write(self, **fields: Any) -> None:
        """Append one record (``v``, ``ts`` and the bound context are added)."""
        if self._fh is None:
            return
        record = {"v": CALL_LOG_VERSION, "ts": round(time.time(), 3), **self.context, **fields}
        if isinstance(record.get("latency_s"), float):
            record["latency_s"] = round(record["latency_s"], 4)
        self._fh.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None and self._owner:
            self._fh.close()
        self._fh = None


def _reply_text(completion: Any) -> str:
    choices = getattr(completion, "choices", None) or []
    if not choices or choices[0].message is None:
        return ""
    return str(choices[0].message.content or "")


class _Completions:
    def __init__(
        self,
        inner: Any,
        log: CallLog,
        role: str,
        on_call: Callable[[], None] | None,
        parse: Callable[[Any], Any] | None = None,
    ):
        self._inner = inner
        self._log = log
        self._role = role
        self._on_call = on_call
        self._parse = parse

    @property
    def with_raw_response(self) -> _Completions:
        """The same log around the SDK's raw-response call (headers and the parsed reply)."""
        return _Completions(
            self._inner.with_raw_response, self._log, self._role, self._on_call,
            parse=lambda raw: raw.parse(),
        )  # fmt: skip

    async def create(self, **params: Any) -> Any:
        started = time.perf_counter()
        request = {k: v for k, v in params.items() if k != "extra_body"}
        try:
            reply = await self._inner.create(**params)
        except Exception as exc:
            self._log.write(
                role=self._role,
                model=params.get("model"),
                request=request,
                latency_s=time.perf_counter() - started,
                outcome="error",
                detail=f"{type(exc).__name__}: {exc}"[:500],
            )
            raise
        finally:
            if self._on_call is not None:
                self._on_call()
        self._log.write(
            role=self._role,
            model=params.get("model"),
            request=request,
            latency_s=time.perf_counter() - started,
            outcome="ok",
            response=_reply_text(self._parse(reply) if self._parse else reply),
        )
        return reply


class _Chat:
    def __init__(self, completions: _Completions) -> None:
        self.completions = completions


class LoggingClient:
    """Wraps an ``openai.AsyncOpenAI`` so every ``chat.completions.create`` is logged.

    ``on_call`` runs after each call (progress bars count calls with it).
    """

    def __init__(
        self,
        client: Any,
        log: CallLog,
        role: str,
        on_call: Callable[[], None] | None = None,
    ) -> None:
        self._client = client
        self.chat = _Chat(_Completions(client.chat.completions, log, role, on_call))

    async def close(self) -> None:
        await self._client.close()
