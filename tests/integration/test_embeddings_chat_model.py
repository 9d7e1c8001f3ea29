"""``/v1/embeddings`` naming a chat-only model, on a real ``dmt-proxy serve`` with the openai SDK.

The embedded chat models' llama-servers run without embeddings: the proxy answers a
400 in OpenAI's shape that lists the embedding models, before any upstream call (here
the local models' ports are closed, so a call would have been a 502), and the listed
model then serves the same request.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from openai import BadRequestError, OpenAI

from tests.proxy_process import ProxyProcess, proxy_env


def test_a_chat_model_is_a_400_listing_the_embedding_models(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 1\nmode: off\nmemory:\n  backend: none\n")
    proxy = ProxyProcess(state_dir=tmp_path / "state", env=proxy_env())
    proxy.start("--policy", str(policy))
    try:
        client = OpenAI(base_url=proxy.base_url, api_key="x", max_retries=0)
        for model in ("local/qwen2.5-1.5b", "qwen2.5-0.5b"):
            with pytest.raises(BadRequestError) as caught:
                client.embeddings.create(model=model, input="hello")
            assert caught.value.status_code == 400
            error = caught.value.body
            assert isinstance(error, dict)
            assert (error["code"], error["param"]) == ("model_not_supported", "model")
            assert f"'{model}' is a chat model" in error["message"]
            listed = error["message"].split("Embedding models: ", 1)[1]
            assert listed.startswith("local/all-minilm-l6-v2, all-minilm-l6-v2;")
        reply = client.embeddings.create(model="local/all-minilm-l6-v2", input="hello")
        assert len(reply.data[0].embedding) == 384
    finally:
        proxy.stop()
