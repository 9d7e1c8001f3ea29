"""``dmt-bench dib`` export / stats / run argument handling (no model needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dmt_bench.cli import main


def test_stats_prints_table_1_and_the_total(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dib", "stats"]) == 0
    out = capsys.readouterr().out
    assert "3,776" in out
    assert "nationality  csat_trust              240    480  Western 240, Non-Western 240" in out
    assert main(["dib", "stats", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["total"] == 3776 and data["version"] == "dib-v1"


def test_export_is_byte_identical_for_a_seed(tmp_path: Path) -> None:
    for name, seed in (("a", "7"), ("b", "7"), ("c", "8")):
        assert (
            main(["dib", "export", "--out", str(tmp_path / f"{name}.jsonl"), "--seed", seed]) == 0
        )
    a, b, c = ((tmp_path / f"{n}.jsonl").read_bytes() for n in "abc")
    assert a == b and a != c
    assert a.count(b"\n") == 3776


def test_export_one_domain(tmp_path: Path) -> None:
    out = tmp_path / "d.jsonl"
    assert main(["dib", "export", "--out", str(out), "--domain", "disability"]) == 0
    assert out.read_text().count("\n") == 300


def test_config_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dib", "stats", "--domain", "nope"]) == 2
    assert "unknown DIB domain" in capsys.readouterr().err
    assert main(["dib", "run", "--model", "some-hosted-model", "--sample", "5"]) == 2
    assert "--base-url" in capsys.readouterr().err
    assert main(["dib", "export", "--out", str(tmp_path / "missing" / "x.jsonl")]) == 2
    assert (
        main(["dib", "run", "--model", "m", "--base-url", "http://x/v1", "--concurrency", "0"]) == 2
    )


def test_sample_size_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    run = ["dib", "run", "--model", "m", "--base-url", "http://x/v1"]
    assert main([*run, "--contexts-per-domain", "1"]) == 2
    assert "at least 2" in capsys.readouterr().err
    assert main([*run, "--sample", "10", "--contexts-per-domain", "2"]) == 2
    assert "not both" in capsys.readouterr().err
    assert main([*run, "--contexts-per-domain", "2", "--sampling", "dib-sample-v1"]) == 2
    assert "dib-sample-v2" in capsys.readouterr().err
