"""Load and check the YAML template data of judgment_corpus_v1.

The data lives in ``dmt_proxy/data/judgment_corpus/templates/``: ``groups.yaml`` (group
concepts per domain with one surface form per language, traits per domain and language)
and one ``frames_<lang>.yaml`` per language (frame families per kind, exchange roles,
filler chat, names). Everything here is returned in sorted, immutable form so that the
generator never depends on mapping order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dmt_proxy.resources import data_dir

VERSION = "judgment_corpus_v1"
TEMPLATE_DIR = data_dir("judgment_corpus") / "templates"

DOMAINS = (
    "age",
    "gender",
    "race",
    "religion",
    "nationality",
    "disability",
    "appearance",
    "orientation",
    "ses",
)
JUDGING = ("generalisation", "treatment", "endorsed_report", "benevolent", "fiction_endorsed")
NON_JUDGING = (
    "fact",
    "law",
    "research",
    "support",
    "self",
    "rejected",
    "question",
    "fiction_unendorsed",
    "individual",
)
MANIPULATION = ("planted_verdict", "auditor_instruction", "agent_instruction")
LOOKALIKE = ("user_request", "topic_talk")
KINDS = JUDGING + NON_JUDGING + MANIPULATION + LOOKALIKE
EXCHANGE_ROLES = ("user_question", "asst_pushback", "asst_agree", "asst_generalise", "asst_neutral")
REGISTERS = ("formal", "chat")

SLOT = re.compile(r"\{([A-Z]+)(?:\.([a-z_]+))?\}")
VALUE_SLOTS = frozenset(
    {"NAME", "CITY", "PCT", "YEAR", "NUM", "DOMAIN", "IBAN", "EMAIL", "URL", "BASE"}
)

# Inflected group forms given as "a|b|..." in groups.yaml, by language.
GROUP_FORMS: dict[str, tuple[str, ...]] = {
    "de": ("nom", "dat"),
    "ru": ("nom", "gen", "dat", "ins", "prep"),
    "ar": ("nom", "obl"),
}
# Trait forms given as "a|b|..." in groups.yaml, by language.
TRAIT_FORMS: dict[str, tuple[str, ...]] = {"de": ("pl", "sg", "sub"), "ar": ("pl", "sg", "pl_f")}
DEFAULT_TRAIT_FORMS = ("pl", "sg")
# Article + preposition forms that the generator derives for es/pt bare plurals: form name ->
# (masculine, feminine) prefix.
ARTICLE_FORMS: dict[str, dict[str, tuple[str, str]]] = {
    "es": {
        "": ("los", "las"),
        "de": ("de los", "de las"),
        "a": ("a los", "a las"),
        "con": ("con los", "con las"),
        "en": ("en los", "en las"),
        "para": ("para los", "para las"),
        "sobre": ("sobre los", "sobre las"),
    },
    "pt": {
        "": ("os", "as"),
        "de": ("dos", "das"),
        "a": ("aos", "às"),
        "em": ("nos", "nas"),
        "por": ("pelos", "pelas"),
        "com": ("com os", "com as"),
        "para": ("para os", "para as"),
        "sobre": ("sobre os", "sobre as"),
    },
}


@dataclass(frozen=True)
class Group:
    """One group concept in one language: its forms as (rendered text, span to report)."""

    concept: str
    domain: str
    lang: str
    feminine: bool
    forms: dict[str, tuple[str, str]]

    def form(self, name: str) -> tuple[str, str]:
        if name not in self.forms:
            raise ValueError(f"group form {name!r} unknown in {self.lang}")
        return self.forms[name]


@dataclass(frozen=True)
class Trait:
    """One trait predicate in one language, with its polarity."""

    domain: str
    lang: str
    tendency: str  # "negative" | "positive"
    forms: dict[str, str]

    def form(self, name: str, *, feminine: bool) -> str:
        if name == "":
            if feminine and "pl_f" in self.forms:
                return self.forms["pl_f"]
            return self.forms["pl"]
        if name == "sub" and "sub" not in self.forms:
            return self.forms["pl"]
        if name not in self.forms:
            raise ValueError(f"trait form {name!r} unknown in {self.lang}")
        return self.forms[name]


@dataclass(frozen=True)
class Family:
    """A frame family: templates of one kind (or exchange role) sharing one wording."""

    fid: str
    lang: str
    kind: str
    name: str
    register: str
    templates: tuple[str, ...]
    has_group: bool
    neutral_base_only: bool


@dataclass(frozen=True)
class LanguagePack:
    """Everything language-specific except groups and traits."""

    lang: str
    names: tuple[str, ...]
    cities: tuple[str, ...]
    domain_names: dict[str, str]
    filler: tuple[str, ...]
    families: dict[str, tuple[Family, ...]]  # kind or exchange role -> families by fid


@dataclass(frozen=True)
class TemplateData:
    languages: tuple[str, ...]
    concepts: dict[str, tuple[str, ...]]  # domain -> concept ids, sorted
    groups: dict[tuple[str, str, str], Group]  # (lang, domain, concept)
    traits: dict[tuple[str, str, str], tuple[Trait, ...]]  # (lang, domain, tendency)
    packs: dict[str, LanguagePack]


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected a mapping")
    return value


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where}: expected a non-empty list of strings")
    return tuple(value)


def _read(path: Path) -> dict[str, Any]:
    data = _mapping(yaml.safe_load(path.read_text(encoding="utf-8")), str(path))
    if data.get("version") != VERSION:
        raise ValueError(f"{path}: version must be {VERSION}")
    return data


def parse_group(raw: str, *, concept: str, domain: str, lang: str) -> Group:
    """A group entry of groups.yaml ("f:" prefix, "|"-separated forms) as a Group."""
    feminine = raw.startswith("f:")
    text = raw[2:] if raw[:2] in ("f:", "m:") else raw
    forms: dict[str, tuple[str, str]] = {}
    if lang in ARTICLE_FORMS:
        for name, (masc, fem) in ARTICLE_FORMS[lang].items():
            forms[name] = (f"{fem if feminine else masc} {text}", text)
        forms["bare"] = (text, text)
    else:
        parts = text.split("|")
        names = GROUP_FORMS.get(lang, ("nom",))
        if len(parts) > len(names):
            raise ValueError(f"group {concept}/{lang}: too many forms")
        for i, name in enumerate(names):
            part = parts[i] if i < len(parts) else parts[0]
            forms[name] = (part, part)
        forms[""] = forms["nom"]
        forms["acc"] = forms["gen"] if lang == "ru" else forms["nom"]
    return Group(concept, domain, lang, feminine, forms)


def parse_trait(raw: str, *, domain: str, lang: str, tendency: str) -> Trait:
    parts = raw.split("|")
    names = TRAIT_FORMS.get(lang, DEFAULT_TRAIT_FORMS)
    if len(parts) > len(names):
        raise ValueError(f"trait {raw!r} ({lang}): too many forms")
    forms = {name: parts[i] if i < len(parts) else parts[0] for i, name in enumerate(names)}
    return Trait(domain, lang, tendency, forms)


def _family(lang: str, kind: str, name: str, raw: Any) -> Family:
    where = f"frames_{lang}: {kind}.{name}"
    spec = _mapping(raw, where)
    register = spec.get("register")
    if register not in REGISTERS:
        raise ValueError(f"{where}: register must be one of {REGISTERS}")
    templates = _strings(spec.get("templates"), where)
    with_group = {any(m.group(1) == "G" for m in SLOT.finditer(t)) for t in templates}
    if len(with_group) != 1:
        raise ValueError(f"{where}: either every template names {{G}} or none does")
    base = spec.get("base", "any")
    if base not in ("any", "neutral"):
        raise ValueError(f"{where}: base must be any or neutral")
    return Family(
        fid=f"{lang}.{kind}.{name}",
        lang=lang,
        kind=kind,
        name=name,
        register=str(register),
        templates=templates,
        has_group=with_group.pop(),
        neutral_base_only=base == "neutral",
    )


def _families(
    lang: str, section: dict[str, Any], wanted: tuple[str, ...], minimum: int
) -> dict[str, tuple[Family, ...]]:
    out: dict[str, tuple[Family, ...]] = {}
    for kind in wanted:
        fams = _mapping(section.get(kind), f"frames_{lang}: {kind}")
        built = tuple(sorted((_family(lang, kind, n, f) for n, f in fams.items()), key=_fid))
        if len(built) < minimum:
            raise ValueError(f"frames_{lang}: {kind} needs at least {minimum} families")
        out[kind] = built
    extra = sorted(set(section) - set(wanted))
    if extra:
        raise ValueError(f"frames_{lang}: unknown kinds {extra}")
    return out


def _fid(family: Family) -> str:
    return family.fid


def load_pack(path: Path, lang: str) -> LanguagePack:
    data = _read(path)
    if data.get("language") != lang:
        raise ValueError(f"{path}: language must be {lang}")
    names = _mapping(data.get("domain_names"), f"{path}: domain_names")
    if sorted(names) != sorted(DOMAINS):
        raise ValueError(f"{path}: domain_names must name every domain")
    families = _families(lang, _mapping(data.get("kinds"), f"{path}: kinds"), KINDS, 3)
    families.update(
        _families(lang, _mapping(data.get("exchange"), f"{path}: exchange"), EXCHANGE_ROLES, 2)
    )
    return LanguagePack(
        lang=lang,
        names=_strings(data.get("names"), f"{path}: names"),
        cities=_strings(data.get("cities"), f"{path}: cities"),
        domain_names={k: str(v) for k, v in sorted(names.items())},
        filler=_strings(data.get("filler"), f"{path}: filler"),
        families=families,
    )


def load(root: Path = TEMPLATE_DIR) -> TemplateData:
    """Read and check all template data under ``root``."""
    base = _read(root / "groups.yaml")
    languages = _strings(base.get("languages"), "groups.yaml: languages")
    raw_groups = _mapping(base.get("groups"), "groups.yaml: groups")
    raw_traits = _mapping(base.get("traits"), "groups.yaml: traits")
    concepts: dict[str, tuple[str, ...]] = {}
    groups: dict[tuple[str, str, str], Group] = {}
    traits: dict[tuple[str, str, str], tuple[Trait, ...]] = {}
    for domain in DOMAINS:
        by_concept = _mapping(raw_groups.get(domain), f"groups.yaml: groups.{domain}")
        concepts[domain] = tuple(sorted(by_concept))
        for concept in concepts[domain]:
            forms = _mapping(by_concept[concept], f"groups.yaml: {domain}.{concept}")
            for lang in languages:
                if not isinstance(forms.get(lang), str):
                    raise ValueError(f"groups.yaml: {domain}.{concept} lacks {lang}")
                groups[(lang, domain, concept)] = parse_group(
                    forms[lang], concept=concept, domain=domain, lang=lang
                )
        by_lang = _mapping(raw_traits.get(domain), f"groups.yaml: traits.{domain}")
        for lang in languages:
            spec = _mapping(by_lang.get(lang), f"groups.yaml: traits.{domain}.{lang}")
            for key, tendency in (("neg", "negative"), ("pos", "positive")):
                raw = _strings(spec.get(key), f"groups.yaml: traits.{domain}.{lang}.{key}")
                traits[(lang, domain, tendency)] = tuple(
                    parse_trait(r, domain=domain, lang=lang, tendency=tendency) for r in raw
                )
    packs = {lang: load_pack(root / f"frames_{lang}.yaml", lang) for lang in languages}
    data = TemplateData(languages, concepts, groups, traits, packs)
    check_slots(data)
    return data


def check_slots(data: TemplateData) -> None:
    """Every slot of every template names a known value or an existing form."""
    for lang in data.languages:
        group = data.groups[(lang, DOMAINS[0], data.concepts[DOMAINS[0]][0])]
        trait = data.traits[(lang, DOMAINS[0], "negative")][0]
        for families in data.packs[lang].families.values():
            for family in families:
                for template in family.templates:
                    for match in SLOT.finditer(template):
                        name, form = match.group(1), match.group(2) or ""
                        if name == "G":
                            group.form(form)
                        elif name == "T":
                            trait.form(form, feminine=False)
                        elif name not in VALUE_SLOTS or (form and form != "code"):
                            raise ValueError(f"{family.fid}: unknown slot {match.group(0)}")
