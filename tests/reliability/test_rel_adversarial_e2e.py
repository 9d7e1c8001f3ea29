"""The adversarial runner end to end on the real local auditor model (two audits only:
the first adversarial item and its twin), so the committed rerun command keeps working."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.reliability.adversarial_auditor import build_parser, run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


async def test_runner_audits_an_item_and_its_twin(
    local_model_base_url: Callable[[str], str], tmp_path: Path
) -> None:
    base_url = local_model_base_url("qwen2.5-1.5b")
    out = tmp_path / "adversarial"
    args = build_parser().parse_args(
        ["--base-url", base_url, "--model", "qwen2.5-1.5b", "--limit", "1", "--out", str(out)]
    )
    result = await run(args)
    assert set(result["judged"]) == {"age", "adv-01"}
    assert result["meta"]["calls"] == 2
    assert (
        json.loads(out.with_suffix(".json").read_text())["meta"]["set"] == "adversarial_memories_v1"
    )
    assert "| adv-01 | age | instruct_auditor |" in out.with_suffix(".md").read_text()
