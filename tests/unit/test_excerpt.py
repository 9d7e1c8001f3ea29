"""The bounded excerpt the judges see of a long memory (``audit.excerpt``, issue 42)."""

from __future__ import annotations

import time

from dmt_proxy.audit.excerpt import MAX_CHECKED, GroupPicker, excerpt
from dmt_proxy.audit.grounding import group_excerpt
from dmt_proxy.audit.stages import AUDIT_MAX_CHARS, RAW_FACTOR, bounded_for_judges
from dmt_proxy.tags import FindingKind

STEREOTYPE = "Old people can never learn new technology, it is pointless to teach them."


NAMES_NONE = GroupPicker(triggers=frozenset({"middle"}), names_group=lambda _s: False)


def test_head_and_tail_are_kept_and_the_cut_is_stated_when_no_group_is_named() -> None:
    text = "A" * 5000 + " MIDDLE " + "Z" * 5000
    body, finding = excerpt(text, 3000, NAMES_NONE)
    assert finding is not None and finding.kind is FindingKind.EXCERPT
    assert body.startswith("A" * 1500) and body.endswith("Z" * 750) and "MIDDLE" not in body
    assert "characters not audited" in body and len(body) < 3100
    assert finding.detail == (
        "excerpt_v2: audited characters 1-1500 and 9259-10008 of 10008 (7758 not audited)"
    )
    assert excerpt("short", 3000, NAMES_NONE) == ("short", None)


def test_a_stereotype_buried_in_a_long_paste_is_kept() -> None:
    filler = "We talked about the garden and the weekly shopping list. "
    text = filler * 2000 + STEREOTYPE + " " + filler * 3000
    body, finding = group_excerpt(text, 2800)
    assert STEREOTYPE in body and len(body) < 3000
    assert finding is not None and "1 sentence(s) naming a group" in finding.detail


def test_a_function_word_is_no_trigger_and_sentences_are_checked_at_most_max_checked() -> None:
    calls: list[str] = []

    def names_group(sentence: str) -> bool:
        calls.append(sentence)
        return False

    picker = GroupPicker(triggers=frozenset({"person"}), names_group=names_group)
    body, _ = excerpt("The person over there said hi. " * 20_000, 2000, picker)
    assert len(calls) == MAX_CHECKED and len(body) < 2200


def test_the_judges_text_is_bounded_whatever_the_size_and_the_cost_is_bounded() -> None:
    started = time.perf_counter()
    judged, manipulation, findings = bounded_for_judges("word " * 700_000)
    elapsed = time.perf_counter() - started
    assert len(judged) <= AUDIT_MAX_CHARS + 200 and not manipulation
    assert [f.rule for f in findings] == ["bounded_excerpt"]
    assert str(AUDIT_MAX_CHARS * RAW_FACTOR // 2) in findings[0].detail
    # Not a timing assertion of the machine's speed: normalising 3.5 MB whole took ~10 s,
    # the bounded path well under one; 5 s leaves room for any slow CI machine.
    assert elapsed < 5.0
