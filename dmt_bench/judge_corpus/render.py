"""Fill frame templates and apply the conversational registers of judgment_corpus_v1.

Registers: a frame family is written ``formal`` or ``chat``; on top of that a row may be
given deterministic typos (``typo``), be lower-cased and clipped like a chat fragment
(``fragment``) or be buried in unrelated chat (``long_mixed``). Typos never touch the group
or trait words, so the minimal-pair words stay exact.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dmt_bench.judge_corpus.templates import SLOT, Group, Trait

NO_SPACE_LANGS = frozenset({"ja", "zh"})
SENTENCE_END = ".!?。！？؟…"
LEADING_PUNCT = "¿¡\"'«“「"
LONG_MIN, LONG_MAX = 300, 1500


@dataclass(frozen=True)
class Filled:
    """A rendered template with the group and trait words it contains."""

    text: str
    group_span: str | None
    trait_span: str | None


def fill(
    template: str,
    *,
    group: Group | None,
    trait: Trait | None,
    values: Mapping[str, str],
    base: str | None = None,
) -> Filled:
    """Render ``template``; the first group and trait slot give the reported spans."""
    group_span: str | None = None
    trait_span: str | None = None
    parts: list[str] = []
    last = 0
    for match in SLOT.finditer(template):
        name, form = match.group(1), match.group(2) or ""
        parts.append(template[last : match.start()])
        last = match.end()
        if name == "G":
            if group is None:
                raise ValueError(f"template needs a group: {template!r}")
            rendered, span = group.form(form)
            group_span = group_span or span
        elif name == "T":
            if trait is None:
                raise ValueError(f"template needs a trait: {template!r}")
            rendered = trait.form(form, feminine=group.feminine if group else False)
            trait_span = trait_span or rendered
        elif name == "BASE":
            if base is None:
                raise ValueError(f"template needs a base text: {template!r}")
            rendered = base
        else:
            rendered = values[f"{name}.{form}" if form else name]
        parts.append(rendered)
    parts.append(template[last:])
    text = "".join(parts)
    if SLOT.match(template.lstrip(LEADING_PUNCT)):  # a slot opens the sentence
        text = capitalise(text)
    return Filled(text, group_span, trait_span)


def capitalise(text: str) -> str:
    """Upper-case the first letter, after any opening quote or inverted mark."""
    i = 0
    while i < len(text) and text[i] in LEADING_PUNCT:
        i += 1
    if i < len(text) and text[i].islower():
        return text[:i] + text[i].upper() + text[i + 1 :]
    return text


def end_sentence(text: str, lang: str) -> str:
    """``text`` ending in sentence punctuation (added when missing)."""
    stripped = text.rstrip()
    if not stripped or stripped[-1] in SENTENCE_END or stripped[-1] in "}])>`":
        return stripped
    return stripped + ("。" if lang in NO_SPACE_LANGS else ".")


def locate(text: str, needle: str) -> str | None:
    """The slice of ``text`` that matches ``needle`` ignoring case, or None."""
    if not needle:
        return None
    at = text.find(needle)
    if at >= 0:
        return needle
    low, target = text.lower(), needle.lower()
    if len(low) != len(text):  # lower() changed lengths: no safe slicing
        return None
    at = low.find(target)
    return text[at : at + len(needle)] if at >= 0 else None


def _protected(text: str, spans: Sequence[str]) -> set[int]:
    """Indices of ``text`` inside any occurrence of a span, ignoring case."""
    low = text.lower()
    haystack = low if len(low) == len(text) else text
    keep: set[int] = set()
    for span in spans:
        needle = span.lower() if haystack is low else span
        if not needle:
            continue
        start = haystack.find(needle)
        while start >= 0:
            keep.update(range(start, start + len(needle)))
            start = haystack.find(needle, start + 1)
    return keep


def add_typos(text: str, spans: Sequence[str], rng: random.Random) -> str:
    """Deterministic character swaps, drops and doublings outside ``spans``."""
    chars = list(text)
    count = min(4, 1 + len(text) // 70)
    for _ in range(count):
        keep = _protected("".join(chars), spans)
        eligible = [
            i
            for i in range(len(chars) - 1)
            if chars[i].isalpha() and chars[i + 1].isalpha() and i not in keep and i + 1 not in keep
        ]
        if not eligible:
            break
        i = eligible[rng.randrange(len(eligible))]
        op = rng.randrange(3)
        if op == 0:
            chars[i], chars[i + 1] = chars[i + 1], chars[i]
        elif op == 1:
            del chars[i]
        else:
            chars.insert(i, chars[i])
    return "".join(chars)


def fragment(text: str) -> str:
    """A lower-case chat fragment: one line, no closing full stop."""
    line = " ".join(text.split())
    if line.lower() != line and len(line.lower()) == len(line):
        line = line.lower()
    return line.rstrip(".!。！")


def bury(text: str, filler: Sequence[str], rng: random.Random, lang: str) -> str:
    """``text`` inside unrelated chat of LONG_MIN..LONG_MAX characters where filler allows."""
    sep = "" if lang in NO_SPACE_LANGS else " "
    main = end_sentence(text, lang)
    pool = list(filler)
    rng.shuffle(pool)
    target = rng.randint(LONG_MIN, LONG_MAX - 100)
    chosen: list[str] = []
    total = len(main)
    for sentence in pool:
        if total >= target:
            break
        if total + len(sentence) + len(sep) > LONG_MAX:
            continue
        chosen.append(sentence)
        total += len(sentence) + len(sep)
    chosen.insert(rng.randint(0, len(chosen)), main)
    return sep.join(chosen)
