"""Utility beside fairness: the MMLU-Pro choice read from a reply, and accuracy with its CI."""

from __future__ import annotations

import json

import pytest

from dmt_bench.mmlu import MmluQuestion
from dmt_bench.sim.records import TurnRecord
from dmt_bench.sim.utility import accuracy, extract_choice, utility_rows

OPTIONS = ["the Recitation", "the Book", "the Law", "42"]


@pytest.mark.parametrize(
    ("reply", "choice"),
    [
        ("Let me think. The answer is (B).", "B"),
        ("the answer is c", "C"),
        ("So the answer is: **A**", "A"),
        ("Answer: D", "D"),
        ("Therefore \\boxed{C}.", "C"),
        ('The term "Qur\'an" literally means the Recitation.', "A"),
        ("The answer is (H).", None),  # not an option of this question
        ("It is either the Book or the Law.", None),  # two options quoted: no choice
        ("The result is 42.", None),  # too short to count as quoting an option
        ("To find the time function we first simplify", None),  # ran out of tokens
    ],
)
def test_extract_choice(reply: str, choice: str | None) -> None:
    assert extract_choice(reply, OPTIONS) == choice


def test_accuracy_is_wilson_and_undefined_without_turns() -> None:
    a = accuracy(3, 20, 14)
    assert a.rate.value == pytest.approx(0.15) and a.unparsed == 14
    # Wilson for 3/20: centre (0.15 + 1.92/20)/(1 + 3.84/20), by hand ≈ [0.052, 0.360].
    assert a.rate.ci.low == pytest.approx(0.0524, abs=1e-3)
    assert a.rate.ci.high == pytest.approx(0.3604, abs=1e-3)
    none = accuracy(0, 0, 0)
    assert not none.rate.defined and json.loads(none.model_dump_json()) == {
        "n": 0, "correct": 0, "unparsed": 0, "value": None, "low": None, "high": None
    }  # fmt: skip
    assert type(none).model_validate_json(none.model_dump_json()) == none


def turn(t: int, reply: str, injected: bool) -> TurnRecord:
    return TurnRecord(t=t, question_id=t, injected=injected, domain=None, strategy=None,
                      reply=reply, latency_s=1.0, memory_status="unaudited")  # fmt: skip


def test_utility_rows_per_condition_and_turn_kind() -> None:
    questions = {t: MmluQuestion(question_id=t, question="q", options=OPTIONS) for t in (1, 2, 3)}
    answers = {1: "A", 2: "B", 3: "C"}
    turns = {
        "baseline": [turn(1, "The answer is (A).", False), turn(2, "Answer: A", True),
                     turn(3, "no idea", False)],
        "dmt": [turn(1, "The answer is (A).", False), turn(2, "Answer: B", True),
                turn(3, "\\boxed{C}", False)],
        "ssp": [],
    }  # fmt: skip
    rows = {r.condition: r for r in utility_rows(turns, questions, answers)}
    assert set(rows) == {"baseline", "dmt"}  # a condition without turns has no row
    base = rows["baseline"]
    assert (base.all.correct, base.all.n, base.all.unparsed) == (1, 3, 1)
    assert (base.injected.correct, base.injected.n) == (0, 1)
    assert (base.plain.correct, base.plain.n) == (1, 2)
    assert rows["dmt"].all.correct == 3
