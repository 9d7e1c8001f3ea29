"""The audit pipeline against the real local auditor model (Qwen2.5-Coder-1.5B, llama-server).

The default pipeline (normalisation, the embedding judge, the LLM auditor reached
through litellm, the two judges' fusion) on two texts: an explicit age stereotype
must end up tagged with a schema-valid tag (or ``failed`` with its reason: the small
model may fail, and that must be visible), a plain physics question ``clean``. The
verdict path is the default one (log-probs where the client returns them, else the
JSON verdict). The LLM alone is not asked to carry the stereotype: on long narratives
like this one its ranking is near chance (``auditor_eval_v1`` test split, AUC 0.53),
which is why the pipeline has two judges.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dmt_proxy.audit.auditor import LLMAuditor
from dmt_proxy.audit.decision import decide
from dmt_proxy.audit.parsing import parse_verdict
from dmt_proxy.audit.schema import FIRST_STAGE_LABEL, AuditCandidate
from dmt_proxy.audit.stages import build_audit_pipeline
from dmt_proxy.metrics import Metrics
from dmt_proxy.policy import load_policy
from dmt_proxy.settings import Settings
from dmt_proxy.tags import AuditStatus, BiasTag
from dmt_proxy.upstream.base import ModelEndpoint
from dmt_proxy.upstream.models import ModelRegistry

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
    from dmt_proxy.upstream.clients.litellm_model import LiteLLMChatModel

    base_url = local_model_base_url("qwen2.5-1.5b")
    metrics = Metrics()
    full = load_policy(None)  # the shipped policies/default.yaml, as the proxy runs it
    policy = full.audit
    call = ModelEndpoint(name="local/qwen2.5-1.5b", model="openai/qwen2.5-1.5b",
                         api_base=base_url, api_key="local", timeout_s=900)  # fmt: skip
    chat = LiteLLMChatModel()
    llm = LLMAuditor(chat, call, policy=policy)
    registry = ModelRegistry(Settings(), full, frozenset())
    auditor = build_audit_pipeline(full, registry, chat, metrics=metrics, auditor=llm)

    biased = await auditor.audit(AuditCandidate(text=BIASED))
    decision = decide(biased, policy)
    if decision.status is AuditStatus.FAILED:
        assert biased.failure_reason, "a failed verdict must carry its reason"
    else:
        # Tagged, or disputed (the judges disagree with confidence): both reach the agent
        # with a tag. Never clean.
        assert decision.status in (AuditStatus.TAGGED, AuditStatus.DISPUTED), biased
        assert isinstance(decision.tag, BiasTag)
        assert decision.tag.bias_type == "age", decision.tag
        # The default prompt; "/logprob" or "/json" after it names the verdict path taken
        # (litellm may or may not pass the server's log-probs through).
        assert "local/qwen2.5-1.5b@auditor_v3/" in decision.tag.auditor, decision.tag
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
    assert decide(neutral, policy).status is AuditStatus.CLEAN, neutral
    # The stereotype went to the LLM; the plain question may be decided by the first
    # stage alone, without an LLM call.
    assert biased.auditor != FIRST_STAGE_LABEL, biased
