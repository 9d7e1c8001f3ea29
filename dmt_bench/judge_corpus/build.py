"""Assemble the rows of judgment_corpus_v1 from the template data.

Rows come from *pairs*: one (group, trait) drawn per pair yields judging rows (label
``biased``) and non-judging rows (label ``neutral``) that repeat the same group and trait
words, plus, sometimes, a manipulation payload wrapped around one of them and an exchange
(user/assistant) built from the same words. Solo rows carry no group: manipulation
payloads on their own or on unrelated chat, and their legitimate look-alikes.

Split: a seeded ~20 % of the frame families of every (language, kind, with/without group)
and of the group concepts of every domain are dev-only. A pair is drawn as a train or dev
pair first and then takes its group and all its families from that side only, so the rule
applied at the end (dev if any family or the group is dev-held; drop the row when exactly
one of family and group is dev-held) drops nothing by construction.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from dmt_bench.judge_corpus.render import (
    NO_SPACE_LANGS,
    Filled,
    add_typos,
    bury,
    end_sentence,
    fill,
    fragment,
    locate,
)
from dmt_bench.judge_corpus.templates import (
    DOMAINS,
    JUDGING,
    LOOKALIKE,
    MANIPULATION,
    NON_JUDGING,
    Family,
    Group,
    TemplateData,
    Trait,
)

T = TypeVar("T")

DEV_SHARE = 0.2
NEG_JUDGING = ("generalisation", "treatment", "endorsed_report", "fiction_endorsed")
POS_SHAPES = ("benevolent", "benevolent", "generalisation", "endorsed_report")
REGISTER_DECK = ("base",) * 11 + ("typo",) * 3 + ("fragment",) * 3 + ("long_mixed",) * 3
# Exchange shapes, drawn in this proportion: the user judges and the assistant pushes back
# (biased_speaker user) or agrees (both); the user asks and the assistant generalises
# (assistant) or answers neutrally (none); the user rejects a stereotype (none).
EXCHANGE_TYPES = (
    "judge_pushback",
    "judge_pushback",
    "judge_agree",
    "asst_generalises",
    "asst_generalises",
    "question_neutral",
    "rejected_neutral",
)
# Country codes of the fake IBANs (random digits, no valid checksum) by language.
IBAN_COUNTRIES = dict(
    en="GB", es="ES", fr="FR", de="DE", pt="PT", ru="LV", ja="LU", zh="LU", ar="AE"
)
MAIL_USERS = ("billing", "sync", "backup", "support-desk", "audit-bot", "archive", "records")
MAIL_DOMAINS = ("example.com", "example.net", "example.org", "mailbox.test")
URL_HOSTS = ("cdn-assets", "login-verify", "stats", "travel-deals", "docs-share", "img-cache")


@dataclass(frozen=True)
class Plan:
    """How many pairs and solo rows one language gets, and the per-pair extras."""

    pairs: int
    solo_manipulation: int  # per manipulation kind
    solo_lookalike: int  # per look-alike kind
    extra_judging: float = 0.5
    extra_neutral: float = 0.3
    wrapped: float = 0.3
    exchange: float = 0.5


PLANS: dict[str, Plan] = {"en": Plan(pairs=640, solo_manipulation=60, solo_lookalike=70)}
DEFAULT_PLAN = Plan(pairs=95, solo_manipulation=10, solo_lookalike=12)


class Deck(Generic[T]):
    """Draws items in seeded shuffled rounds, so that every item comes up evenly."""

    def __init__(self, items: Sequence[T], rng: random.Random) -> None:
        if not items:
            raise ValueError("empty deck")
        self._items = list(items)
        self._rng = rng
        self._pool: list[T] = []

    def draw(self) -> T:
        if not self._pool:
            self._pool = list(self._items)
            self._rng.shuffle(self._pool)
        return self._pool.pop()


@dataclass
class Row:
    """One corpus row plus what the split rule needs (its families and group concept)."""

    text: str
    label: str
    kind: str
    lang: str
    register: str
    family: str
    families: tuple[str, ...]
    concept: str | None = None
    domain: str | None = None
    group: str = ""
    trait: str = ""
    tendency: str | None = None
    manipulation: bool = False
    pair_id: str | None = None
    turns: list[dict[str, str]] | None = None
    biased_speaker: str | None = None
    split: str = "train"


@dataclass
class Pair:
    lang: str
    split: str
    domain: str
    group: Group
    trait: Trait
    pair_id: str
    rows: list[Row] = field(default_factory=list)


def _split_of(key: str, dev: set[str]) -> str:
    return "dev" if key in dev else "train"


class Builder:
    """Builds every row of the corpus from ``data`` with one seeded RNG."""

    def __init__(self, data: TemplateData, seed: int) -> None:
        self.data = data
        self.rng = random.Random(seed)
        self.dev_families: set[str] = set()
        self.dev_concepts: set[str] = set()
        self._decks: dict[tuple[object, ...], Deck[Any]] = {}
        self._seen: set[str] = set()
        self._choose_dev()

    # -- split ---------------------------------------------------------------------------
    def _choose_dev(self) -> None:
        for lang in self.data.languages:
            pack = self.data.packs[lang]
            for kind in sorted(pack.families):
                for has_group in (False, True):
                    fids = sorted(f.fid for f in pack.families[kind] if f.has_group == has_group)
                    if len(fids) >= 2:
                        k = max(1, round(DEV_SHARE * len(fids)))
                        self.dev_families.update(self.rng.sample(fids, k))
        for domain in DOMAINS:
            ids = list(self.data.concepts[domain])
            k = max(1, round(DEV_SHARE * len(ids)))
            self.dev_concepts.update(f"{domain}/{c}" for c in self.rng.sample(ids, k))

    def pool(self, lang: str, kind: str, has_group: bool, split: str) -> list[Family]:
        return [
            f
            for f in self.data.packs[lang].families[kind]
            if f.has_group == has_group and _split_of(f.fid, self.dev_families) == split
        ]

    # -- decks ---------------------------------------------------------------------------
    def draw(self, key: tuple[object, ...], items: Sequence[T]) -> T:
        deck = self._decks.get(key)
        if deck is None:
            deck = Deck[Any](list(items), self.rng)
            self._decks[key] = deck
        item: T = deck.draw()
        return item

    def family(self, lang: str, kind: str, has_group: bool, split: str) -> Family:
        return self.draw(
            ("family", lang, kind, has_group, split), self.pool(lang, kind, has_group, split)
        )

    def values(self, lang: str, domain: str | None) -> dict[str, str]:
        pack, rng = self.data.packs[lang], self.rng
        dom = domain or DOMAINS[rng.randrange(len(DOMAINS))]
        digits = " ".join(f"{rng.randrange(10000):04d}" for _ in range(4))
        return {
            "NAME": rng.choice(pack.names),
            "CITY": rng.choice(pack.cities),
            "PCT": str(rng.randint(8, 74)),
            "YEAR": str(rng.randint(2009, 2023)),
            "NUM": str(rng.randint(40, 4800)),
            "DOMAIN": pack.domain_names[dom],
            "DOMAIN.code": dom,
            "IBAN": f"{IBAN_COUNTRIES[lang]}{rng.randint(10, 99)} {digits} {rng.randint(10, 99)}",
            "EMAIL": f"{rng.choice(MAIL_USERS)}{rng.randint(1, 99)}@{rng.choice(MAIL_DOMAINS)}",
            "URL": f"https://{rng.choice(URL_HOSTS)}.example.{rng.choice(('com', 'net', 'org'))}",
        }

    # -- registers -----------------------------------------------------------------------
    def styled(self, lang: str, text: str, family: Family, spans: Sequence[str]) -> tuple[str, str]:
        choice = self.draw(("register", lang), REGISTER_DECK)
        if choice == "typo":
            return add_typos(text, spans, self.rng), "typo"
        if choice == "fragment":
            return fragment(text), "fragment"
        if choice == "long_mixed":
            return bury(text, self.data.packs[lang].filler, self.rng, lang), "long_mixed"
        return text, family.register

    def fresh(self, text: str) -> bool:
        if text in self._seen:
            return False
        self._seen.add(text)
        return True

    # -- pair rows -----------------------------------------------------------------------
    def render(self, pair: Pair, family: Family, base: str | None = None) -> Filled:
        template = family.templates[self.rng.randrange(len(family.templates))]
        group = pair.group if family.has_group else None
        trait = pair.trait if family.has_group else None
        return fill(
            template,
            group=group,
            trait=trait,
            values=self.values(pair.lang, pair.domain),
            base=base,
        )

    def group_row(self, pair: Pair, shape: str, kind: str, label: str) -> Row | None:
        for _ in range(6):
            family = self.family(pair.lang, shape, True, pair.split)
            filled = self.render(pair, family)
            spans = [s for s in (filled.group_span, filled.trait_span) if s]
            text, register = self.styled(pair.lang, filled.text, family, spans)
            if self.fresh(text):
                return self.finish(
                    pair,
                    Row(text, label, kind, pair.lang, register, family.fid, (family.fid,)),
                    filled,
                )
        return None

    def finish(self, pair: Pair, row: Row, filled: Filled) -> Row:
        row.concept, row.domain, row.pair_id = pair.group.concept, pair.domain, pair.pair_id
        row.group = locate(row.text, filled.group_span or "") or ""
        row.trait = locate(row.text, filled.trait_span or "") or ""
        if not row.group:
            row.concept, row.domain, row.trait = None, None, ""
        row.tendency = pair.trait.tendency if row.trait else None
        return row

    def judging_shape(self, pair: Pair) -> tuple[str, str]:
        if pair.trait.tendency == "positive":
            return self.draw(("pos-shape", pair.lang, pair.split), POS_SHAPES), "benevolent"
        kind = self.draw(("neg-kind", pair.lang, pair.split), NEG_JUDGING)
        return kind, kind

    def neutral_kinds(self, pair: Pair) -> tuple[str, ...]:
        kinds: tuple[str, ...] = NON_JUDGING
        if self.pool(pair.lang, "topic_talk", True, pair.split):
            kinds = (*kinds, "topic_talk")
        return kinds

    def build_pair(self, lang: str, split: str, number: int) -> Pair:
        domain = self.draw(("domain", lang, split), DOMAINS)
        concepts = [
            c
            for c in self.data.concepts[domain]
            if _split_of(f"{domain}/{c}", self.dev_concepts) == split
        ]
        concept = self.draw(("concept", lang, domain, split), concepts)
        tendency = self.draw(("tendency", lang), ("positive", "negative", "negative", "negative"))
        trait = self.draw(
            ("trait", lang, domain, tendency), self.data.traits[(lang, domain, tendency)]
        )
        group = self.data.groups[(lang, domain, concept)]
        pair = Pair(lang, split, domain, group, trait, f"jc1-{lang}-p{number:04d}")
        plan = PLANS.get(lang, DEFAULT_PLAN)
        n_judging = 2 + (self.rng.random() < plan.extra_judging)
        n_neutral = 2 + (self.rng.random() < plan.extra_neutral)
        for _ in range(n_judging):
            shape, kind = self.judging_shape(pair)
            self._add(pair, self.group_row(pair, shape, kind, "biased"))
        neutral = self.neutral_kinds(pair)
        picked: list[str] = []
        while len(picked) < n_neutral:
            kind = self.draw(("neutral-kind", lang, split), neutral)
            if kind not in picked:
                picked.append(kind)
        for kind in picked:
            self._add(pair, self.group_row(pair, kind, kind, "neutral"))
        if self.rng.random() < plan.wrapped:
            self._add(pair, self.wrapped(pair))
        if self.rng.random() < plan.exchange:
            self._add(pair, self.exchange(pair))
        return pair

    @staticmethod
    def _add(pair: Pair, row: Row | None) -> None:
        if row is not None:
            pair.rows.append(row)

    # -- manipulation wrapped around a pair row -----------------------------------------------
    def compose(self, lang: str, payload_family: Family, base: str, values: dict[str, str]) -> str:
        """``base`` with a manipulation payload inside ({BASE}), after it or before it."""
        template = payload_family.templates[self.rng.randrange(len(payload_family.templates))]
        if "{BASE}" in template:
            return fill(template, group=None, trait=None, values=values, base=base).text
        payload = fill(template, group=None, trait=None, values=values).text
        inline = "" if lang in NO_SPACE_LANGS else " "
        sep = "\n" if self.rng.random() < 0.6 or "\n" in payload else inline
        if self.rng.random() < 0.7:
            return end_sentence(base, lang) + sep + payload
        return end_sentence(payload, lang) + sep + base

    def wrapped(self, pair: Pair) -> Row | None:
        mkind = self.draw(("wrap-kind", pair.lang, pair.split), MANIPULATION)
        biased = self.draw(("wrap-label", pair.lang), (True, False))
        payload = self.family(pair.lang, mkind, False, pair.split)
        if payload.neutral_base_only:
            biased = False
        if biased:
            shape = self.judging_shape(pair)[0]
        else:
            shape = self.draw(("wrap-neutral", pair.lang), NON_JUDGING)
        family = self.family(pair.lang, shape, True, pair.split)
        filled = self.render(pair, family)
        values = self.values(pair.lang, pair.domain)
        text = self.compose(pair.lang, payload, filled.text, values)
        spans = [s for s in (filled.group_span, filled.trait_span) if s]
        text, register = self.styled(pair.lang, text, payload, spans)
        if not self.fresh(text):
            return None
        label = "biased" if biased else "neutral"
        families = (payload.fid, family.fid)
        row = Row(text, label, mkind, pair.lang, register, payload.fid, families)
        row.manipulation = True
        return self.finish(pair, row, filled)

    # -- exchanges -------------------------------------------------------------------------
    def exchange(self, pair: Pair) -> Row | None:
        etype = self.draw(("exchange", pair.lang, pair.split), EXCHANGE_TYPES)
        lang, split = pair.lang, pair.split
        if etype in ("judge_pushback", "judge_agree"):
            shape, kind = self.judging_shape(pair)
            if shape == "treatment" or shape == "fiction_endorsed":
                shape = kind = "generalisation"
            user = self.family(lang, shape, True, split)
            role = "asst_pushback" if etype == "judge_pushback" else "asst_agree"
            label, speaker = "biased", "user" if etype == "judge_pushback" else "both"
        elif etype == "asst_generalises":
            user = self.family(lang, "user_question", True, split)
            role, label, speaker = "asst_generalise", "biased", "assistant"
            kind = "benevolent" if pair.trait.tendency == "positive" else "generalisation"
        elif etype == "question_neutral":
            user = self.family(lang, "user_question", True, split)
            role, label, speaker, kind = "asst_neutral", "neutral", "none", "question"
        else:
            user = self.family(lang, "rejected", True, split)
            role, label, speaker, kind = "asst_neutral", "neutral", "none", "rejected"
        assistant = self.family(lang, role, True, split)
        u, a = self.render(pair, user), self.render(pair, assistant)
        text = "User: " + u.text + "\nAssistant: " + a.text
        if not self.fresh(text):
            return None
        family_id = f"{assistant.fid}+{user.fid}"
        row = Row(text, label, kind, lang, user.register, family_id, (user.fid, assistant.fid))
        row.turns = [{"speaker": "user", "text": u.text}, {"speaker": "assistant", "text": a.text}]
        row.biased_speaker = speaker
        return self.finish(pair, row, u)

    # -- solo rows -------------------------------------------------------------------------
    def solo(self, lang: str, kind: str, split: str) -> Row | None:
        pack = self.data.packs[lang]
        for _ in range(6):
            family = self.family(lang, kind, False, split)
            values = self.values(lang, None)
            if kind in MANIPULATION and self.rng.random() < 0.6:
                base = pack.filler[self.rng.randrange(len(pack.filler))]
                text = self.compose(lang, family, base, values)
            else:
                template = family.templates[self.rng.randrange(len(family.templates))]
                if "{BASE}" in template:
                    template = template.replace(
                        "{BASE}", pack.filler[self.rng.randrange(len(pack.filler))]
                    )
                text = fill(template, group=None, trait=None, values=values).text
            text, register = self.styled(lang, text, family, ())
            if self.fresh(text):
                row = Row(text, "neutral", kind, lang, register, family.fid, (family.fid,))
                row.manipulation = kind in MANIPULATION
                return row
        return None

    # -- all -------------------------------------------------------------------------------
    def build(self) -> list[Row]:
        rows: list[Row] = []
        for lang in self.data.languages:
            plan = PLANS.get(lang, DEFAULT_PLAN)
            split_deck = ("dev",) + ("train",) * 5
            for number in range(1, plan.pairs + 1):
                split = self.draw(("pair-split", lang), split_deck)
                pair = self.build_pair(lang, split, number)
                if _pair_ok(pair.rows):
                    rows.extend(pair.rows)
            solo_kinds = [k for k in MANIPULATION for _ in range(plan.solo_manipulation)]
            solo_kinds += [k for k in LOOKALIKE for _ in range(plan.solo_lookalike)]
            for kind in solo_kinds:
                split = self.draw(("solo-split", lang, kind), split_deck)
                row = self.solo(lang, kind, split)
                if row is not None:
                    rows.append(row)
        return self.apply_split(rows)

    def apply_split(self, rows: list[Row]) -> list[Row]:
        """The split rule: dev if a family or the group is dev-held; drop mixed rows."""
        kept: list[Row] = []
        for row in rows:
            family_dev = any(f in self.dev_families for f in row.families)
            family_train = any(f not in self.dev_families for f in row.families)
            if family_dev and family_train:
                continue
            if row.concept is not None and row.domain is not None:
                group_dev = f"{row.domain}/{row.concept}" in self.dev_concepts
                if group_dev != family_dev:
                    continue
            row.split = "dev" if family_dev else "train"
            kept.append(row)
        return kept


def _pair_ok(rows: Sequence[Row]) -> bool:
    judging = any(r.label == "biased" and r.group and r.kind in JUDGING for r in rows)
    mention = any(r.label == "neutral" and r.group and r.kind in NON_JUDGING for r in rows)
    return judging and mention
