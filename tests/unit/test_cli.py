"""The command framework both CLIs share: groups, the README's tables, missing extras.

A missing optional dependency is simulated the way Python reports one: the child
process sets ``sys.modules[name] = None`` before importing the CLI, so importing
that module raises ``ModuleNotFoundError`` naming it, wherever it is imported.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from dmt_bench import cli as bench_cli
from dmt_bench.programs import Program
from dmt_proxy import __version__
from dmt_proxy.cli import proxy_cli
from dmt_proxy.cli.framework import MODULE_EXTRAS, Cli, CommandGroup, Unavailable

ROOT = Path(__file__).resolve().parents[2]
CLIS = {"dmt-proxy": proxy_cli.CLI, "dmt-bench": bench_cli.CLI}


def _commands(cli: Cli) -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _readme_commands() -> set[tuple[str, str]]:
    """(program, command) for every command named in a row of one of README's tables."""
    rows = [ln for ln in (ROOT / "README.md").read_text("utf-8").splitlines() if ln.startswith("|")]
    return {
        (m.group(1), m.group(2))
        for row in rows
        for m in re.finditer(r"`(dmt-proxy|dmt-bench) ([a-z][a-z0-9-]*)", row)
    }


@pytest.mark.parametrize("prog", sorted(CLIS))
def test_every_command_is_in_the_readme_tables_and_every_row_is_a_command(prog: str) -> None:
    commands = set(_commands(CLIS[prog]))
    documented = {cmd for p, cmd in _readme_commands() if p == prog}
    assert commands - documented == set(), "commands missing from README's command tables"
    assert documented - commands == set(), "README's tables name commands that do not exist"


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of ``parser`` and of the subcommands below it; a pass-through
    command (a ``dmt_bench.programs.Program``) takes those of the program's own parser."""
    func = parser.get_default("func")
    if isinstance(func, Program):
        parser = func.parser()
    found = {o for a in parser._actions for o in a.option_strings}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found |= _options(child)
    return found


def test_every_flag_in_the_readme_command_column_is_one_the_command_takes() -> None:
    parsers = {prog: _commands(cli) for prog, cli in CLIS.items()}
    wrong = []
    for row in (ROOT / "README.md").read_text("utf-8").splitlines():
        cells = re.split(r"(?<!\\)\|", row)
        if not re.match(r"\| `dmt-(proxy|bench) ", row) or len(cells) < 3:
            continue
        command: argparse.ArgumentParser | None = None
        for span in re.findall(r"`([^`]+)`", cells[1]):
            named = re.match(r"(dmt-proxy|dmt-bench) ([a-z][a-z0-9-]*)", span)
            if named:
                command = parsers[named.group(1)][named.group(2)]
            assert command is not None, row
            wrong += [f for f in re.findall(r"--[a-z][a-z-]*", span) if f not in _options(command)]
    assert wrong == []


@pytest.mark.parametrize("prog", sorted(CLIS))
def test_each_group_declares_exactly_the_commands_it_registers(prog: str) -> None:
    for group in CLIS[prog].groups:
        sub = argparse.ArgumentParser().add_subparsers()
        group.load(sub)
        assert tuple(sub.choices) == group.commands, group.register
        stand_ins = [
            n for n, p in sub.choices.items() if isinstance(p.get_default("func"), Unavailable)
        ]
        assert stand_ins == [], f"{stand_ins} cannot load with every extra installed"


def _top_level_modules() -> dict[str, set[str]]:
    """Normalized distribution name -> the top-level modules it installs."""
    found: dict[str, set[str]] = {}
    for module, dists in importlib.metadata.packages_distributions().items():
        for dist in dists:
            found.setdefault(re.sub(r"[-_.]+", "-", dist).lower(), set()).add(module)
    return found


def test_module_extras_match_pyproject() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    extras = {k: v for k, v in pyproject["project"]["optional-dependencies"].items() if k != "dev"}
    modules_of = _top_level_modules()
    expected: dict[str, list[str]] = {}
    for extra, requirements in extras.items():
        for requirement in requirements:
            match = re.match(r"[A-Za-z0-9._-]+", requirement)
            assert match, requirement
            dist = re.sub(r"[-_.]+", "-", match.group(0)).lower()
            provided = modules_of.get(dist, set()) & set(MODULE_EXTRAS)
            assert provided, (
                f"{extra}: {dist} (installed: {modules_of.get(dist)}) not in MODULE_EXTRAS"
            )
            for module in provided:
                if extra not in expected.setdefault(module, []):
                    expected[module].append(extra)
    assert {m: list(e) for m, e in MODULE_EXTRAS.items()} == expected


def _run(prog: str, missing: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    module = {"dmt-proxy": "dmt_proxy.cli.proxy_cli", "dmt-bench": "dmt_bench.cli"}[prog]
    code = (
        f"import sys; sys.modules[{missing!r}] = None\n"
        f"from {module} import main\n"
        "sys.exit(main(sys.argv[1:]))"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def test_a_group_not_in_this_build_is_listed_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli = Cli(prog="dmt-test", description="", groups=(
        CommandGroup("dmt_proxy.cli.no_such_group", ("ghost",)),
        *proxy_cli.GROUPS,
    ))  # fmt: skip
    assert cli.main(["ghost", "--anything"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dmt-test ghost: is not part of this installation (no module named")


@pytest.mark.parametrize("prog", sorted(CLIS))
def test_version(prog: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        CLIS[prog].main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"{prog} {__version__}\n"


@pytest.mark.parametrize("prog", sorted(CLIS))
def test_unknown_arguments_are_a_usage_error(prog: str, capsys: pytest.CaptureFixture[str]) -> None:
    command = {"dmt-proxy": ["tenants", "check"], "dmt-bench": ["dib", "stats"]}[prog]
    with pytest.raises(SystemExit) as exit_:
        CLIS[prog].main([*command, "--bogus"])
    assert exit_.value.code == 2
    assert f"{prog}: error: unrecognized arguments: --bogus" in capsys.readouterr().err


def test_config_errors_exit_2_with_the_program_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_cli.main(["dib", "stats", "--domain", "nope"]) == 2
    assert capsys.readouterr().err.startswith("dmt-bench: error: unknown DIB domain(s): nope")
    assert proxy_cli.main(["tenants", "hash-key", ""]) == 2
    assert capsys.readouterr().err.startswith("dmt-proxy: error: no key given")
