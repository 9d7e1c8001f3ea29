"""The CLIs with an optional dependency missing, each in a fresh interpreter (subprocesses): the command stays listed and names its extra; a missing module of our own is a bug."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from dmt_bench import cli as bench_cli
from tests.unit.test_cli import ROOT, _run


def test_a_group_whose_extra_is_missing_is_listed_and_names_the_extra() -> None:
    shown = _run("dmt-bench", "numpy", "--help")
    assert shown.returncode == 0, shown.stderr
    for group in bench_cli.GROUPS:
        for command in group.commands:
            assert re.search(rf"^    {re.escape(command)}\b", shown.stdout, re.M), command
    assert re.search(r"^    dib +\(unavailable: needs the 'bench' extra", shown.stdout, re.M)
    for args in (["dib", "stats"], ["iat", "--model", "m", "--help"]):
        done = _run("dmt-bench", "numpy", *args)
        assert done.returncode == 2
        assert done.stderr.startswith(
            f"dmt-bench {args[0]}: needs the 'bench' extra: pip install 'dmt-proxy[bench]' "
            "(no module named 'numpy')"
        ), done.stderr
        assert "Traceback" not in done.stderr


def test_a_module_missing_while_a_command_runs_names_its_extra(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(ROOT / "benchmarks" / "results" / "sim" / "compare_local_T20", run)
    done = _run("dmt-bench", "matplotlib", "report", "--out", str(run))  # figures need it
    assert done.returncode == 2
    assert "dmt-bench report: needs the 'bench' extra: pip install 'dmt-proxy[bench]' " \
        "(no module named 'matplotlib')" in done.stderr  # fmt: skip
    assert "Traceback" not in done.stderr


def test_a_missing_module_of_our_own_is_a_bug_with_its_traceback() -> None:
    done = _run("dmt-bench", "dmt_bench.stats", "--help")
    assert done.returncode == 1
    assert "ModuleNotFoundError" in done.stderr and "Traceback" in done.stderr
