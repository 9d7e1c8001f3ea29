"""``dmt-bench``'s pass-through commands: each program's own parser, and ``perf``."""

from __future__ import annotations

import importlib

import pytest

from dmt_bench import cli as bench_cli
from dmt_bench import programs
from dmt_bench.programs import PROGRAMS, Program


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_each_program_has_main_and_its_own_parser_named_after_the_command(
    program: Program,
) -> None:
    module = importlib.import_module(program.module)
    assert callable(module.main)
    assert callable(module.build_parser)
    assert module.build_parser().prog == f"dmt-bench {program.name}"
    assert program.parser().prog == f"dmt-bench {program.name}"


def test_help_of_a_program_is_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench_cli.main(["judge-corpus", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: dmt-bench judge-corpus")
    assert "--seed" in out


def test_perf_scripts_are_the_runnable_files_of_benchmarks_perf() -> None:
    scripts = programs.perf_scripts()
    assert "local_models" in scripts
    folder = programs.perf_dir()
    for name in scripts:
        source = (folder / f"{name}.py").read_text(encoding="utf-8")
        assert 'if __name__ == "__main__":' in source, name
    helpers = {p.stem for p in folder.glob("*.py")} - set(scripts)
    assert {"_results", "_procs"} <= helpers


def test_perf_alone_lists_the_scripts(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_cli.main(["perf"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: dmt-bench perf NAME")
    listed = {line.split()[0] for line in out.splitlines()[1:] if line.strip()}
    assert listed == set(programs.perf_scripts())


def test_perf_with_an_unknown_script_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench_cli.main(["perf", "no_such_script"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dmt-bench: error: no performance script 'no_such_script'; one of: ")
    assert "local_models" in err
