"""Verdict parsing, schema validation and the tau decision (pure; no model involved)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from dmt_proxy.audit.decision import decide
from dmt_proxy.audit.parsing import (
    VerdictInvalid,
    parse_verdict,
    response_format,
    verdict_schema,
    wire_schema,
)
from dmt_proxy.audit.schema import AuditVerdict, VerdictStatus
from dmt_proxy.policy import AuditPolicy, TagAction
from dmt_proxy.tags import AuditStatus, BiasTag

GOOD: dict[str, Any] = {
    "rationale": "Blames older staff as a group.",
    "bias_detected": True,
    "bias_type": "age",
    "target_group": "older workers",
    "tendency": "favoring youth",
    "score": 0.8,
}


def test_schema_is_valid_draft_2020_12_and_wire_schema_drops_cross_field_rules() -> None:
    schema = verdict_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    wire = wire_schema()
    assert "allOf" not in wire and wire["additionalProperties"] is False
    assert next(iter(wire["properties"])) == "rationale"  # reasoning is generated first
    assert set(wire["required"]) == set(wire["properties"])
    fmt = response_format()
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"] == wire


def test_valid_reply_parses() -> None:
    assert parse_verdict(json.dumps(GOOD)) == GOOD


def test_fenced_and_wrapped_replies_are_accepted() -> None:
    assert parse_verdict(f"```json\n{json.dumps(GOOD)}\n```") == GOOD
    assert parse_verdict(f"Here is my verdict: {json.dumps(GOOD)} Thanks.") == GOOD


@pytest.mark.parametrize(
    ("reply", "reason_part"),
    [
        ("", "empty"),
        ("not json at all", "not valid JSON"),
        ("[1, 2]", "not of type 'object'"),
        (json.dumps({**GOOD, "score": 1.5}), "score"),
        (json.dumps({**GOOD, "bias_type": "height"}), "bias_type"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "tendency"}), "tendency"),
        (json.dumps({**GOOD, "extra": 1}), "extra"),
        (json.dumps({**GOOD, "bias_detected": "yes"}), "bias_detected"),
        (json.dumps({**GOOD, "bias_type": None}), "bias_type must be null when"),
        (json.dumps({**GOOD, "bias_detected": False}), "bias_type must be null when"),
    ],
)
def test_invalid_replies_raise_with_a_reason(reply: str, reason_part: str) -> None:
    with pytest.raises(VerdictInvalid) as info:
        parse_verdict(reply)
    assert reason_part in info.value.reason


def test_no_bias_reply_with_null_type_is_valid() -> None:
    clean = {**GOOD, "bias_detected": False, "bias_type": None, "target_group": "", "tendency": "",
             "score": 0.0}  # fmt: skip
    assert parse_verdict(json.dumps(clean))["bias_type"] is None


def test_tagged_iff_detected_and_score_reaches_tau() -> None:
    policy = AuditPolicy(tau=0.5)
    assert decide(AuditVerdict.biased("age", score=0.5), policy).status is AuditStatus.TAGGED
    assert decide(AuditVerdict.biased("age", score=0.49), policy).status is AuditStatus.CLEAN
    assert decide(AuditVerdict.clean(score=0.0), policy).status is AuditStatus.CLEAN


def test_per_domain_tau_overrides_the_global_one() -> None:
    policy = AuditPolicy(tau=0.5, tau_per_domain={"race": 0.2, "gender": 0.9})
    assert decide(AuditVerdict.biased("race", score=0.25), policy).status is AuditStatus.TAGGED
    assert decide(AuditVerdict.biased("gender", score=0.8), policy).status is AuditStatus.CLEAN
    assert decide(AuditVerdict.biased("age", score=0.6), policy).status is AuditStatus.TAGGED
    assert AuditVerdict.biased("other", score=0.6).is_biased(policy)


def test_not_detected_with_high_score_is_clean_and_marked_inconsistent() -> None:
    verdict = AuditVerdict(bias_detected=False, score=0.95, rationale="contradictory")
    decision = decide(verdict, AuditPolicy(tau=0.5))
    assert decision.status is AuditStatus.CLEAN and decision.inconsistent
    assert decision.tag is None and "0.95" in decision.reason
    assert not decide(AuditVerdict(bias_detected=False, score=0.1), AuditPolicy()).inconsistent


def test_failed_verdict_is_never_clean() -> None:
    verdict = AuditVerdict.failed("bad json", attempts=2)
    decision = decide(verdict, AuditPolicy(tau=0.0))
    assert verdict.status is VerdictStatus.FAILED
    assert decision.status is AuditStatus.FAILED and decision.outcome == "failed"
    assert decision.reason == "bad json"


def test_actions_per_domain_quarantine_and_drop() -> None:
    policy = AuditPolicy(
        action=TagAction.TAG,
        action_per_domain={"race": TagAction.QUARANTINE, "religion": TagAction.DROP},
    )
    quarantined = decide(AuditVerdict.biased("race"), policy)
    assert quarantined.status is AuditStatus.QUARANTINED and quarantined.store
    assert quarantined.outcome == "tagged"
    dropped = decide(AuditVerdict.biased("religion"), policy)
    assert dropped.action is TagAction.DROP and not dropped.store
    tagged = decide(AuditVerdict.biased("age"), policy)
    assert tagged.action is TagAction.TAG and tagged.tag is not None


def test_to_tag_copies_fields_and_clips_to_tag_limits() -> None:
    verdict = AuditVerdict.biased(
        "gender", score=0.7, target_group="x" * 500, tendency="against women",
        rationale="r" * 5000, auditor="m@auditor_v1",
    )  # fmt: skip
    tag = verdict.to_tag()
    assert isinstance(tag, BiasTag)
    assert tag.bias_type == "gender" and tag.score == 0.7 and tag.auditor == "m@auditor_v1"
    assert len(tag.target_group) == 200 and len(tag.rationale) == 1000
    assert verdict.to_tag("other-label").auditor == "other-label"
    with pytest.raises(ValueError):
        AuditVerdict.clean().to_tag()
