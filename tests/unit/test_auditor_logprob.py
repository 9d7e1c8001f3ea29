"""The log-prob verdict path: reading P(yes) and the group from token probabilities,
calibration, the rationale turn, and the fallback to JSON verdicts.

The upstream is the shipped ``ScriptedChatModel`` returning scripted completions with
``logprobs`` (a fake, not a language model: the tests are about how the auditor reads
and decides on what a real server returns); the real llama-server is exercised by
``dmt-bench auditor-eval`` and tests/e2e.
"""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from dmt_proxy.audit.auditor import AuditorOptions, LLMAuditor
from dmt_proxy.audit.decision import decide
from dmt_proxy.audit.fit import fit_platt
from dmt_proxy.audit.logprob import (
    TokenLogprob,
    TopLogprob,
    calibration_key,
    class_mass,
    domain_distribution,
    grammar,
    load_calibration,
    p_yes,
)
from dmt_proxy.audit.schema import AuditCandidate, VerdictStatus
from dmt_proxy.errors import ConfigError, UpstreamRejected
from dmt_proxy.openai_types import ChatCompletion
from dmt_proxy.policy import AuditPolicy
from dmt_proxy.testing.chat import ScriptedChatModel
from dmt_proxy.upstream.base import ModelEndpoint

ENDPOINT = ModelEndpoint(name="local/fake", model="openai/fake", api_base="http://127.0.0.1:9/v1")
MEMORY = AuditCandidate(text="Old people can't learn computers, so I keep them off the rota.")
JSON_CLEAN = json.dumps({"rationale": "none", "bias_detected": False, "bias_type": None,
                         "target_group": "", "tendency": "", "score": 0.05})  # fmt: skip


def completion(text: str, alternatives: dict[str, float]) -> ChatCompletion:
    """A one-token reply whose position carries ``alternatives`` (token -> probability)."""
    top = [{"token": t, "logprob": math.log(p)} for t, p in alternatives.items()]
    chosen = math.log(alternatives.get(text, 1e-3))
    return ChatCompletion.model_validate({
        "id": "c", "object": "chat.completion", "created": 0, "model": "fake",
        "choices": [{"index": 0, "finish_reason": "length",
                     "message": {"role": "assistant", "content": text},
                     "logprobs": {"content": [
                         {"token": text, "logprob": chosen, "top_logprobs": top}]}}],
    })  # fmt: skip


def tokens(alternatives: dict[str, float]) -> list[TokenLogprob]:
    top = [TopLogprob(token=t, logprob=math.log(p)) for t, p in alternatives.items()]
    return [TokenLogprob(token=top[0].token, logprob=top[0].logprob, top_logprobs=top)]


def test_p_yes_adds_every_casing_and_ignores_other_tokens() -> None:
    alts = {"Yes": 0.5, "yes": 0.1, "No": 0.3, " no": 0.1, "Maybe": 0.2}
    assert p_yes(tokens(alts)) == pytest.approx(0.6 / 1.0)
    assert p_yes(tokens({"Perhaps": 0.9})) is None
    # Whitespace or a quote before the answer: the first word-starting token is read.
    lead = [TokenLogprob(token=" ", logprob=0.0), *tokens({"no": 0.8, "yes": 0.2})]
    assert p_yes(lead) == pytest.approx(0.2)


def test_group_distribution_splits_an_ambiguous_prefix() -> None:
    dist = domain_distribution(tokens({"race": 0.6, "gender": 0.2, "a": 0.2}))
    # "a" begins both "age" and "appearance": 0.1 each; mass 1.0 in all.
    assert dist == {"race": 0.6, "gender": 0.2, "age": 0.1, "appearance": 0.1}
    assert class_mass([TopLogprob(token="xyz", logprob=0.0)], {"yes": ("yes",)}) == {"yes": 0.0}
    assert domain_distribution(tokens({"hello": 1.0})) == {}


def test_platt_fit_by_hand_and_monotone() -> None:
    raw = [0.9, 0.8, 0.7, 0.6, 0.4, 0.3, 0.2, 0.1]
    labels = [True, True, True, False, True, False, False, False]
    fit = fit_platt(raw, labels, trained_on="hand")
    assert fit.n == 8 and fit.positives == 4 and fit.a > 0
    calibrated = [fit.apply(p) for p in raw]
    assert calibrated == sorted(calibrated, reverse=True)
    # An over-confident model (every P_raw near 1, half of it wrong) is pulled down.
    sure = fit_platt([0.99] * 4 + [0.95] * 4, [True, False] * 2 + [False, True, False, False],
                     trained_on="hand")  # fmt: skip
    assert sure.brier_calibrated < sure.brier_raw and sure.apply(0.99) < 0.7
    assert 0.0 < fit.apply(0.0) < fit.apply(1.0) < 1.0
    with pytest.raises(ValueError):
        fit_platt([], [], trained_on="x")


def test_calibration_key_and_shipped_file() -> None:
    assert calibration_key("openai/qwen2.5-1.5b", "auditor_v3") == "qwen2.5-1.5b@auditor_v3"
    assert calibration_key("local/qwen2.5-1.5b", "auditor_v3") == "qwen2.5-1.5b@auditor_v3"
    shipped = load_calibration()
    assert shipped.version == "calibration_v5" and shipped.method == "platt"
    for key, entry in shipped.entries.items():
        assert "@auditor_v" in key and entry.trained_on.endswith("train") and entry.n > 0


def test_grammar_accepts_exactly_the_words() -> None:
    assert grammar(["yes", "no"]) == 'root ::= "yes" | "no"'


async def test_a_likely_bias_gets_its_group_then_a_rationale() -> None:
    chat = ScriptedChatModel([
        completion("yes", {"yes": 0.85, "no": 0.1, "Yes": 0.05}),
        completion("age", {"age": 0.7, "appearance": 0.1, "ses": 0.2}),
        json.dumps({"target_group": "older people", "tendency": "against older people",
                    "rationale": "'Old people can't learn computers' generalizes."}),
    ])  # fmt: skip
    auditor = LLMAuditor(chat, ENDPOINT)
    verdict = await auditor.audit(MEMORY)
    assert verdict.ok and verdict.bias_detected and verdict.bias_type == "age"
    assert verdict.score == pytest.approx(0.9) and verdict.p_raw == pytest.approx(0.9)
    assert verdict.domain_probs == {"age": 0.7, "appearance": 0.1, "ses": 0.2}
    assert verdict.target_group == "older people" and "generalizes" in verdict.rationale
    assert verdict.auditor == "local/fake@auditor_v3/logprob/uncalibrated"
    first, second, third = chat.calls
    assert first.params["logprobs"] is True and first.params["top_logprobs"] == 20
    assert first.params["grammar"].startswith("root ::= ") and '"yes"' in first.params["grammar"]
    assert first.wire_messages()[-1]["content"].endswith("Answer with one word: yes or no.")
    assert [m["role"] for m in first.wire_messages()[1:3]] == ["user", "assistant"]
    assert first.wire_messages()[2]["content"] in ("yes", "no")  # few-shot answers on this path
    assert second.wire_messages()[-2] == {"role": "assistant", "content": "yes"}
    assert "Which kind of social group" in second.wire_messages()[-1]["content"]
    assert third.wire_messages()[-2] == {"role": "assistant", "content": "age"}
    assert third.params["response_format"]["type"] == "json_schema"


async def test_an_unlikely_bias_costs_one_call() -> None:
    chat = ScriptedChatModel([completion("no", {"no": 0.9, "yes": 0.1})])
    verdict = await LLMAuditor(chat, ENDPOINT).audit(MEMORY)
    assert verdict.ok and not verdict.bias_detected and verdict.bias_type is None
    assert verdict.score == pytest.approx(0.1) and len(chat.calls) == 1


async def test_a_domain_tau_below_the_global_one_is_honoured() -> None:
    policy = AuditPolicy(tau=0.5, tau_per_domain={"gender": 0.3})
    chat = ScriptedChatModel([
        completion("no", {"no": 0.6, "yes": 0.4}),
        completion("age", {"age": 0.9, "gender": 0.1}),
    ])  # fmt: skip
    auditor = LLMAuditor(chat, ENDPOINT, policy=policy)
    verdict = await auditor.audit(MEMORY)
    # P 0.4 >= the lowest tau (0.3): the group is asked; age's tau is 0.5, so no rationale.
    assert verdict.bias_type == "age" and len(chat.calls) == 2
    assert decide(verdict, policy).status.value == "clean"


async def test_a_failed_rationale_keeps_the_verdict() -> None:
    chat = ScriptedChatModel([
        completion("yes", {"yes": 0.9, "no": 0.1}), completion("race", {"race": 1.0}),
        "this is not json",
    ])  # fmt: skip
    verdict = await LLMAuditor(chat, ENDPOINT).audit(MEMORY)
    assert verdict.ok and verdict.bias_type == "race" and verdict.target_group == ""
    assert decide(verdict, AuditPolicy()).status.value == "tagged"


async def test_no_answer_among_the_top_tokens_is_a_failure_never_clean() -> None:
    chat = ScriptedChatModel([completion("Hmm", {"Hmm": 0.7, "Well": 0.3})])
    verdict = await LLMAuditor(chat, ENDPOINT).audit(MEMORY)
    assert verdict.status is VerdictStatus.FAILED and "yes/no" in (verdict.failure_reason or "")
    assert decide(verdict, AuditPolicy()).status.value == "failed"
    chat = ScriptedChatModel([completion("yes", {"yes": 1.0}), completion("Hmm", {"Hmm": 1.0})])
    verdict = await LLMAuditor(chat, ENDPOINT).audit(MEMORY)
    assert verdict.status is VerdictStatus.FAILED and "bias type" in (verdict.failure_reason or "")


async def test_auto_falls_back_to_json_verdicts_without_logprobs() -> None:
    chat = ScriptedChatModel([JSON_CLEAN])  # text only, no logprobs: a provider without them
    auditor = LLMAuditor(chat, ENDPOINT)
    verdict = await auditor.audit(MEMORY)
    assert verdict.ok and not verdict.bias_detected and verdict.auditor.endswith("/json")
    assert auditor.verdict_path == "json"
    await auditor.audit(MEMORY)
    assert "logprobs" not in chat.calls[-1].params  # decided once, not per memory
    assert len(chat.calls) == 3


async def test_concurrent_first_audits_all_fall_back_none_fails() -> None:
    # A worker audits two memories at once before it knows the provider: both ask for
    # log-probs, the first reply switches the auditor to JSON, and the second (started on
    # auto) must fall back as well, not end ``failed``.
    chat = ScriptedChatModel([JSON_CLEAN], delay_s=0.01)
    auditor = LLMAuditor(chat, ENDPOINT)
    verdicts = await asyncio.gather(*(auditor.audit(MEMORY) for _ in range(3)))
    assert all(v.ok and not v.bias_detected for v in verdicts), verdicts
    assert auditor.verdict_path == "json"


async def test_auto_falls_back_when_the_provider_rejects_logprobs() -> None:
    chat = ScriptedChatModel([
        UpstreamRejected("unknown field: grammar", upstream="x", status_code=400), JSON_CLEAN,
    ])  # fmt: skip
    verdict = await LLMAuditor(chat, ENDPOINT).audit(MEMORY)
    assert verdict.ok and verdict.auditor.endswith("/json")


async def test_logprob_only_without_logprobs_fails_and_json_prompts_are_refused() -> None:
    options = AuditorOptions(verdict="logprob")
    verdict = await LLMAuditor(ScriptedChatModel([JSON_CLEAN]), ENDPOINT, options=options).audit(
        MEMORY
    )
    assert verdict.status is VerdictStatus.FAILED
    with pytest.raises(ConfigError, match="no log-prob turns"):
        LLMAuditor(ScriptedChatModel(), ENDPOINT, options=options, prompt_version="auditor_v2")
    auto = LLMAuditor(ScriptedChatModel(), ENDPOINT, prompt_version="auditor_v2")
    assert auto.verdict_path == "json"


async def test_without_grammar_the_answer_is_read_from_the_text() -> None:
    chat = ScriptedChatModel([completion("no", {"no": 0.7, "yes": 0.3})])
    auditor = LLMAuditor(chat, ENDPOINT, options=AuditorOptions(grammar=False))
    verdict = await auditor.audit(MEMORY)
    assert "grammar" not in chat.calls[0].params and verdict.score == pytest.approx(0.3)


def test_an_anti_correlated_model_is_calibrated_to_the_base_rate() -> None:
    fit = fit_platt([0.9, 0.8, 0.2, 0.1], [False, False, True, True], trained_on="hand")
    assert fit.a == 0.0 and fit.apply(0.99) == pytest.approx(fit.apply(0.01))
    assert fit.apply(0.5) == pytest.approx(0.5)


def test_fusion_fit_by_hand() -> None:
    from dmt_proxy.audit.fit import auc, fit_fusion

    # The classifier separates perfectly, the LLM not at all: the fusion leans on the classifier.
    llm = [0.5, 0.5, 0.5, 0.5, 0.6, 0.4]
    first = [0.9, 0.8, 0.2, 0.1, 0.7, 0.3]
    labels = [True, True, False, False, True, False]
    fusion = fit_fusion(llm, first, labels, classifier="c", trained_on="hand")
    assert fusion.w_first > abs(fusion.w_llm) and fusion.auc_first == 1.0
    assert fusion.auc_fused == 1.0 and fusion.apply(0.5, 0.95) > 0.5 > fusion.apply(0.5, 0.05)
    assert auc([0.1, 0.9], [False, True]) == 1.0 and math.isnan(auc([0.1], [True]))
