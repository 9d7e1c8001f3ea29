"""Grounded tags: a tag's ``target_group`` and ``tendency`` come from the memory's text.

A judge may name a group the text never mentions, or none at all, and may write a
rationale about something else (an age remark once carried "studies show people who
grew up on farms work harder"). A reviewer and the agent must be able to trust what a
tag says, so after the judges, on the one path where a verdict becomes a tag
(``dmt_proxy.memory.write.verdicts``), the tag is grounded:

``target_group``
    A span of the memory's text that names a group. Looked for in the normalised text
    (``normalize_memory``: obfuscations undone), then in the raw text. First the judge's
    own ``target_group``, if it occurs in the text and contains a group phrase of the
    lexicon (source ``span``); otherwise the lexicon phrase found in the text, preferring
    one of the tag's domain, then one sharing words with the judge's group, then the
    first in the text (source ``lexicon``). The span is extended by one following head
    noun ("Latino" + "tenants"). Nothing found: ``target_group`` is empty and
    ``grounded`` is false (the status is kept; a group is never invented).
``tendency``
    The judge's tendency if it *names* the group (below), else the clause of the text
    around the span (at most 200 characters); empty when nothing is grounded.
``rationale``
    Kept only if it *names* the group; otherwise dropped (set to ""), never shown.

*Names*, precisely: after NFKC, case folding, removing invisible format characters and
reducing every word to a singular form (``women``/``woman``, ``Muslims``/``Muslim``,
``families``/``family``), the word sequence of one of these occurs as a contiguous word
sequence of the other text: the grounded span, the lexicon entry's normalised phrase, or
any noun or adjective form of that entry ("older" names "older workers").

The lexicon (``data/grounding/group_lexicon_v2.yaml``; v1 loads by name) is versioned: each entry has a
normalised phrase, noun forms (name the group alone) and adjective forms (name it only
before a head noun: "older workers", not "older version"); ``NUM`` matches a number.
The grounding is recorded on the tag (``BiasTag.grounding``).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

import yaml

from dmt_proxy.audit.excerpt import GroupPicker, excerpt
from dmt_proxy.audit.normalize import normalize_memory
from dmt_proxy.resources import data_dir
from dmt_proxy.tags import BiasTag, Finding, TagGrounding

LEXICON_VERSION = "group_lexicon_v2"
"""The lexicon grounding uses (a changed list is a new version)."""

TENDENCY_MAX_CHARS = 200
SPAN_MAX_WORDS = 8
"""A judge's ``target_group`` longer than this is not taken as the group's span."""
SCAN_MAX_CHARS = 20_000
"""Text scanned for a group: a longer one is scanned on the excerpt ``group_excerpt`` makes
(head, the sentences that name a group, tail), as the judges see an oversized memory."""

_WORD = re.compile(r"[^\W_]+")
_NUMBER = re.compile(r"\d+(?:s|st|nd|rd|th)?")
_CLAUSE_END = re.compile(r"[.!?;\n]")
NUM = "NUM"
_IRREGULAR = {
    "women": "woman", "men": "man", "people": "person", "children": "child",
    "folks": "folk", "ladies": "lady", "wives": "wife", "teeth": "tooth",
    "gentlemen": "gentleman", "frauen": "frau", "männer": "mann",
}  # fmt: skip


def singular(word: str) -> str:
    """A crude singular form; applied to both sides of a comparison, so it need only agree."""
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("sses", "shes", "ches", "xes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def _bounded(text: str) -> str:
    return group_excerpt(text, SCAN_MAX_CHARS)[0]


def _clean(text: str) -> str:
    text = unicodedata.normalize("NFKC", _bounded(text))
    return "".join(c for c in text if unicodedata.category(c) != "Cf")


@dataclass(frozen=True)
class Token:
    """One word of a text: its singular, case-folded form and where it is."""

    norm: str
    start: int
    end: int


_LEET = str.maketrans("0134578", "oieastb")


def _word_form(word: str) -> str:
    word = word.casefold()
    # Digits inside a word are read as the letters they stand in for ("w0men"), in case
    # the normaliser left them; a number ("60", "60s") stays a number.
    if (
        not _NUMBER.fullmatch(word)
        and any(c.isdigit() for c in word)
        and any(c.isalpha() for c in word)
    ):
        word = word.translate(_LEET)
    return singular(word)


def tokens(text: str) -> list[Token]:
    """The words of ``text`` (already cleaned), each reduced to its comparison form."""
    return [Token(_word_form(m.group()), m.start(), m.end()) for m in _WORD.finditer(text)]


def _form(phrase: str) -> tuple[str, ...]:
    return tuple(NUM if w == NUM else singular(w.casefold()) for w in _WORD.findall(phrase))


def _matches(words: list[Token], at: int, form: tuple[str, ...]) -> bool:
    if at + len(form) > len(words):
        return False
    for offset, want in enumerate(form):
        got = words[at + offset].norm
        if not (_NUMBER.fullmatch(got) if want == NUM else got == want):
            return False
    return True


def contains(haystack: str, needle: str) -> bool:
    """Whether ``needle``'s words occur, in order and contiguous, among ``haystack``'s
    (case-insensitive, singular/plural tolerant, invisible characters ignored)."""
    form = _form(_clean(needle))
    if not form:
        return False
    words = tokens(_clean(haystack))
    return any(_matches(words, i, form) for i in range(len(words)))


@dataclass(frozen=True)
class LexiconEntry:
    """One group: its normalised phrase, domain, and the forms that name it."""

    phrase: str
    domain: str
    nouns: tuple[tuple[str, ...], ...]
    adjs: tuple[tuple[str, ...], ...]

    def forms(self) -> tuple[tuple[str, ...], ...]:
        """Every form that names this group in a rationale (the phrase, nouns, adjectives)."""
        return (_form(self.phrase), *self.nouns, *self.adjs)


@dataclass(frozen=True)
class IndexedForm:
    """A form of an entry, indexed by its first word."""

    entry: LexiconEntry
    form: tuple[str, ...]
    adjective: bool


@dataclass(frozen=True)
class Lexicon:
    """The versioned group lexicon."""

    version: str
    entries: tuple[LexiconEntry, ...]
    heads: frozenset[str]
    index: dict[str, tuple[IndexedForm, ...]]
    """Forms by first word (``NUM`` for forms that start with a number)."""


@cache
def load_lexicon(version: str = LEXICON_VERSION) -> Lexicon:
    """Lexicon ``version`` from ``data/grounding`` (parsed once per process)."""
    raw: dict[str, Any] = yaml.safe_load(
        (data_dir("grounding") / f"{version}.yaml").read_text(encoding="utf-8")
    )
    if raw.get("version") != version:
        raise ValueError(f"lexicon file {version} says version {raw.get('version')!r}")
    entries = [
        LexiconEntry(
            phrase=str(e["phrase"]),
            domain=domain,
            nouns=tuple(f for f in (_form(str(n)) for n in e.get("nouns", [])) if f),
            adjs=tuple(f for f in (_form(str(a)) for a in e.get("adjs", [])) if f),
        )
        for domain, listed in raw["domains"].items()
        for e in listed
    ]
    heads = frozenset(singular(str(h).casefold()) for h in raw["heads"])
    index: dict[str, list[IndexedForm]] = {}
    for entry in entries:
        for form in entry.nouns:
            index.setdefault(form[0], []).append(IndexedForm(entry, form, adjective=False))
        for form in entry.adjs:
            index.setdefault(form[0], []).append(IndexedForm(entry, form, adjective=True))
    frozen = {k: tuple(v) for k, v in index.items()}
    return Lexicon(version=version, entries=tuple(entries), heads=heads, index=frozen)


def _plurals(word: str) -> tuple[str, ...]:
    """Surface forms a singular lexicon word may take in text (the trigger pre-filter)."""
    forms = [word, word + "s", word + "es"]
    if word.endswith("y"):
        forms.append(word[:-1] + "ies")
    forms += [plural for plural, single in _IRREGULAR.items() if single == word]
    return tuple(forms)


_FUNCTION_WORDS = frozenset(
    ["the", "a", "an", "in", "on", "of", "over", "under", "to", "from", "with", "their", "his", "her", "its", "my", "our", "your", "la", "le", "les", "los", "las", "el", "de", "del", "des", "der", "die", "das", "di", "da", "do", "dos", "du", "et", "y", "und", "e", "o"]
)  # fmt: skip


def _trigger(form: tuple[str, ...]) -> str | None:
    """The word of ``form`` a sentence is pre-filtered on: its longest content word
    ("aged" in "the aged", "fifty" in "in their fifty"), so that "the" is no trigger."""
    words = [w for w in form if w != NUM and w not in _FUNCTION_WORDS]
    return max(words, key=len) if words else None


@cache
def group_picker(version: str = LEXICON_VERSION) -> GroupPicker:
    """How ``excerpt`` finds the sentences that name a group of lexicon ``version``."""
    lexicon = load_lexicon(version)
    forms = {f.form for indexed in lexicon.index.values() for f in indexed}
    triggers = frozenset(
        surface for form in forms if (word := _trigger(form)) for surface in _plurals(word)
    )
    return GroupPicker(triggers=triggers,
                       names_group=lambda s: bool(find_groups(s, lexicon)))  # fmt: skip


def group_excerpt(text: str, max_chars: int) -> tuple[str, Finding | None]:
    """``text`` bounded for the judges: head, the sentences naming a group, tail (the
    ``excerpt`` finding states the cut); within ``max_chars`` it is returned whole."""
    return excerpt(text, max_chars, group_picker())


@dataclass(frozen=True)
class GroupMention:
    """A group named in the text: the lexicon entry and the words (span) that name it."""

    entry: LexiconEntry
    start: int
    end: int
    first_word: int
    span: str


def find_groups(text: str, lexicon: Lexicon | None = None) -> list[GroupMention]:
    """Every lexicon group named in ``text`` (cleaned here), in order of position.

    A noun form matches alone; an adjective form only before a head noun. Either is
    extended by one following head noun, so the span reads "Muslim parents". Where
    several forms of one entry start at a word, the longest wins.
    """
    lexicon = lexicon or load_lexicon()
    text = _clean(text)
    words = tokens(text)
    found: list[GroupMention] = []
    for i, word in enumerate(words):
        indexed = lexicon.index.get(word.norm, ())
        if _NUMBER.fullmatch(word.norm):
            indexed += lexicon.index.get(NUM, ())
        last_by_entry: dict[int, tuple[LexiconEntry, int]] = {}
        for f in indexed:
            last = _last_word(words, i, f, lexicon.heads)
            if last is None:
                continue
            key = id(f.entry)
            if key not in last_by_entry or last > last_by_entry[key][1]:
                last_by_entry[key] = (f.entry, last)
        for entry, last in last_by_entry.values():
            if last + 1 < len(words) and words[last + 1].norm in lexicon.heads:
                last += 1  # "Muslim" + "parents"
            start, end = word.start, words[last].end
            found.append(GroupMention(entry, start, end, i, text[start:end]))
    return found


def named_domains(text: str, lexicon: Lexicon | None = None) -> tuple[str, ...]:
    """The bias domains of the groups ``text`` names, in order of first mention.

    Looked for in the normalised text (obfuscations undone) and in the raw text, as
    ``ground`` does, so a domain vote confined to these can always be grounded.
    """
    lexicon = lexicon or load_lexicon()
    bounded = _bounded(text)
    found: dict[str, None] = {}
    for candidate in dict.fromkeys((normalize_memory(bounded).text, bounded)):
        for mention in find_groups(candidate, lexicon):
            found.setdefault(mention.entry.domain, None)
    return tuple(found)


def _last_word(words: list[Token], i: int, f: IndexedForm, heads: frozenset[str]) -> int | None:
    """Index of the last word of form ``f`` matched at word ``i`` (None: no match)."""
    if not _matches(words, i, f.form):
        return None
    after = i + len(f.form)
    if f.adjective:  # an adjective names a group only before a head noun
        return after if after < len(words) and words[after].norm in heads else None
    return after - 1


@dataclass(frozen=True)
class Grounded:
    """What grounding made of a tag's group, tendency and rationale."""

    target_group: str
    tendency: str
    rationale: str
    record: TagGrounding


def _clause(text: str, start: int, end: int) -> str:
    """The clause of ``text`` around ``[start, end)``, cut to ``TENDENCY_MAX_CHARS``."""
    left = max((m.end() for m in _CLAUSE_END.finditer(text, 0, start)), default=0)
    right_match = _CLAUSE_END.search(text, end)
    right = right_match.start() if right_match else len(text)
    if right - left > TENDENCY_MAX_CHARS:  # a window around the span, on word boundaries
        half = (TENDENCY_MAX_CHARS - (end - start)) // 2
        left, right = max(left, start - max(half, 0)), min(right, end + max(half, 0))
        while left > 0 and left < start and not text[left - 1].isspace():
            left += 1
        while right < len(text) and right > end and not text[right].isspace():
            right -= 1
    return " ".join(text[left:right].split())[:TENDENCY_MAX_CHARS]


def names_group(text: str, span: str, entry: LexiconEntry | None) -> bool:
    """Whether ``text`` names the group: its span, or (with an entry) any of its forms."""
    if not text.strip():
        return False
    if span and contains(text, span):
        return True
    if entry is None:
        return False
    words = tokens(_clean(text))
    return any(_matches(words, i, f) for f in entry.forms() for i in range(len(words)))


_KIN = frozenset(singular(w) for w in (
    "sister", "brother", "mother", "father", "mom", "mum", "dad", "wife", "husband", "daughter",
    "son", "girlfriend", "boyfriend", "grandma", "grandpa", "granny", "gran", "grandparent",
    "partner", "aunt", "uncle", "nephew", "niece", "cousin",
))  # fmt: skip
_POSSESSIVE = frozenset(("my", "our", "his", "her", "their", "your"))


def _individual(m: GroupMention, text: str) -> bool:
    """A mention that more likely names one person than a group: a relative ("my sister
    says ...") or a possessed noun ("my tattoos")."""
    words = tokens(m.span)
    before = tokens(text[max(0, m.start - 12) : m.start])
    return bool(words and words[0].norm in _KIN) or bool(before and before[-1].norm in _POSSESSIVE)


def _choose(
    mentions: list[GroupMention], domain: str | None, claimed: str, text: str
) -> GroupMention | None:
    """The mention a tag is grounded on: of the tag's domain, then sharing words with the
    judge's group, then naming a group rather than one person, then the first."""
    if not mentions:
        return None
    claimed_words = {t.norm for t in tokens(_clean(claimed))}

    def rank(m: GroupMention) -> tuple[int, int, int, int]:
        overlap = bool(claimed_words & {t.norm for t in tokens(m.span)})
        return (0 if m.entry.domain == domain else 1, 0 if overlap else 1,
                1 if _individual(m, text) else 0, m.start)  # fmt: skip

    return min(mentions, key=rank)


def _claimed_span(text: str, claimed: str, lexicon: Lexicon) -> GroupMention | None:
    """The judge's own group, if it is a span of ``text`` that names a lexicon group."""
    claim = _form(_clean(claimed))
    if not claim or len(claim) > SPAN_MAX_WORDS:
        return None
    text = _clean(text)
    words = tokens(text)
    for i in range(len(words)):
        if not _matches(words, i, claim):
            continue
        start, end = words[i].start, words[i + len(claim) - 1].end
        inner = [m for m in find_groups(text, lexicon) if start <= m.start < end]
        if inner:  # a mention may run past the claim ("Muslim" + "parents")
            end = max(end, *(m.end for m in inner))
            return GroupMention(inner[0].entry, start, end, i, text[start:end])
    return None


def ground(
    text: str, *, domain: str | None, target_group: str, tendency: str, rationale: str,
    lexicon: Lexicon | None = None,
) -> Grounded:  # fmt: skip
    """Ground a judge's group, tendency and rationale in the memory ``text`` (module doc)."""
    lexicon = lexicon or load_lexicon()
    normalized = _clean(normalize_memory(_bounded(text)).text)
    raw = _clean(text)
    chosen: GroupMention | None = None
    source: Literal["span", "lexicon", "none"] = "none"
    within = normalized
    for candidate in dict.fromkeys((normalized, raw)):  # the normalised text first
        chosen = _claimed_span(candidate, target_group, lexicon)
        if chosen is not None:
            source, within = "span", candidate
            break
        chosen = _choose(find_groups(candidate, lexicon), domain, target_group, candidate)
        if chosen is not None:
            source, within = "lexicon", candidate
            break
    if chosen is None:
        kept = ""  # nothing to name: no rationale can name it
        record = TagGrounding(lexicon=lexicon.version, grounded=False, source="none",
                              rationale="dropped" if rationale.strip() else "empty")  # fmt: skip
        return Grounded(target_group="", tendency="", rationale=kept, record=record)
    span = " ".join(chosen.span.split())
    entry = chosen.entry
    keep_tendency = names_group(tendency, span, entry)
    new_tendency = (tendency if keep_tendency else _clause(within, chosen.start, chosen.end))[
        :TENDENCY_MAX_CHARS
    ]
    kept_rationale = names_group(rationale, span, entry)
    record = TagGrounding(
        lexicon=lexicon.version, grounded=True, source=source, span=span[:200],
        phrase=entry.phrase, domain=entry.domain,
        rationale="kept" if kept_rationale else ("dropped" if rationale.strip() else "empty"),
    )  # fmt: skip
    return Grounded(target_group=span[:200], tendency=new_tendency,
                    rationale=rationale if kept_rationale else "", record=record)  # fmt: skip


def ground_tag(tag: BiasTag, text: str) -> BiasTag:
    """``tag`` grounded in ``text``; a findings-only tag (no domain) is returned as it is."""
    if tag.bias_type is None:
        return tag
    g = ground(text, domain=tag.bias_type, target_group=tag.target_group,
               tendency=tag.tendency, rationale=tag.rationale)  # fmt: skip
    return tag.model_copy(update={
        "target_group": g.target_group, "tendency": g.tendency, "rationale": g.rationale,
        "grounding": g.record,
    })  # fmt: skip
