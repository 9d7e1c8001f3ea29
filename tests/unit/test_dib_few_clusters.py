"""DIB report v3: jackknife-t intervals, noise-floor testability, unstable contexts, rebuild."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from dmt_bench import gbv as g
from dmt_bench import stats
from dmt_bench.cli import main
from dmt_bench.dib.readouts import instability_lines, unstable_contexts
from dmt_bench.dib.report import DibReport, jackknife_gbv, render_table

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "benchmarks" / "results" / "dib" / "baseline_qwen2.5-1.5b_n150"


def test_unstable_contexts_flag_a_spread_of_25_points_or_more() -> None:
    scores = {
        "disability": {
            "disability-012": {"None": 45.0, "Physical": 87.5, "Neurodivergent": 86.0},
            "disability-013": {"None": 60.0, "Physical": 62.0, "Neurodivergent": None},
        },
        "age": {"age-001": {"a": 50.0, "b": 74.9}, "age-002": {"a": 50.0}},
    }
    flagged = unstable_contexts(scores)  # type: ignore[arg-type]
    assert [(u.domain, u.context_id) for u in flagged] == [("disability", "disability-012")]
    u = flagged[0]
    assert (u.low_group, u.high_group, u.spread) == ("None", "Physical", pytest.approx(42.5))
    assert unstable_contexts(scores, threshold=24.0)[0].context_id == "age-001"  # type: ignore[arg-type]
    assert instability_lines({"t=40": flagged})[0].startswith("unstable contexts, t=40: ")
    assert instability_lines({"t=40": []})[0].startswith("No unstable context")


def test_jackknife_gbv_by_hand() -> None:
    # one domain, three contexts of two groups; GBV of pooled means = |gap| / 2
    contexts = {"c1": {"a": 60.0, "b": 50.0}, "c2": {"a": 62.0, "b": 58.0},
                "c3": {"a": 55.0, "b": 55.0}}  # fmt: skip
    per, agg = jackknife_gbv({"age": contexts})
    loo = [g.gbv_of_contexts({k: v for k, v in contexts.items() if k != drop})
           for drop in ("c1", "c2", "c3")]  # fmt: skip
    want = stats.jackknife_t(g.gbv_of_contexts(contexts), {"age": loo})
    assert per["age"].value == pytest.approx(want.value)
    assert (per["age"].low, per["age"].high) == pytest.approx((want.low, want.high))
    assert per["age"].df == 2 and agg.value == pytest.approx(want.value)


def test_dib_report_command_rebuilds_the_committed_numbers_and_adds_v3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "run"
    shutil.copytree(RUN, copy)
    before = json.loads((RUN / "report.json").read_text(encoding="utf-8"))
    assert main(["dib", "report", "--out", str(copy)]) == 0
    text = capsys.readouterr().out
    after = DibReport.model_validate_json((copy / "report.json").read_text(encoding="utf-8"))
    assert after.report_version == "dib-report-v3"
    for old, new in zip(before["domains"], after.domains, strict=True):
        # the percentile CIs and the noise floor are those the run wrote (same seeds)
        assert (new.gbv, new.ci_low, new.ci_high, new.p_value) == (
            old["gbv"], old["ci_low"], old["ci_high"], old["p_value"]
        )  # fmt: skip
        assert new.task == old["task"] and new.direction == old["direction"]
        head = new.readouts["expected"]
        assert head.gbv_jk is not None and head.gbv_jk.df == new.n_contexts - 1
        assert new.floor_min_p is not None and new.floor_min_p < 0.05  # 4+ contexts
    assert "delete-one-context jackknife" in text and "Noise floor:" in text
    assert "Multiplicity: this report shows" in text and "none is primary" in text
    assert "appearance-145" in text  # the halo context, flagged
    assert main(["dib", "report", "--out", str(tmp_path / "none")]) == 2


def test_two_contexts_make_the_floor_not_testable_in_the_table() -> None:
    report = DibReport.model_validate_json((RUN / "report.json").read_text(encoding="utf-8"))
    thin = report.model_copy(
        update={"domains": [d.model_copy(update={"floor_min_p": 1 / 6}) for d in report.domains]}
    )
    text = render_table(thin)
    assert "Noise floor: not testable at α=0.05 with this design in race" in text
    v2 = report.model_copy(
        update={"domains": [d.model_copy(update={"floor_min_p": None}) for d in report.domains]}
    )
    old = render_table(v2)  # a v2 report: no jackknife, says which interval it shows
    assert "percentile bootstrap over contexts (a report written before dib-report-v3" in old
    assert math.isfinite(report.agbv or math.nan)
