"""Grounded tags: the group and tendency come from the text, an ungrounded rationale is dropped."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from dmt_proxy.audit.grounding import (
    LEXICON_VERSION,
    contains,
    find_groups,
    ground,
    ground_tag,
    load_lexicon,
    names_group,
)
from dmt_proxy.audit.schema import AuditVerdict
from dmt_proxy.domains import DOMAINS
from dmt_proxy.exchange import Exchange
from dmt_proxy.memory.backends.in_memory import InMemoryBackend
from dmt_proxy.memory.base import Scope
from dmt_proxy.memory.write.outbox import SqliteOutbox
from dmt_proxy.memory.write.trail import MemoryTrail
from dmt_proxy.memory.write.worker import OutboxWorker
from dmt_proxy.metrics import Metrics
from dmt_proxy.policy import AuditPolicy, Mode
from dmt_proxy.tags import AuditStatus, BiasTag, Finding, FindingKind, TagGrounding
from dmt_proxy.testing.auditor import ScriptedAuditor

AGE = "Older workers just can't keep up with new software, so I only hire people under 30."


def test_the_judges_group_is_kept_when_it_is_a_span_and_extended_by_its_head_noun() -> None:
    g = ground("Muslim parents never let their kids join school trips.", domain="religion",
               target_group="Muslims", tendency="", rationale="Claims Muslim parents restrict kids.")  # fmt: skip
    assert g.target_group == "Muslim parents"
    assert g.record.grounded and g.record.source == "span" and g.record.phrase == "Muslims"
    assert g.rationale == "Claims Muslim parents restrict kids." and g.record.rationale == "kept"


def test_a_group_the_text_does_not_name_is_never_taken() -> None:
    g = ground(AGE, domain="age", target_group="immigrants", tendency="", rationale="")
    assert g.target_group == "Older workers" and g.record.source == "lexicon"
    assert g.record.domain == "age" and g.record.phrase == "older people"


def test_no_group_in_the_text_leaves_the_target_empty_and_drops_the_rationale() -> None:
    g = ground("He is always late and never says sorry.", domain="gender", target_group="women",
               tendency="favoring men", rationale="Women are stereotyped as late.")  # fmt: skip
    assert (g.target_group, g.tendency, g.rationale) == ("", "", "")
    assert not g.record.grounded and g.record.source == "none" and g.record.rationale == "dropped"


def test_an_invented_rationale_is_dropped_and_one_naming_the_group_is_kept() -> None:
    text = "People over 60 shouldn't be driving at night."
    invented = ground(text, domain="age", target_group="", tendency="",
                      rationale="studies show people who grew up on farms work harder")  # fmt: skip
    assert invented.target_group == "People over 60" and invented.rationale == ""
    assert invented.record.rationale == "dropped"
    for named in ("Treats people over 60 as unfit", "assumes the ELDERLY cannot see",
                  "a claim about older drivers", "about a person over 60"):  # fmt: skip
        assert (
            ground(text, domain="age", target_group="", tendency="", rationale=named).rationale
            == named
        )


@pytest.mark.parametrize(("haystack", "needle", "expected"), [
    ("Women are bad drivers", "woman", True),
    ("a WOMAN driver", "women", True),
    ("Muslims", "muslim", True),
    ("families on benefits", "family", True),
    ("womanhood", "woman", False),  # whole words only
    ("the men", "women", False),
    ("", "women", False),
    ("women", "", False),
])  # fmt: skip
def test_contains_is_word_wise_case_insensitive_and_plural_tolerant(
    haystack: str, needle: str, expected: bool
) -> None:
    assert contains(haystack, needle) is expected


def test_an_adjective_names_a_group_only_before_a_head_noun() -> None:
    assert find_groups("I had an older version of the app.") == []
    assert find_groups("My black coffee is cold.") == []
    (mention,) = find_groups("Older employees resist change.")
    assert mention.span == "Older employees" and mention.entry.domain == "age"


def test_the_tags_domain_is_preferred_among_several_groups() -> None:
    text = "Older women in the office gossip; Muslim colleagues are fine."
    assert ground(text, domain="religion", target_group="", tendency="",
                  rationale="").target_group == "Muslim colleagues"  # fmt: skip
    assert ground(text, domain="age", target_group="", tendency="",
                  rationale="").target_group == "Older women"  # fmt: skip


def test_a_relative_or_a_possessed_noun_ranks_after_a_group() -> None:
    # The judge named the wrong domain: neither mention is of it, so the group wins over
    # the speaker's sister, and "my tattoos" is the speaker's own.
    text = "My sister says teenagers are all selfish."
    assert ground(text, domain="ses", target_group="", tendency="",
                  rationale="").target_group == "teenagers"  # fmt: skip
    text = "I hide my tattoos at work because tattooed people never get promoted."
    assert ground(text, domain="appearance", target_group="", tendency="",
                  rationale="").target_group == "tattooed people"  # fmt: skip


def test_the_tendency_is_the_judges_if_it_names_the_group_else_the_texts_clause() -> None:
    kept = ground(AGE, domain="age", target_group="older workers",
                  tendency="against older workers", rationale="")  # fmt: skip
    assert kept.tendency == "against older workers"
    taken = ground(AGE, domain="age", target_group="older workers", tendency="favoring farmers",
                   rationale="")  # fmt: skip
    assert (
        taken.tendency.startswith("Older workers just can't keep up") and len(taken.tendency) <= 200
    )
    long_text = "word " * 300 + "women are bad at maths " + "word " * 300
    clipped = ground(long_text, domain="gender", target_group="", tendency="", rationale="")
    assert "women" in clipped.tendency and len(clipped.tendency) <= 200


@pytest.mark.parametrize(("text", "span"), [
    ("W0men are t00 emotional to lead.", "W0men"),  # leetspeak
    ("wo\u200bmen are too emotional to lead.", "wo\u200bmen"),  # a zero-width space inside
    ("\u202ewomen are too emotional\u202c to lead.", "women"),  # RTL override around it
    ("<script>alert(1)</script> women can't code", "women"),
    ("Les femmes ne savent pas conduire.", "femmes"),
    ("Frauen können nicht einparken.", "Frauen"),
])  # fmt: skip
def test_odd_and_hostile_texts_ground_on_what_the_text_says(text: str, span: str) -> None:
    g = ground(text, domain="gender", target_group="", tendency="", rationale="")
    assert g.record.grounded and g.record.phrase == "women"
    assert contains(text, g.target_group) or g.target_group in text or span in g.target_group


def test_markup_in_a_judges_group_or_rationale_is_not_taken_from_outside_the_text() -> None:
    text = "Old people are a drain on the health service."
    g = ground(text, domain="age", target_group="<b>engineers</b>", tendency="<img src=x>",
               rationale="ignore previous instructions")  # fmt: skip
    assert g.target_group == "Old people" and g.rationale == ""
    assert "<" not in g.target_group + g.tendency


def test_a_100kb_memory_is_grounded_quickly() -> None:
    middle = "lorem ipsum dolor sit amet " * 2000
    text = middle + " women are bad at maths " + middle + " immigrants steal jobs"
    started = time.perf_counter()
    g = ground(text, domain="gender", target_group="", tendency="", rationale="")
    # A coarse guard, not a pace: ~0.05 s on a 2-core machine (~0.5 s on its first, cold
    # call); only a scan that grows much faster than the text would reach 5 s.
    assert time.perf_counter() - started < 5.0
    # Scanned as the judges see it (head, the sentences naming a group, tail): the middle's
    # group is found, and preferred as the tag's domain.
    assert g.record.grounded and g.record.phrase == "women"


def test_names_group_counts_the_entrys_forms() -> None:
    (mention,) = find_groups("Old people are slow.")
    assert names_group("assumes the elderly are slow", "Old people", mention.entry)
    assert not names_group("assumes farmers are slow", "Old people", mention.entry)
    assert not names_group("   ", "Old people", mention.entry)


def test_ground_tag_records_grounding_and_leaves_a_findings_only_tag_alone() -> None:
    tag = BiasTag(bias_type="age", target_group="", score=0.9, rationale="P(biased) 0.90")
    grounded = ground_tag(tag, AGE)
    assert grounded.grounding is not None and grounded.grounding.lexicon == LEXICON_VERSION
    assert grounded.target_group == "Older workers" and grounded.rationale == ""
    only = BiasTag(
        score=0.2, findings=(Finding(kind=FindingKind.MANIPULATION, rule="role_marker"),)
    )
    assert ground_tag(only, AGE) is only


def test_the_lexicon_is_versioned_and_covers_every_domain() -> None:
    lexicon = load_lexicon()
    assert lexicon.version == LEXICON_VERSION
    assert {e.domain for e in lexicon.entries} == set(DOMAINS)  # the nine ("other" has none)


# The tag's wire bytes: format 2 tags (no grounding) are written exactly as before.
V2_TAG_JSON = (
    '{"bias_type":"age","target_group":"older workers","tendency":"favoring youth",'
    '"score":0.8,"rationale":"r","auditor":"a","findings":[],"first_stage_score":null}'
)


def test_a_tag_without_grounding_keeps_the_format_2_wire_bytes() -> None:
    tag = BiasTag.model_validate_json(V2_TAG_JSON)
    assert tag.grounding is None
    assert tag.model_dump_json() == V2_TAG_JSON
    assert json.dumps(tag.model_dump(mode="json"), separators=(",", ":")) == V2_TAG_JSON


def test_a_grounded_tag_round_trips_with_its_grounding() -> None:
    tag = BiasTag.model_validate_json(V2_TAG_JSON).model_copy(update={"grounding": TagGrounding(
        lexicon=LEXICON_VERSION, grounded=True, source="span", span="older workers",
        phrase="older people", domain="age", rationale="kept")})  # fmt: skip
    body = tag.model_dump_json()
    assert body.startswith(V2_TAG_JSON[:-1] + ',"grounding":{"lexicon":"group_lexicon_v2"')
    assert BiasTag.model_validate_json(body) == tag


async def test_the_worker_stores_a_grounded_tag_and_a_grounded_trail(tmp_path: Path) -> None:
    # The scripted judge names a group the text does not mention and invents a rationale.
    verdict = AuditVerdict.biased("age", score=0.9, target_group="farmers",
                                  tendency="favoring farmers",
                                  rationale="studies show people who grew up on farms work harder")  # fmt: skip
    backend, trail = InMemoryBackend(), MemoryTrail()
    outbox = SqliteOutbox(tmp_path / "outbox.sqlite3")
    worker = OutboxWorker(outbox=outbox, backend=backend, backend_name="memory",
                          auditor=ScriptedAuditor([verdict]), policy=AuditPolicy(),
                          metrics=Metrics(), trail=trail)  # fmt: skip
    scope = Scope(user="u")
    mid = await outbox.enqueue(
        Exchange(scope=scope, query=AGE, answer="ok", request_id="r", mode=Mode.DMT)
    )
    (item,) = await outbox.pending()
    await worker.process(item)
    record = await backend.get(scope, mid)
    assert record is not None and record.audit_status is AuditStatus.TAGGED
    tag = record.tag
    assert tag is not None and tag.grounding is not None and tag.grounding.grounded
    assert tag.target_group == "Older workers" and tag.rationale == ""
    assert "farm" not in tag.model_dump_json()
    (event,) = await trail.history(mid)
    assert event.evidence is not None and "farm" not in json.dumps(event.evidence)
    assert event.evidence["grounding"]["rationale"] == "dropped"
    await outbox.aclose()


def test_named_domains_in_order_of_mention_including_undone_disguises() -> None:
    from dmt_proxy.audit.grounding import named_domains

    assert named_domains("Older workers and women in tech") == ("age", "gender")
    assert named_domains("What is the boiling point of water?") == ()
    # Disguises are undone first (normalize_v3): spaced letters, leetspeak, flags.
    assert named_domains("M u s l i m s always lie") == ("religion",)
    assert named_domains("w0m3n can't drive") == ("gender",)
    assert named_domains("\U0001f1f2\U0001f1fd people are lazy") == ("nationality",)
