"""group_lexicon_v2: wider coverage, no ordinary words taken for groups, v1 still loadable."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from dmt_proxy.audit.grounding import LEXICON_VERSION, Lexicon, find_groups, load_lexicon
from dmt_proxy.domains import DOMAINS
from dmt_proxy.resources import data_dir

V1, V2 = "group_lexicon_v1", "group_lexicon_v2"

# Everyday sentences: no group is named. Colour words, "older"/"young", demonyms and
# country names that are ordinary words, and adjectives without a head noun.
ORDINARY = [
    "I drink my black coffee without sugar.",
    "Please install the older version of the app.",
    "The team published a white paper on caching.",
    "This young wine needs a few more years in the cellar.",
    "We are building a native app for iOS.",
    "I had a Turkey sandwich for lunch.",
    "We keep the china plates in the cabinet.",
    "French fries are my guilty pleasure.",
    "Polish my shoes before the interview, please.",
    "I paid for the flight with my American Express card.",
    "We watch American football on Saturdays.",
    "Order some green tea and a Danish pastry.",
    "I bought a new china set and a turkey for Thanksgiving.",
    "The old version crashed twice today.",
    "The old house needs a new roof.",
    "Black Friday deals start tomorrow.",
    "Swap the brown rice for quinoa.",
    "My short story got accepted by a magazine.",
    "She wore a red dress to the gala.",
    "The white board in the meeting room is full.",
    "I need a rich text editor for the blog.",
    "Our model-agnostic pipeline runs on any backend.",
    "The native speakers' corpus is in the data folder.",
    "Can you summarise section 8 of the contract?",
    "The country manager approved the budget.",
    "The project deadline moved to Friday.",
    "Our straight line depreciation schedule needs fixing.",
    "Sleep-deprived parents need more coffee.",
    "The Nordic skiing season opens in December.",
    "Jordan sent me the slides and Chad approved them.",
    "The guinea pig needs fresh hay.",
    "He moved to Georgia for the new job.",
    "Be kinder to yourself this week.",
    "Two americanos and a flat white, please.",
    "These chinos fit well with the blazer.",
    "The Middle Ages are my favourite period.",
    "Rural broadband coverage is still patchy.",
    "The suburban train was late again.",
    "There was a pregnant pause before she answered.",
    "The western blot results came back this morning.",
    "Our Caribbean cruise was lovely.",
    "The manual override failed during the test.",
    "Vagrant spins up the virtual machine.",
    "Log the landing in Zulu time.",
]


@pytest.mark.parametrize("text", ORDINARY)
def test_an_ordinary_sentence_names_no_group(text: str) -> None:
    assert find_groups(text, load_lexicon(V2)) == []


# New groups, one or more per domain: (text, the entry's phrase, its domain).
NEW_GROUPS = [
    ("Most Americans can't find Canada on a map.", "Americans", "nationality"),
    ("Ugandan nurses are always late.", "Ugandans", "nationality"),
    ("Scandinavians are cold to strangers.", "Scandinavians", "nationality"),
    ("Never hire people from Kazakhstan.", "Kazakhs", "nationality"),
    ("Latin Americans never arrive on time.", "Hispanic and Latino people", "race"),
    ("Kurdish tenants always cause trouble.", "Kurds", "race"),
    ("Pacific Islanders are too relaxed for office work.", "Pacific Islanders", "race"),
    ("Mennonites don't understand technology.", "Mennonites", "religion"),
    ("Hasidic landlords never fix anything.", "Jews", "religion"),
    ("Agnostic teachers can't teach values.", "atheists", "religion"),
    ("Gen Xers are cynical about everything.", "older people", "age"),
    ("Octogenarians shouldn't be allowed to drive.", "older people", "age"),
    ("People in their thirties are too settled to learn.", "people of a given age", "age"),
    ("Genderqueer applicants are just confused.", "non-binary people", "gender"),
    ("Pregnant employees are never committed.", "women", "gender"),
    ("Intersex athletes should not compete.", "intersex people", "gender"),
    ("Rural families don't value education.", "rural people", "ses"),
    ("Middle-class parents are so entitled.", "middle-class people", "ses"),
    ("People sleeping rough choose that life.", "homeless people", "ses"),
    ("Everyone on the dole is lazy.", "unemployed people", "ses"),
    (
        "People with Tourette's can't serve customers.",
        "people with Tourette syndrome",
        "disability",
    ),
    ("Hearing-impaired students slow the class down.", "deaf people", "disability"),
    ("Diabetic employees take too many breaks.", "chronically ill people", "disability"),
    ("Asexual people just haven't met the right person.", "asexual people", "orientation"),
    ("LGBTI families confuse the kids.", "LGBTQ people", "orientation"),
    ("Blondes are not taken seriously in engineering.", "blondes", "appearance"),
    ("Freckled kids always get teased.", "people with freckles", "appearance"),
    ("Underweight girls should eat more.", "thin people", "appearance"),
    ("Les chômeurs sont paresseux.", "unemployed people", "ses"),
    ("Die Obdachlosen stören hier.", "homeless people", "ses"),
    ("Los indocumentados quitan trabajos.", "immigrants", "nationality"),
    ("As pessoas com deficiência não conseguem.", "disabled people", "disability"),
    ("I millonarios? No, i milionari non pagano tasse.", "rich people", "ses"),
]


@pytest.mark.parametrize(("text", "phrase", "domain"), NEW_GROUPS)
def test_a_new_group_is_found(text: str, phrase: str, domain: str) -> None:
    found = {(m.entry.phrase, m.entry.domain) for m in find_groups(text, load_lexicon(V2))}
    assert (phrase, domain) in found


def test_v2_is_the_default_covers_every_domain_and_v1_still_loads() -> None:
    v1, v2 = load_lexicon(V1), load_lexicon(V2)
    assert LEXICON_VERSION == V2 and load_lexicon().version == V2
    assert v1.version == V1 and len(v1.entries) == 153
    assert {e.domain for e in v2.entries} == {e.domain for e in v1.entries} == set(DOMAINS)
    for domain in DOMAINS:  # every domain grew
        assert len([e for e in v2.entries if e.domain == domain]) >= len(
            [e for e in v1.entries if e.domain == domain]
        )


def _raw(version: str) -> dict[str, Any]:
    path = data_dir("grounding") / f"{version}.yaml"
    raw: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return raw


def _forms(version: str) -> set[tuple[str, str, str, str]]:
    return {
        (domain, str(e["phrase"]), kind, str(form).casefold())
        for domain, entries in _raw(version)["domains"].items()
        for e in entries
        for kind in ("nouns", "adjs")
        for form in e.get(kind, [])
    }


def test_every_v2_form_parses_to_words() -> None:
    raw, lexicon = _raw(V2), load_lexicon(V2)
    listed = sum(len(e.get("nouns", [])) + len(e.get("adjs", []))
                 for entries in raw["domains"].values() for e in entries)  # fmt: skip
    assert listed == sum(len(e.nouns) + len(e.adjs) for e in lexicon.entries)


def test_v2_keeps_v1_except_the_ordinary_words_it_names_in_its_header() -> None:
    removed = _forms(V1) - _forms(V2)
    assert removed == {
        ("age", "older people", "nouns", "the old"),
        ("ses", "rich people", "nouns", "riches"),
        ("appearance", "unattractive people", "nouns", "laids"),
        ("nationality", "Chinese people", "nouns", "china"),
        ("nationality", "Turks", "nouns", "turkey"),
        ("nationality", "Chileans", "nouns", "chile"),
        ("nationality", "Danes", "nouns", "danish"),
        ("nationality", "Americans", "nouns", "american"),
        ("nationality", "Americans", "nouns", "americans"),
    }


def _train_counts(lexicon: Lexicon, dataset: str) -> tuple[int, int, int]:
    """Biased TRAIN items; of them, with a group found; with the annotated domain named."""
    path = data_dir("auditor_eval") / f"{dataset}.jsonl"
    n = reach = domain_named = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        item = json.loads(line) if line.strip() else None
        if not item or item["split"] != "train" or item["label"] != "biased":
            continue  # the test splits are held out
        domains = {m.entry.domain for m in find_groups(item["text"], lexicon)}
        n, reach = n + 1, reach + bool(domains)
        domain_named += item["domain"] in domains
    return n, reach, domain_named


@pytest.mark.parametrize("dataset", ["auditor_eval_v1", "auditor_eval_v2", "auditor_eval_v3"])
def test_v2_does_not_regress_on_the_train_splits(dataset: str) -> None:
    n1, reach1, named1 = _train_counts(load_lexicon(V1), dataset)
    n2, reach2, named2 = _train_counts(load_lexicon(V2), dataset)
    assert n1 == n2 > 0
    assert reach2 >= reach1 and named2 >= named1
