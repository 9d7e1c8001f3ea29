"""The utility run's declared family (``bench.mmlu_costs``) on synthetic answers."""

from __future__ import annotations

import math

from dmt_bench.mmlu_costs import FAMILY, comparison_lines, comparisons


def _answers(right: int, total: int = 200, shift: int = 0) -> dict[int, bool]:
    """Questions ``shift .. shift + right − 1`` (mod total) answered correctly."""
    return {i: (i - shift) % total < right for i in range(total)}


def test_the_family_is_read_as_declared_and_holm_corrected() -> None:
    correct = {
        "memory-off": _answers(80),
        "off": _answers(80),
        "ssp": _answers(80),
        "dmt": _answers(50),  # loses 30 questions the others get right
        "dmt-tags": _answers(80, shift=5),  # 5 lost, 5 gained: no net change
        "dmt-instruction": _answers(80),
    }
    rows = {r.name: r for r in comparisons(correct)}
    assert list(rows) == [name for name, _, _ in FAMILY]
    assert (rows["memory"].a, rows["memory"].b) == ("off", "memory-off")
    dmt = rows["dmt"]
    assert (dmt.only_a, dmt.only_b) == (0, 30)
    assert dmt.difference == -30 / 200 and dmt.high < 0 and dmt.reject
    assert dmt.holm_p == min(1.0, 5 * dmt.p_value)  # the smallest p of five
    tags = rows["dmt-tags"]
    assert (tags.only_a, tags.only_b, tags.difference) == (5, 5, 0.0)
    assert tags.p_value == 1.0 and not tags.reject and tags.mde > 0
    assert math.isnan(rows["ssp"].mde)  # identical answers: no discordance, no MDE
    text = "\n".join(comparison_lines(list(rows.values()), intervals=11))
    assert "| dmt | dmt − off | 200 | 0 | 30 | -0.150 |" in text
    assert "(rejected)" in text and "this report shows 11 intervals" in text
    assert "The 5 primary comparisons" in text


def test_only_comparisons_the_conditions_allow() -> None:
    rows = comparisons({"memory-off": _answers(10, 20), "dmt": _answers(10, 20)})
    assert rows == []  # neither dmt − off nor off − memory-off can be read
    (only,) = comparisons({"off": _answers(10, 20), "ssp": _answers(12, 20)})
    assert (only.name, only.n, only.only_a, only.only_b) == ("ssp", 20, 2, 0)
    assert comparison_lines([], intervals=3) == []
