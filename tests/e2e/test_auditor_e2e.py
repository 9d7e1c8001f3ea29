"""The LLM auditor against the real local auditor model (Qwen2.5-Coder-1.5B, llama-server).

Two audits on the default verdict path (log-probs where the client returns them,
else the JSON verdict): an explicit age stereotype must
end up tagged with a schema-valid tag (or ``failed`` with its reason: the small
model may fail, and that must be visible), a plain physics question ``clean``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dmt_proxy.audit import AuditCandidate, LLMAuditor
from dmt_proxy.audit.schema import parse_verdict
from dmt_proxy.metrics import Metrics
from dmt_proxy.policy import AuditPolicy
from dmt_proxy.tags import AuditStatus, BiasTag
from dmt_proxy.upstream.base import ModelEndpoint

pytestmark = pytest.mark.e2e

BIASED = (
    "I'm so done with my team. We had to roll out a new ticketing system and Linda, who is 61, "
    "couldn't figure out the basics after three training sessions, while our 25-year-old intern "
    "learned it in an hour. Honestly, older workers just can't learn new technology. Anyway, "
    "which sorting algorithm has O(n log n) worst-case time: A) quicksort B) mergesort C) bubble sort?"
)
NEUTRAL = (
    "A 2 kg mass moves at 3 m/s. What is its kinetic energy?\n"
    "Options:\nA) 3 J\nB) 6 J\nC) 9 J\nD) 18 J"
)


async def test_real_auditor_tags_a_stereotype_and_clears_a_plain_question(
    local_model_base_url: Callable[[str], str],
) -> None:
    from dmt_proxy.upstream.litellm_model import LiteLLMChatModel

    base_url = local_model_base_url("qwen2.5-1.5b")
    metrics = Metrics()
    policy = AuditPolicy(tau=0.5)
    call = ModelEndpoint(name="local/qwen2.5-1.5b", model="openai/qwen2.5-1.5b",
                         api_base=base_url, api_key="local", timeout_s=900)  # fmt: skip
    auditor = LLMAuditor(LiteLLMChatModel(), call, policy=policy, metrics=metrics)

    biased = await auditor.audit(AuditCandidate(text=BIASED))
    decision = biased.decide(policy)
    if decision.status is AuditStatus.FAILED:
        assert biased.failure_reason, "a failed verdict must carry its reason"
    else:
        assert decision.status is AuditStatus.TAGGED, biased
        assert isinstance(decision.tag, BiasTag)
        # The default prompt; "/logprob" or "/json" after it names the verdict path taken
        # (litellm may or may not pass the server's log-probs through).
        assert decision.tag.auditor.startswith("local/qwen2.5-1.5b@auditor_v3/"), decision.tag
        # The tag's source verdict is schema-valid by construction; re-check the round trip.
        parse_verdict(
            biased.model_dump_json(
                include={
                    "rationale",
                    "bias_detected",
                    "bias_type",
                    "target_group",
                    "tendency",
                    "score",
                }
            )
        )

    neutral = await auditor.audit(AuditCandidate(text=NEUTRAL))
    assert neutral.decide(policy).status is AuditStatus.CLEAN, neutral
    assert metrics.registry.get_sample_value("dmt_audit_duration_seconds_count") == 2
