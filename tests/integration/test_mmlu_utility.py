"""MMLU-Pro utility through the proxy (``dmt_bench/mmlu_utility.py``) on ``FakeProxy``.

The real proxy app over loopback HTTP with the shipped scripted models: the test
checks the harness (seeding, the grammar reaching the model, parsing, resume,
Wilson intervals), not a model's accuracy; the measured parse rate of the real 1.5B
is in ``benchmarks/results/mmlu_utility/``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dmt_bench.mmlu_utility import (
    UtilityConfig,
    letter_grammar,
    main,
    parse_letter,
    read_answers,
    run_utility,
)
from dmt_bench.testing.sim import FakeProxy
from dmt_proxy.settings import Settings
from dmt_proxy.upstream.base import UpstreamCall


def letter_agent(call: UpstreamCall) -> str:
    """Answers "A" when the request carries a grammar, a sentence otherwise."""
    return "A" if "grammar" in call.params else "The answer is (A), I think."


@pytest.fixture
def proxy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProxy]:
    fake = FakeProxy(tmp_path / "state", agent=letter_agent, retrieval="recent")
    fake.start()
    monkeypatch.setenv("DMT_ADMIN_KEY", fake.admin_key)
    yield fake
    fake.stop()


def test_letters_and_grammar() -> None:
    assert letter_grammar(3) == 'root ::= "A" | "B" | "C"'
    assert parse_letter(" B\n", 4) == "B" and parse_letter("B.", 4) == "B"
    assert parse_letter("E", 4) is None and parse_letter("The answer is B", 4) is None


def test_every_condition_goes_through_the_proxy_with_a_constrained_letter(
    proxy: FakeProxy, tmp_path: Path
) -> None:
    config = UtilityConfig.model_validate({
        "questions": 4, "conditions": ["memory-off", "off", "dmt"], "memory": "memory",
        "execution": {"proxy_url": proxy.client.base_url, "block": 2},
    })  # fmt: skip
    out = tmp_path / "run"
    results = run_utility(config, out, settings=Settings(), resume=False, progress=None)
    by = {c.condition: c for c in results.conditions}
    assert all(c.n == 4 and c.parsed == 4 and c.parse_rate == 1.0 for c in by.values())
    asked = [c for c in proxy.chat.calls if "Answer with the letter" in str(c.wire_messages())]
    assert len(asked) == 12 and all("grammar" in c.params for c in asked)
    # Memory off shows no memories; the modes show the user's (a running proxy's top_k of
    # the 20: the run's own proxy shows all of them).
    assert {a.memories for a in read_answers(out, "memory-off").values()} <= {0, None}
    shown = {a.memories for a in read_answers(out, "dmt").values()}
    assert len(shown) == 1 and (shown.pop() or 0) > 0
    dmt_system = [
        str(c.wire_messages()[0]["content"])
        for c in asked
        if c.wire_messages()[0]["role"] == "system"
    ]
    assert dmt_system  # the memory block reached the model
    assert 0.0 <= by["off"].ci_low <= by["off"].ci_high <= 1.0
    assert (out / "report.md").read_text().count("| dmt |") == 2  # its row and its comparison
    # The paired family the conditions allow: memory on − off, dmt − memory on; one
    # scripted answer everywhere, so no question differs.
    assert [(r.name, r.n, r.only_a, r.only_b) for r in results.comparisons] == [
        ("memory", 4, 0, 0),
        ("dmt", 4, 0, 0),
    ]
    assert "Paired differences" in (out / "report.md").read_text()
    assert '"status": "complete"' in (out / "run.json").read_text().replace('":"', '": "')
    before = len(proxy.chat.calls)
    assert main(["--out", str(out), "--resume"]) == 0
    assert len(proxy.chat.calls) == before  # nothing left to ask


def test_without_the_grammar_a_sentence_is_unparsed(proxy: FakeProxy, tmp_path: Path) -> None:
    config = UtilityConfig.model_validate({
        "questions": 2, "conditions": ["memory-off"], "memory": "memory", "grammar": False,
        "execution": {"proxy_url": proxy.client.base_url},
    })  # fmt: skip
    results = run_utility(
        config, tmp_path / "run", settings=Settings(), resume=False, progress=None
    )
    (row,) = results.conditions
    assert row.parsed == 0 and row.correct == 0 and row.parse_rate == 0.0
