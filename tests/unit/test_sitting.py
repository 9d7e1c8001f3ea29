"""What a report says about its run's sittings, and the run's nonce key (no git, no process;
reading the checkout: tests/integration/test_sitting.py)."""

from __future__ import annotations

import pytest

from dmt_bench.harness.sitting import Sitting, differences, nonce_key, sittings_section


def _sitting(commit: str, inputs: dict[str, str]) -> Sitting:
    return Sitting(started="2026-12-03T00:00:00+00:00", commit=commit, dirty=[],
                   python="3.11.7", packages={"dmt-proxy": "1"}, inputs=inputs)  # fmt: skip


def test_sittings_that_ran_other_code_or_inputs_are_named_in_the_report() -> None:
    a = _sitting("a" * 40, {"judge/judge_v2.json": "1"})
    b = _sitting("b" * 40, {"judge/judge_v2.json": "2"})
    assert differences([a]) == [] and differences([a, a]) == []
    notes = differences([a, b])
    assert any("commit" in n for n in notes)
    assert any("judge/judge_v2.json" in n for n in notes)
    section = "\n".join(sittings_section([a, b]))
    assert "sitting 2 ran commit" in section and "| 2 |" in section
    assert sittings_section([]) == []  # older runs' reports rebuild unchanged


@pytest.mark.parametrize("digest", ["a" * 64, "b" * 64])
def test_the_nonce_key_follows_the_config_alone(digest: str) -> None:
    key = nonce_key(digest)
    assert key == nonce_key(digest) and len(key) == 64
    assert key != nonce_key("c" * 64)
