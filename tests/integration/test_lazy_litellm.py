"""litellm is imported only when a route needs it (it costs ~3.6 s and ~135 MB RSS).

Each case runs in a fresh interpreter, so ``sys.modules`` shows what the proxy
really imported. The app is the real one with the real litellm-backed upstream;
memory is off (``backend: none``) so no store is opened.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from fastapi.testclient import TestClient
    from dmt_proxy.api.app import create_app
    from dmt_proxy.policy import Policy
    from dmt_proxy.settings import Settings

    policy = Policy.model_validate(json.loads(sys.argv[1]))
    app = create_app(Settings(state_dir=sys.argv[2]), policy=policy)
    out = {}
    with TestClient(app) as client:
        out["at_start"] = "litellm" in sys.modules
        for model in sys.argv[3:]:
            r = client.post("/v1/chat/completions", json={
                "model": model, "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 1}, headers={"x-dmt-memory": "off"})
            out[model] = [r.status_code, r.json()["error"].get("code") if r.status_code >= 400 else None,
                          "litellm" in sys.modules]
    print(json.dumps(out))
    """
)


def run(policy: dict[str, object], tmp_path: Path, *models: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(policy), str(tmp_path), *models],
        capture_output=True, text=True, timeout=180,
        env={"PATH": "/usr/bin:/bin", "DMT_UPSTREAM_TIMEOUT_S": "2", "DMT_UPSTREAM_MAX_RETRIES": "0",
             "ANTHROPIC_API_KEY": "sk-test-not-a-key", "HOME": str(tmp_path)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


LOCAL_ONLY = {"version": 1, "mode": "off", "memory": {"backend": "none"}}


def test_local_routes_never_import_litellm(tmp_path: Path) -> None:
    out = run(LOCAL_ONLY, tmp_path, "nosuchprovider/model", "no-slash-model")
    assert out["at_start"] is False
    # Names litellm cannot route are still 404s; answering that needed litellm's list.
    assert out["nosuchprovider/model"][:2] == [404, "model_not_found"]
    assert out["no-slash-model"][:2] == [404, "model_not_found"]


def test_a_provider_name_loads_litellm_on_first_use(tmp_path: Path) -> None:
    out = run(LOCAL_ONLY, tmp_path, "anthropic/claude-3-haiku-20240307")
    assert out["at_start"] is False
    status, code, loaded = out["anthropic/claude-3-haiku-20240307"]
    assert loaded is True and status != 404  # routed to litellm (no network here: an error)
    assert 400 <= status < 600 and code != "model_not_found"


def test_a_configured_litellm_route_loads_it_at_start(tmp_path: Path) -> None:
    policy = {**LOCAL_ONLY, "default_model": "claude",
              "models": {"claude": {"model": "anthropic/claude-3-haiku-20240307"}}}  # fmt: skip
    assert run(policy, tmp_path)["at_start"] is True
