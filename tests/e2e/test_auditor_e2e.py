"""The audit pipeline against the real local auditor model (Qwen2.5-Coder-1.5B, llama-server).

The default pipeline (normalisation, judge v2 over the packaged multilingual encoder, the
LLM auditor reached through litellm for the judge's uncertain band, the two judges'
fusion) on two texts: an explicit age stereotype must end up tagged with a schema-valid
tag (or ``failed`` with its reason: the small model may fail, and that must be visible),
a plain physics question ``clean``. The LLM auditor itself, reached through litellm on
the default verdict path (log-probs where the client returns them, else the JSON
verdict), must answer a short stereotype with a schema-valid verdict of the same shape.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dmt_proxy.audit.auditor import LLMAuditor
from dmt_proxy.audit.decision import decide
from dmt_proxy.audit.parsing import parse_verdict
from dmt_proxy.audit.schema import TRAINED_JUDGE_LABEL, AuditCandidate, AuditVerdict
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
        # Judge v2 alone when it is confident, else the default prompt ("/logprob" or
        # "/json" after it names the verdict path taken).
        assert decision.tag.auditor == TRAINED_JUDGE_LABEL or (
            "local/qwen2.5-1.5b@auditor_v3/" in decision.tag.auditor
        ), decision.tag
        _round_trips(biased)

    neutral = await auditor.audit(AuditCandidate(text=NEUTRAL))
    assert decide(neutral, policy).status is AuditStatus.CLEAN, neutral

    # The LLM auditor through litellm, on the verdict path the policy names.
    said = await llm.audit(AuditCandidate(text=SHORT))
    if said.ok:
        assert "local/qwen2.5-1.5b@auditor_v3/" in said.auditor, said
        _round_trips(said)
    else:
        assert said.failure_reason, "a failed verdict must carry its reason"


SHORT = "Honestly, older workers just can't learn new technology."


def _round_trips(verdict: AuditVerdict) -> None:
    # The tag's source verdict is schema-valid by construction; re-check the round trip.
    fields = {"rationale", "bias_detected", "bias_type", "target_group", "tendency", "score"}
    parse_verdict(verdict.model_dump_json(include=fields))
