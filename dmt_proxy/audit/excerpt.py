"""A bounded excerpt of a long memory: what the judges see of it, and the finding that says so.

The judges' cost must not grow with the memory: a 3.5 MB chat turn is legal, and
normalising it whole took ~10 s of pure Python. A memory longer than the bound is judged
on its head, its tail, and in between the sentences that name a group (bias is said about
people, so a stereotype buried in the middle of a long paste is kept), each part marked;
the ``excerpt`` finding states what was kept and what was not.

Cost is linear in the text with small constants and no single long call: the middle is
scanned in chunks with C-level word splitting and set intersection, and only sentences
holding a trigger word are checked by the caller's ``names_group``; at most
``MAX_CHECKED`` sentences are checked, so a text that repeats a group word a million times
costs what one that names it ``MAX_CHECKED`` times does.

Text disguised so that no trigger word appears (leetspeak, zero-width characters inside
every word) is found only in the head and tail: the finding still says how much was not
judged, and the policy's record bound keeps the stored text the same.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from dmt_proxy.tags import Finding, FindingKind

EXCERPT_VERSION = "excerpt_v2"
"""v1: head (two thirds) and tail. v2: head (half), the sentences that name a group, tail."""
MAX_CHECKED = 1000
"""Candidate sentences checked with ``names_group`` at most, whatever the text's length."""
CHUNK_CHARS = 32_768
"""Characters of the middle scanned per step (bounds the longest single C call)."""
SENTENCE_MAX_CHARS = 400
"""A longer 'sentence' (a run without punctuation) is cut around its trigger word."""

_WORDS = re.compile(r"[^\W\d_]+")
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")


@dataclass(frozen=True)
class GroupPicker:
    """How to find sentences that name a group: cheap trigger words, then a precise check."""

    triggers: frozenset[str]
    """Case-folded words any group name starts with (a sentence without one is skipped)."""
    names_group: Callable[[str], bool]
    """Whether a candidate sentence really names a group (e.g. the lexicon's matcher)."""


def excerpt(text: str, max_chars: int, picker: GroupPicker) -> tuple[str, Finding | None]:
    """``text`` bounded to about ``max_chars`` for the judges, and the finding that states it.

    Text within ``max_chars`` is returned whole (no finding). Longer text keeps its first
    half and last quarter of the budget; the remaining quarter holds, in order, the
    sentences of the middle that ``picker`` finds naming a group.
    """
    if len(text) <= max_chars:
        return text, None
    head, tail = max_chars // 2, max_chars // 4
    middle_start, middle_end = head, len(text) - tail
    picked = _group_sentences(text, middle_start, middle_end, max_chars - head - tail, picker)
    parts = [text[:head]]
    at = middle_start
    for start, end in picked:
        parts.append(f"\n[... {start - at} characters not audited ...]\n{text[start:end]}")
        at = end
    parts.append(f"\n[... {middle_end - at} characters not audited ...]\n{text[middle_end:]}")
    kept = head + tail + sum(end - start for start, end in picked)
    groups = f", {len(picked)} sentence(s) naming a group in between" if picked else ""
    detail = (
        f"{EXCERPT_VERSION}: audited characters 1-{head}{groups} and "
        f"{middle_end + 1}-{len(text)} of {len(text)} ({len(text) - kept} not audited)"
    )
    finding = Finding(kind=FindingKind.EXCERPT, rule="bounded_excerpt", detail=detail)
    return "".join(parts), finding


def _group_sentences(
    text: str, start: int, end: int, budget: int, picker: GroupPicker
) -> list[tuple[int, int]]:
    """Spans of sentences in ``text[start:end]`` that name a group, in order, within ``budget``."""
    spans: list[tuple[int, int]] = []
    used = checked = 0
    at = start
    while at < end and used < budget and checked < MAX_CHECKED:
        stop = min(end, at + CHUNK_CHARS)
        if stop < end:  # end the chunk after a sentence end, so no sentence is split
            boundary = max(text.rfind(c, at, stop) for c in ".!?\n")
            stop = boundary + 1 if boundary > at else stop
        chunk = text[at:stop]
        words = set(_WORDS.findall(chunk.casefold()))
        if words.isdisjoint(picker.triggers):
            at = stop
            continue
        for m in _SENTENCE.finditer(chunk):
            folded = m.group().casefold()
            hits = set(_WORDS.findall(folded)) & picker.triggers
            if not hits:
                continue
            checked += 1
            lo, hi = at + m.start(), at + m.end()
            if hi - lo > SENTENCE_MAX_CHARS:  # a window around the first trigger word
                first = min(folded.find(w) for w in hits)
                lo = max(lo, at + m.start() + first - SENTENCE_MAX_CHARS // 2)
                hi = min(hi, lo + SENTENCE_MAX_CHARS)
            if picker.names_group(text[lo:hi]) and used + (hi - lo) <= budget:
                spans.append((lo, hi))
                used += hi - lo
            if used >= budget or checked >= MAX_CHECKED:
                break
        at = stop
    return spans
