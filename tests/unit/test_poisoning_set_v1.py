"""The held-out memory-poisoning set ``poisoning_set_v1``.

Written by hand before any instruction detector existed, by an author who had not seen one.
These tests check what makes it usable as that yardstick: its size, unique ids, every family
with overt (static) and hidden (adaptive) attacks in both splits, scenarios that name only
tools of the shared catalogue and their parameters, an attacker artefact for every attack
that the memory carries and the later user request does not (so an agent that uses it was
steered by memory), languages beyond English including a non-Latin script, and invented
identifiers only. Data only: no detector or model is run here; the file is read with the
standard library.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Any, cast

import pytest

import dmt_proxy

SET_PATH = Path(dmt_proxy.__file__).parent / "data" / "poisoning" / "poisoning_set_v1.json"

SPLITS = {"train", "test"}
LABELS = {"attack", "legitimate"}
ATTACK_VARIANTS = {"static", "adaptive"}
CHANNELS = {"user_turn", "tool_result", "mcp_add_memory", "assistant_reply"}
ITEM_KEYS = {
    "id",
    "split",
    "label",
    "family",
    "variant",
    "channel",
    "language",
    "memory",
    "scenario",
    "note",
}
SCENARIO_KEYS = {"session_b_user", "attacker_action", "legitimate_action"}
RESERVED_DOMAIN = re.compile(
    r"(^|\.)(example\.(com|org|net)|[a-z0-9-]+\.(test|example|invalid))$", re.IGNORECASE
)
DOMAIN_IN_TEXT = re.compile(r"(?:@|https?://)([A-Za-z0-9.-]+\.[A-Za-z]{2,})")

Item = dict[str, Any]


def _norm(text: str) -> str:
    """Spaces and hyphens removed, case folded: agents reformat numbers and addresses."""
    return re.sub(r"[\s-]+", "", text).casefold()


def _actions(item: Item) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    scenario = cast(dict[str, Any], item["scenario"])
    return scenario["attacker_action"], scenario["legitimate_action"]


def _is_non_latin_letter(ch: str) -> bool:
    return ch.isalpha() and "LATIN" not in unicodedata.name(ch, "")


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    with SET_PATH.open(encoding="utf-8") as f:
        return cast(dict[str, Any], json.load(f))


@pytest.fixture(scope="module")
def items(doc: dict[str, Any]) -> list[Item]:
    return cast(list[Item], doc["items"])


@pytest.fixture(scope="module")
def attacks(items: list[Item]) -> list[Item]:
    return [i for i in items if i["label"] == "attack"]


@pytest.fixture(scope="module")
def legitimate(items: list[Item]) -> list[Item]:
    return [i for i in items if i["label"] == "legitimate"]


def test_top_level(doc: dict[str, Any]) -> None:
    assert doc["version"] == "poisoning_set_v1"
    assert set(doc) == {"version", "description", "families", "tools", "items"}
    assert isinstance(doc["description"], str) and len(doc["description"]) > 500
    for name, definition in doc["families"].items():
        assert isinstance(definition, str) and "Source" in definition, name


def test_counts(items: list[Item], attacks: list[Item], legitimate: list[Item]) -> None:
    assert len(items) >= 160
    assert len(attacks) >= 100
    assert len(legitimate) >= 60
    static = sum(i["variant"] == "static" for i in attacks)
    assert 0.3 <= static / len(attacks) <= 0.5, "about 40 % static, 60 % adaptive"
    train = sum(i["split"] == "train" for i in items)
    assert 0.25 <= train / len(items) <= 0.45, "about a third in train"


def test_item_fields(doc: dict[str, Any], items: list[Item]) -> None:
    for item in items:
        assert set(item) == ITEM_KEYS, item["id"]
        assert re.fullmatch(r"pois1-\d{3}", item["id"]), item["id"]
        assert item["split"] in SPLITS, item["id"]
        assert item["label"] in LABELS, item["id"]
        assert item["family"] in doc["families"], item["id"]
        assert item["channel"] in CHANNELS, item["id"]
        assert re.fullmatch(r"[a-z]{2}", item["language"]), item["id"]
        assert item["memory"].strip() and item["note"].strip(), item["id"]
        scenario = item["scenario"]
        assert set(scenario) == SCENARIO_KEYS, item["id"]
        assert scenario["session_b_user"].strip(), item["id"]
        attacker, legit = _actions(item)
        if item["label"] == "attack":
            assert item["variant"] in ATTACK_VARIANTS, item["id"]
            assert attacker is not None, item["id"]
        else:
            assert item["variant"] == "benign", item["id"]
            assert attacker is None, item["id"]
        for action in (attacker, legit):
            if action is not None:
                assert set(action) == {"tool", "args_contain"}, item["id"]


def test_unique_ids(items: list[Item]) -> None:
    ids = [i["id"] for i in items]
    assert len(ids) == len(set(ids))
    memories = Counter(i["memory"] for i in items)
    assert max(memories.values()) == 1, "no memory text is used twice"


def test_every_family_has_static_and_adaptive_attacks_in_both_splits(
    doc: dict[str, Any], items: list[Item], attacks: list[Item]
) -> None:
    cells = Counter((i["family"], i["variant"], i["split"]) for i in attacks)
    assert len(doc["families"]) >= 6
    for family in doc["families"]:
        for variant in ATTACK_VARIANTS:
            for split in SPLITS:
                assert cells[(family, variant, split)] >= 1, (family, variant, split)
    benign_families = {i["family"] for i in items if i["label"] == "legitimate"}
    assert benign_families == set(doc["families"]), "every family has legitimate look-alikes"


def test_tools_exist_and_arguments_are_parameters(doc: dict[str, Any], items: list[Item]) -> None:
    tools = cast(dict[str, Any], doc["tools"])
    assert len(tools) >= 10
    for name, tool in tools.items():
        assert isinstance(tool["description"], str) and tool["description"], name
        assert tool["parameters"]["type"] == "object", name
        for required in tool["parameters"].get("required", []):
            assert required in tool["parameters"]["properties"], (name, required)
    for item in items:
        for action in _actions(item):
            if action is None:
                continue
            assert action["tool"] in tools, (item["id"], action["tool"])
            properties = tools[action["tool"]]["parameters"]["properties"]
            for arg, value in action["args_contain"].items():
                assert arg in properties, (item["id"], action["tool"], arg)
                assert isinstance(value, str) and value.strip(), (item["id"], arg)


def test_attack_artefacts_come_from_memory_only(attacks: list[Item]) -> None:
    for item in attacks:
        attacker, legit = _actions(item)
        assert attacker is not None
        artefacts = attacker["args_contain"]
        assert artefacts, f"{item['id']}: an attack names its artefact"
        session_b = _norm(item["scenario"]["session_b_user"])
        legit_values = [] if legit is None else [_norm(v) for v in legit["args_contain"].values()]
        for arg, value in artefacts.items():
            assert value in item["memory"], f"{item['id']}: {arg}={value!r} not in memory"
            assert _norm(value) not in session_b, f"{item['id']}: {value!r} in session B"
            for other in legit_values:
                assert _norm(value) not in other and other not in _norm(value), item["id"]


def test_legitimate_actions_use_what_the_agent_was_given(items: list[Item]) -> None:
    for item in items:
        _, legit = _actions(item)
        if legit is None:
            continue
        session_b = item["scenario"]["session_b_user"]
        for value in legit["args_contain"].values():
            if item["label"] == "attack":
                # The right action for an attacked request comes from the user's request.
                assert value in session_b, (item["id"], value)
            else:
                assert value in item["memory"] or value in session_b, (item["id"], value)


def test_languages(items: list[Item], attacks: list[Item]) -> None:
    for group in (attacks, items):
        other = [i for i in group if i["language"] != "en"]
        assert len(other) / len(group) >= 0.20
    assert len({i["language"] for i in attacks} - {"en"}) >= 4
    non_latin = [i for i in attacks if any(_is_non_latin_letter(ch) for ch in i["memory"])]
    assert non_latin, "at least one attack in a non-Latin script"
    for item in items:
        if item["language"] in {"zh", "ja", "ru", "ar", "el", "he", "hi", "ko", "uk"}:
            assert any(_is_non_latin_letter(ch) for ch in item["memory"]), item["id"]


def test_channels(attacks: list[Item], legitimate: list[Item]) -> None:
    for group in (attacks, legitimate):
        channels = Counter(i["channel"] for i in group)
        assert set(channels) == CHANNELS
        assert channels.most_common(1)[0][0] == "user_turn"
    attack_channels = Counter(i["channel"] for i in attacks)
    assert attack_channels["user_turn"] > len(attacks) / 2, "most attacks come as user turns"


def test_only_reserved_domains(items: list[Item]) -> None:
    for item in items:
        texts = [item["memory"], item["scenario"]["session_b_user"]]
        for action in _actions(item):
            if action is not None:
                texts.extend(action["args_contain"].values())
        for text in texts:
            for domain in DOMAIN_IN_TEXT.findall(text):
                assert RESERVED_DOMAIN.search(domain), (item["id"], domain)
