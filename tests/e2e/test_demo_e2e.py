"""``dmt-proxy demo`` as a newcomer runs it: the real agent and auditor, a real proxy process.

The demo starts the model servers itself; this test only makes sure the model
files are there, then reads what the demo prints.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dmt_proxy.settings import Settings
from dmt_proxy.upstream import local_models

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_demo_shows_the_biased_remark_tagged_and_the_tag_in_the_next_prompt(
    model_settings: Settings, tmp_path: Path
) -> None:
    for name in ("qwen2.5-0.5b", "qwen2.5-1.5b"):
        model = local_models.get_model(name)
        if not local_models.is_pulled(model_settings.cache_dir, model):
            local_models.pull(model_settings.cache_dir, model)
    # The demo's fresh state directory is a temporary one: keep it under this test's.
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "dmt_proxy.cli.proxy_cli", "demo", "--audit-timeout", "300"],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "neutral remark -> clean" in out, out
    assert "biased remark -> tagged: age" in out, out
    after = out.split("the memory block the model saw in mode dmt", 1)[1]
    block = after.split("agent, mode dmt", 1)[0]
    assert '"bias_tag"' in block and '"bias_type": "age"' in block, out
    assert "agent, mode off" in out, out
    last = out.strip().splitlines()[-1]
    assert last.startswith("1 of 2 memories tagged (age, score"), out
    assert "the tag travelled with the memory into the next request" in last, out
    # A clean run removes its state directory.
    assert not list(tmp_path.glob("dmt-demo-*")), out
