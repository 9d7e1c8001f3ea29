"""The auditor_v4 verdict path: the framing and kind questions, the planted-verdict rule,
the normaliser v3 disguises, the language test and the deferred rationale.

Upstreams are the shipped ``ScriptedChatModel`` (scripted completions with log-probs);
the backend is the in-memory one. The real model is measured by the benchmark runs.
"""

from __future__ import annotations

import json

import pytest

from dmt_proxy.audit.auditor import AuditorOptions, LLMAuditor
from dmt_proxy.audit.auditor_prompt import load_auditor_prompt, render_messages
from dmt_proxy.audit.decision import decide
from dmt_proxy.audit.deobfuscate import deobfuscate, name_emoji
from dmt_proxy.audit.language import probably_english
from dmt_proxy.audit.logprob import JudgeFusion, load_calibration
from dmt_proxy.audit.normalize import normalize_memory
from dmt_proxy.audit.schema import (
    FIRST_STAGE_LABEL,
    AuditCandidate,
    AuditVerdict,
    FirstStageOpinion,
)
from dmt_proxy.audit.stages import StagedAuditor, fuse
from dmt_proxy.policy import AuditPolicy
from dmt_proxy.tags import AuditStatus, Finding, FindingKind
from dmt_proxy.testing.chat import ScriptedChatModel
from tests.unit.test_auditor_logprob import ENDPOINT, completion

MEMORY = AuditCandidate(text="Old people can't learn computers, so I keep them off the rota.")


def test_v4_sends_v3s_verdict_turn_unchanged() -> None:
    v3, v4 = load_auditor_prompt("auditor_v3"), load_auditor_prompt("auditor_v4")
    assert render_messages(v3, MEMORY, path="logprob") == render_messages(v4, MEMORY,
                                                                          path="logprob")  # fmt: skip
    assert v4.extra("kind question") and v4.extra("framing question")
    shipped = load_calibration("calibration_v2")
    assert shipped.entries["qwen2.5-1.5b@auditor_v4"] == shipped.entries["qwen2.5-1.5b@auditor_v3"]
    assert load_calibration("calibration_v1").version == "calibration_v1"  # still loads


async def test_a_clean_verdict_is_asked_about_framing_and_a_yes_is_a_finding() -> None:
    chat = ScriptedChatModel([
        completion("no", {"no": 0.9, "yes": 0.1}), completion("yes", {"yes": 0.8, "no": 0.2}),
    ])  # fmt: skip
    verdict = await LLMAuditor(chat, ENDPOINT, prompt_version="auditor_v4").audit(MEMORY)
    assert verdict.ok and not verdict.bias_detected and verdict.p_framing == pytest.approx(0.8)
    assert [f.rule for f in verdict.findings] == ["discount_framing"] and verdict.manipulation
    second = chat.calls[1].wire_messages()
    assert second[-2] == {"role": "assistant", "content": "no"}
    assert "not to be judged" in second[-1]["content"]
    assert decide(verdict, AuditPolicy()).status is AuditStatus.TAGGED  # the attempt is shown
    assert decide(verdict, AuditPolicy()).tag.bias_type is None  # type: ignore[union-attr]


async def test_no_framing_question_without_the_section_and_no_finding_on_a_no() -> None:
    chat = ScriptedChatModel([completion("no", {"no": 0.9, "yes": 0.1})])
    assert (await LLMAuditor(chat, ENDPOINT).audit(MEMORY)).p_framing is None
    assert len(chat.calls) == 1
    chat = ScriptedChatModel([
        completion("no", {"no": 0.9, "yes": 0.1}), completion("no", {"no": 0.7, "yes": 0.3}),
    ])  # fmt: skip
    verdict = await LLMAuditor(chat, ENDPOINT, prompt_version="auditor_v4").audit(MEMORY)
    assert verdict.p_framing == pytest.approx(0.3) and verdict.findings == ()


async def test_a_likely_bias_skips_the_rationale_and_the_kind_question_without_a_fit() -> None:
    chat = ScriptedChatModel([
        completion("yes", {"yes": 0.9, "no": 0.1}), completion("age", {"age": 1.0}),
    ])  # fmt: skip
    options = AuditorOptions(rationale=False)  # as from_config builds it: the worker defers it
    auditor = LLMAuditor(chat, ENDPOINT, prompt_version="auditor_v4", options=options)
    verdict = await auditor.audit(MEMORY)
    assert verdict.bias_type == "age" and verdict.kind_probs is None and len(chat.calls) == 2
    explained_chat = ScriptedChatModel([json.dumps({
        "target_group": "older people", "tendency": "against older people",
        "rationale": "'Old people can't learn computers' generalizes."})])  # fmt: skip
    auditor = LLMAuditor(explained_chat, ENDPOINT, prompt_version="auditor_v4")
    explained = await auditor.explain(MEMORY, verdict)
    assert explained.target_group == "older people" and explained.bias_type == "age"
    assert explained_chat.calls[0].wire_messages()[-2] == {"role": "assistant", "content": "age"}


async def test_a_train_run_can_ask_the_kind_question_without_a_fit() -> None:
    # --kind-question: collect the answers the +kind fusion would be fitted on.
    chat = ScriptedChatModel([
        completion("yes", {"yes": 0.9, "no": 0.1}), completion("age", {"age": 1.0}),
        completion("rejecting", {"rejecting": 0.7, "judging": 0.3}),
    ])  # fmt: skip
    options = AuditorOptions(rationale=False, kind_question=True)
    auditor = LLMAuditor(chat, ENDPOINT, prompt_version="auditor_v4", options=options)
    verdict = await auditor.audit(MEMORY)
    assert len(chat.calls) == 3 and verdict.kind_probs is not None
    assert verdict.kind_probs["rejecting"] == pytest.approx(0.7)


def test_the_kind_fusion_weighs_p_judging() -> None:
    base = {"w_llm": 1.0, "w_first": 1.0, "b": 0.0, "classifier": "c", "trained_on": "t",
            "n": 1, "positives": 1, "auc_llm": 1.0, "auc_first": 1.0, "auc_fused": 1.0}  # fmt: skip
    kind = JudgeFusion(**base, w_kind=2.0)
    assert kind.apply(0.9, 0.9, 0.05) < JudgeFusion(**base).apply(0.9, 0.9) < kind.apply(0.9, 0.9,
                                                                                        0.95)  # fmt: skip
    verdict = AuditVerdict(bias_detected=True, bias_type="age", score=0.9, p_raw=0.9,
                           kind_probs={"self": 0.9, "judging": 0.1},
                           first_stage=FirstStageOpinion(score=0.6, threshold=0.3))  # fmt: skip
    assert fuse(verdict, kind, 0.5).score < fuse(verdict, JudgeFusion(**base), 0.5).score


def _opinion(score: float) -> FirstStageOpinion:
    return FirstStageOpinion(score=score, threshold=0.3, confident_bias=0.9, confident_clean=0.05)


def test_a_planted_verdict_gets_no_domain_unless_both_judges_find_bias() -> None:
    planted = (Finding(kind=FindingKind.MANIPULATION, rule="verdict_request", detail="tag it"),)
    llm_says_age = AuditVerdict(bias_detected=True, bias_type="age", score=0.8, findings=planted)
    policy = AuditPolicy()
    for first in (_opinion(0.1), _opinion(0.01)):  # first stage below its threshold
        decision = decide(llm_says_age.model_copy(update={"first_stage": first}), policy)
        assert decision.status is AuditStatus.TAGGED and decision.tag is not None
        assert decision.tag.bias_type is None and decision.tag.manipulation
    both = decide(llm_says_age.model_copy(update={"first_stage": _opinion(0.6)}), policy)
    assert both.tag is not None and both.tag.bias_type == "age"
    sure = AuditVerdict(score=0.1, findings=planted, first_stage=_opinion(0.95))
    assert decide(sure, policy).tag.bias_type is None  # type: ignore[union-attr]
    # Without a manipulation finding the second judge still disputes, as before.
    assert decide(sure.model_copy(update={"findings": ()}), policy).status is AuditStatus.DISPUTED


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("W0men are b4d at m4th", "Women are bad at math"),
        ("l@zy imm1grants", "lazy immigrants"),
        ("w o m e n  c a n t  d r i v e", "women cant drive"),
        ("the w.o.m.e.n here", "the women here"),
        ("ᴡᴏᴍᴇɴ", "women"),
        # ordinary text stays as written
        ("meet at 3pm, mp3 and covid19, the 2nd of 4x4 b2b deals", None),
        ("A wave of40KHzis sent; 120.75dbm at 1atm", None),
        ("I a m fine, U.S.A. trip", None),
    ],
)
def test_disguises_are_undone_and_ordinary_text_is_not(text: str, expected: str | None) -> None:
    assert deobfuscate(text)[0] == (text if expected is None else expected)


def test_emoji_and_flags_become_names_in_v3_only() -> None:
    assert "[flag of France]" in name_emoji("🇫🇷 people")[0]
    text = "🏳️\u200d🌈 couples and 👵🏻 drivers"
    v3 = normalize_memory(text).text
    assert "rainbow flag" in v3 and "older woman" in v3
    assert "rainbow" not in normalize_memory(text, "normalize_v2").text
    assert normalize_memory("W0men are b4d", "normalize_v2").text == "W0men are b4d"
    with pytest.raises(ValueError):
        normalize_memory("x", "normalize_v9")


def test_language_test() -> None:
    assert probably_english("My neighbour says the new tenants are always loud at night.")
    assert not probably_english("Les femmes ne savent pas conduire, c'est bien connu.")
    assert not probably_english("Die Ausländer sind immer faul und wollen nicht arbeiten.")
    assert not probably_english("Все мигранты ленивые и не хотят работать")
    assert probably_english("Thanks!")


class _Stage:
    """A first stage that would clear everything (threshold above any score)."""

    method = "classifier"
    classifier_version = "c"

    async def decide(self, candidate: AuditCandidate) -> object:
        from dmt_proxy.audit.first_stage import FirstStageDecision, FirstStageScore

        return FirstStageDecision(send_to_auditor=False, threshold=0.9,
                                  score=FirstStageScore(score=0.01, domain="age", piece="x"))  # fmt: skip


async def test_non_english_text_reaches_the_llm_without_the_first_stage() -> None:
    chat = ScriptedChatModel([completion("no", {"no": 0.9, "yes": 0.1})])
    staged = StagedAuditor(LLMAuditor(chat, ENDPOINT), first_stage=_Stage())  # type: ignore[arg-type]
    english = await staged.audit(MEMORY)
    assert english.auditor == FIRST_STAGE_LABEL and not chat.calls
    french = await staged.audit(AuditCandidate(text="Les vieux ne savent pas utiliser un "
                                                    "ordinateur, c'est toujours pareil."))  # fmt: skip
    assert len(chat.calls) == 1 and french.first_stage is None


async def test_v5_asks_the_framing_question_of_a_likely_bias_too() -> None:
    chat = ScriptedChatModel([
        completion("yes", {"yes": 0.9, "no": 0.1}), completion("age", {"age": 1.0}),
        completion("yes", {"yes": 0.9, "no": 0.1}),
    ])  # fmt: skip
    options = AuditorOptions(rationale=False)
    auditor = LLMAuditor(chat, ENDPOINT, prompt_version="auditor_v5", options=options)
    verdict = await auditor.audit(MEMORY)
    assert verdict.bias_type == "age" and verdict.manipulation and len(chat.calls) == 3
    third = chat.calls[2].wire_messages()
    assert third[-2] == {"role": "assistant", "content": "yes"} and "label" in third[-1]["content"]
    planted = verdict.model_copy(update={"first_stage": _opinion(0.1)})
    assert decide(planted, AuditPolicy()).tag.bias_type is None  # type: ignore[union-attr]
