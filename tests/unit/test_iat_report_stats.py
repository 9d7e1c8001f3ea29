"""IAT report v2: its statistics section and the iat-report rebuild command."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dmt_bench.cli import main
from dmt_bench.iat.report import REPORT_VERSION, report_markdown, statistics_note
from dmt_bench.iat.results import read_result

RUN = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "iat" / "smollm2_runs2"


def test_statistics_note_counts_the_intervals_and_declares_none_primary() -> None:
    result = read_result(RUN / "iat_result.json")
    note = statistics_note(result, "smollm2")
    assert "treat the trials of a category as independent" in note
    assert "none is primary" in note and "intervals" in note
    md = report_markdown(result)
    assert "## Statistics" in md and REPORT_VERSION in md and REPORT_VERSION == "iat_report_v2"


def test_iat_report_command_rewrites_the_report_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "probe"
    shutil.copytree(RUN, copy)
    (copy / "iat_report.md").unlink()
    before = (copy / "iat_result.json").read_bytes()
    assert main(["iat-report", "--out", str(copy)]) == 0
    assert "## Statistics" in (copy / "iat_report.md").read_text(encoding="utf-8")
    assert (copy / "iat_result.json").read_bytes() == before
    assert (copy / "iat_report.md").read_text(encoding="utf-8") == (
        RUN / "iat_report.md"
    ).read_text(encoding="utf-8")  # the committed report is this command's output
    assert main(["iat-report", "--out", str(tmp_path / "none")]) == 2
    capsys.readouterr()
