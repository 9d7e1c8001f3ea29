"""The out-of-distribution set auditor_eval_v2, the adversarial set v2, resumable runs and
the calibration script (its refusal to fit on a test split).

The runner test uses the shipped ScriptedAuditor (a fake auditor: bookkeeping, not quality).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from dmt_bench.auditor_eval.adversarial import load_set
from dmt_bench.auditor_eval.build_v2 import build, load_source, unmark
from dmt_bench.auditor_eval.calibrate import calibrate, training_pairs
from dmt_bench.auditor_eval.dataset import (
    DATASET_V2,
    FORMS,
    SETTINGS,
    V2_STRATEGIES,
    EvalItem,
    dataset_path,
    load_items,
)
from dmt_bench.auditor_eval.runner import load_checkpoint, run_items
from dmt_proxy.audit.auditor_prompt import load_auditor_prompt
from dmt_proxy.audit.normalize import normalize_memory
from dmt_proxy.audit.schema import AuditCandidate, AuditVerdict
from dmt_proxy.domains import DOMAINS
from dmt_proxy.errors import ConfigError
from dmt_proxy.testing.auditor import ScriptedAuditor

TABLE3_PHRASES = (
    "stuck in old ways", "too emotional", "diversity hire", "quota", "litigious",
    "rigid religious", "poor self-discipline", "alienat", "halo effect", "communication style",
)  # fmt: skip


@pytest.fixture(scope="module")
def v2() -> list[EvalItem]:
    return load_items(dataset_path(DATASET_V2))


def test_the_shipped_file_is_what_the_source_builds(v2: list[EvalItem]) -> None:
    assert build(load_source()) == v2


def test_size_split_and_balance(v2: list[EvalItem]) -> None:
    assert len(v2) >= 300
    test = [i for i in v2 if i.split == "test"]
    assert len(test) >= 150 and sum(i.biased for i in test) >= 70
    biased = Counter(i.domain for i in v2 if i.biased)
    assert biased == {d: 16 for d in DOMAINS}
    assert Counter(i.domain for i in v2 if i.kind == "hard_negative") == {d: 10 for d in DOMAINS}
    assert {i.strategy for i in v2 if i.biased} == set(V2_STRATEGIES)
    assert sum(i.strategy == "benevolent" for i in test) >= 18
    assert {i.form for i in v2} == set(FORMS) and {i.setting for i in v2} == set(SETTINGS)
    assert {i.kind for i in v2} == {"stereotype", "hard_negative", "question"}
    for split in ("train", "test"):
        part = [i for i in v2 if i.split == split]
        assert {i.domain for i in part if i.biased} == set(DOMAINS)
        assert {i.form for i in part if i.biased} == set(FORMS)


def test_biased_items_carry_their_span_and_no_table3_wording(v2: list[EvalItem]) -> None:
    for item in v2:
        if item.biased:
            assert item.span and item.span.split(",")[0] in item.text, item.id
            lowered = item.text.lower()
            assert not any(phrase in lowered for phrase in TABLE3_PHRASES), item.id
        else:
            assert item.span is None
    assert unmark("a [[b c]] d [[e]]") == ("a b c d e", "b c e")


def test_v3_examples_are_in_no_labelled_or_adversarial_text(v2: list[EvalItem]) -> None:
    texts = [i.text for i in v2] + [i.text for i in load_items()]
    for version in ("adversarial_memories_v1", "adversarial_memories_v2"):
        data = load_set(version)
        texts += [b.text for b in data.bases] + [i.text for i in data.items]
    for example in load_auditor_prompt("auditor_v3").examples:
        assert not any(example.memory[:50] in t for t in texts), example.memory[:50]


def test_v3_does_not_carry_the_generators_stereotype_list() -> None:
    system = load_auditor_prompt("auditor_v3").system.lower()
    assert not any(phrase in system for phrase in TABLE3_PHRASES)
    for domain in DOMAINS:
        assert f"- {domain}:" in system


def test_no_v2_text_is_a_manipulation_finding(v2: list[EvalItem]) -> None:
    assert [i.id for i in v2 if normalize_memory(i.text).findings] == []


def test_adversarial_v2_covers_every_family_with_both_kinds_of_base() -> None:
    data = load_set("adversarial_memories_v2")
    v1 = load_set("adversarial_memories_v1")
    assert data.version == "adversarial_memories_v2" and set(v1.attacks) < set(data.attacks)
    per_family = Counter(i.attack for i in data.items)
    assert set(per_family) == set(data.attacks) and min(per_family.values()) >= 4
    for family in data.attacks:
        bases = {data.base(i.base).biased for i in data.items if i.attack == family}
        assert bases == {True, False}, family
    old = {i.text for i in v1.items} | {b.text for b in v1.bases}
    assert not any(i.text in old for i in data.items)


async def test_a_run_resumes_from_its_checkpoint(v2: list[EvalItem], tmp_path: Path) -> None:
    items = v2[:6]
    checkpoint = tmp_path / "run.partial.jsonl"
    first = ScriptedAuditor([AuditVerdict.clean()])
    await run_items(first, items[:4], checkpoint=checkpoint, progress=lambda _: None)
    assert set(load_checkpoint(checkpoint)) == {i.id for i in items[:4]}
    with checkpoint.open("a") as fh:
        fh.write('{"torn": ')  # a run killed mid-line
    second = ScriptedAuditor([AuditVerdict.biased("age")])
    results = await run_items(second, items, checkpoint=checkpoint, progress=lambda _: None)
    assert [r.item.id for r in results] == [i.id for i in items]
    assert len(second.calls) == 2  # only the two items the first run had not done
    assert [r.verdict.bias_detected for r in results if r.verdict] == [False] * 4 + [True] * 2
    assert isinstance(second.calls[0], AuditCandidate)


def _report(split: str, pairs: list[tuple[float, str]]) -> dict[str, object]:
    return {"run": {"split": split, "dataset": DATASET_V2},
            "items": [{"label": label, "verdict": {"p_raw": p}} for p, label in pairs]}  # fmt: skip


def test_calibration_is_fitted_on_train_splits_only() -> None:
    train = _report("train", [(0.9, "biased"), (0.2, "neutral"), (0.6, "biased"), (0.4, "neutral")])
    raw, labels, source = training_pairs([train])
    assert raw == [0.9, 0.2, 0.6, 0.4] and labels == [True, False, True, False]
    assert source == "auditor_eval_v2/train"
    fit = calibrate("qwen2.5-1.5b", "auditor_v3", [train])
    assert fit.n == 4 and fit.apply(0.9) > fit.apply(0.2)
    with pytest.raises(ConfigError, match="train splits only"):
        training_pairs([_report("test", [(0.5, "biased")])])
    with pytest.raises(ConfigError, match="no item"):
        training_pairs([_report("train", [])])
    json.dumps(fit.model_dump())  # the shipped file's entry format


def test_domain_weight_is_the_largest_best_on_train() -> None:
    from dmt_bench.auditor_eval.calibrate import fit_domain_weight

    # The LLM always answers gender; the head is right: only small LLM weights keep it right.
    llm = [{"gender": 0.8, "race": 0.2}, {"gender": 0.7, "ses": 0.3}]
    head = [{"race": 0.9, "gender": 0.1}, {"ses": 0.8, "gender": 0.2}]
    weight, accuracy = fit_domain_weight(llm, head, ["race", "ses"])
    assert accuracy == 1.0 and weight == 0.5  # race wins below w = 4/7, ses below 0.6
    # An LLM that is right as well keeps the largest weight on the grid.
    assert fit_domain_weight([{"race": 1.0}], [{"race": 1.0}], ["race"]) == (1.0, 1.0)
