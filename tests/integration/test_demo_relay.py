"""``dmt-proxy demo``'s relay (``PromptTap``) over loopback HTTP, in front of a stand-in
model server on a thread. The demo's pure parts are ``tests/unit/test_demo.py``; the
demo itself runs with the real models in ``tests/e2e/test_demo_e2e.py``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from dmt_proxy.cli.demo import PromptTap


class _Upstream(BaseHTTPRequestHandler):
    """A stand-in model server: echoes how many messages it got, or fails on request."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        status = 503 if body.get("model") == "broken" else 200
        reply = json.dumps({"path": self.path, "n": len(body.get("messages", []))}).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def upstream_root() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_the_relay_forwards_each_request_and_keeps_its_body(upstream_root: str) -> None:
    tap = PromptTap(upstream_root).start()
    try:
        with httpx.Client(base_url=tap.base_url, timeout=10) as client:
            ok = client.post("/chat/completions", json={"model": "m", "messages": [{}, {}]})
            failed = client.post("/chat/completions", json={"model": "broken"})
        assert ok.status_code == 200
        assert ok.json() == {"path": "/v1/chat/completions", "n": 2}
        assert failed.status_code == 503
        assert [b["model"] for b in tap.bodies()] == ["m", "broken"]
    finally:
        tap.stop()


def test_the_relay_answers_502_when_the_model_server_is_down() -> None:
    tap = PromptTap("http://127.0.0.1:9").start()
    try:
        resp = httpx.post(tap.base_url + "/chat/completions", json={"model": "m"}, timeout=10)
        assert resp.status_code == 502 and "relay" in resp.json()["error"]["message"]
    finally:
        tap.stop()
