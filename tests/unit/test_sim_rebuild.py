"""Rebuilding a committed run's results with this code: old files load, numbers hold.

The committed T=20 compare (benchmarks/results/sim/compare_local_T20) is rebuilt from
its audits; its headline numbers must equal those its run wrote (kept in
golden/compare_local_T20.sim-results-v1.json), and its report text must match the
golden sim-report-v4 rendering. Set DMT_UPDATE_GOLDEN=1 to rewrite the golden text
after an intended change of the report (and bump REPORT_VERSION if its meaning changed).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest

from dmt_bench.cli import main
from dmt_bench.sim.rebuild import rebuild_compare
from dmt_bench.sim.report import REPORT_VERSION, render_table2
from dmt_bench.sim.results import CompareResults

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "benchmarks" / "results" / "sim" / "compare_local_T20"
GOLDEN = Path(__file__).parent / "golden"
V1 = GOLDEN / "compare_local_T20.sim-results-v1.json"
TABLE = GOLDEN / f"compare_local_T20.{REPORT_VERSION}.txt"


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory: pytest.TempPathFactory) -> CompareResults:
    copy = tmp_path_factory.mktemp("t20") / "run"
    shutil.copytree(RUN, copy)
    return rebuild_compare(copy)


def test_v1_results_still_load() -> None:
    old = CompareResults.model_validate(json.loads(V1.read_text(encoding="utf-8")))
    assert old.results_version == "sim-results-v1" and old.headline == "expected"
    assert old.archs[0].contexts == {} and old.archs[0].deltas[0].readouts == {}
    assert "ΔAGBV" in render_table2(old)  # renders, without the parts it does not have


def test_rebuilt_headline_numbers_equal_those_the_run_wrote(rebuilt: CompareResults) -> None:
    old = CompareResults.model_validate(json.loads(V1.read_text(encoding="utf-8")))
    new_rows = {(d.condition, d.t): d for d in rebuilt.archs[0].deltas}
    for d in old.archs[0].deltas:
        got = new_rows[(d.condition, d.t)]
        assert got.delta.value == pytest.approx(d.delta.value)
        assert got.per_domain == pytest.approx(d.per_domain)
        if d.mp is not None:
            assert got.mp is not None and got.mp.value == pytest.approx(d.mp.value)
    old_rows = {(r.condition, r.t): r for r in old.archs[0].checkpoints}
    for r in rebuilt.archs[0].checkpoints:
        assert r.agbv.value == pytest.approx(old_rows[(r.condition, r.t)].agbv.value)
        assert r.noise_p95 == pytest.approx(old_rows[(r.condition, r.t)].noise_p95)


def test_rebuilt_report_names_the_thin_domain_and_fixes_spans_zero(
    rebuilt: CompareResults,
) -> None:
    old = CompareResults.model_validate(json.loads(V1.read_text(encoding="utf-8")))
    # v1 said the baseline CI "spans zero" although there was no CI (a NaN comparison)
    assert [d.base_ci_spans_zero for d in old.archs[0].deltas if d.condition != "baseline"] == [
        True,
        True,
    ]
    assert all(d.base_ci_spans_zero is None for d in rebuilt.archs[0].deltas)
    assert rebuilt.archs[0].contexts["religion"] == 1
    text = render_table2(rebuilt)
    assert "religion had a single DIB context" in text
    assert "one DIB context per domain" not in text  # the old caveat was false for this run
    dmt = next(d for d in rebuilt.archs[0].deltas if d.condition == "dmt")
    assert math.isfinite(dmt.readouts["expected"].per_domain["orientation"].ci.low)


def test_rebuilt_report_matches_the_golden_text(rebuilt: CompareResults) -> None:
    text = render_table2(rebuilt) + "\n"
    if os.environ.get("DMT_UPDATE_GOLDEN") == "1":
        TABLE.write_text(text, encoding="utf-8")
    assert text == TABLE.read_text(encoding="utf-8")


def test_report_command_rewrites_a_run_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "run"
    shutil.copytree(RUN, copy, ignore=shutil.ignore_patterns("*.png", "report.*", "results.json"))
    assert main(["report", "--out", str(copy)]) == 0
    assert "religion had a single DIB context" in capsys.readouterr().out
    data = json.loads((copy / "results.json").read_text(encoding="utf-8"))
    assert data["results_version"] == "sim-results-v3"
    assert "Both readouts" in (copy / "report.md").read_text(encoding="utf-8")
    assert main(["report", "--out", str(tmp_path / "nothing")]) == 2


def test_partial_report_of_an_unfinished_run_goes_beside_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "run"
    shutil.copytree(RUN, copy)
    (copy / "mem0" / "dmt" / "audits" / "t0020.json").unlink()  # DMT not audited at T yet
    before = (copy / "results.json").read_bytes()
    assert main(["report", "--out", str(copy)]) == 2
    assert "dmt@t20" in capsys.readouterr().err
    assert main(["report", "--out", str(copy), "--partial"]) == 0
    out = capsys.readouterr().out
    assert "an unfinished run" in out and "not audited yet: dmt t=20" in out
    assert (copy / "results.json").read_bytes() == before  # the run's own files are untouched
    data = json.loads((copy / "partial" / "results.json").read_text(encoding="utf-8"))
    deltas = {d["condition"] for d in data["archs"][0]["deltas"]}
    assert deltas == {"baseline", "ssp"}  # DMT's ΔAGBV needs its t=20 audit
    assert "not audited yet" in (copy / "partial" / "report.md").read_text(encoding="utf-8")


def test_committed_T100_run_rebuilds_to_the_numbers_it_wrote(tmp_path: Path) -> None:
    # the T=100 compare (five conditions, dib-sample-v2) was written by this results
    # version: a rebuild from its audits must give back every committed number
    run = ROOT / "benchmarks" / "results" / "sim" / "compare_local_T100"
    written = CompareResults.model_validate(
        json.loads((run / "results.json").read_text(encoding="utf-8"))
    )
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    rebuilt = rebuild_compare(copy)
    assert rebuilt.archs[0].contexts == dict.fromkeys(rebuilt.archs[0].contexts, 2)
    assert {d.condition for d in rebuilt.archs[0].deltas} == {
        "baseline",
        "ssp",
        "dmt",
        "dmt-tags",
        "dmt-instruction",
    }
    assert rebuilt.model_dump(exclude={"wall_s"}) == written.model_dump(exclude={"wall_s"})
