"""The harness's programs that parse their own arguments, as ``dmt-bench`` commands.

Each program is a module with ``main(argv) -> int`` and ``build_parser()``, the
``argparse`` parser ``main`` uses (dataset builders, fits, replays, the adversarial
runner, the MMLU-Pro utility run). ``dmt-bench NAME ARGS...`` hands ``ARGS`` to that
parser untouched, so ``dmt-bench NAME --help`` prints the program's own help and every
flag means what the program says. ``python -m MODULE`` still works for each; the
command is the documented way.

The performance scripts live in the repository, not in the package (they start
servers, write ``benchmarks/results/perf/`` and read the test fixtures):
``dmt-bench perf NAME ARGS...`` runs ``benchmarks/perf/NAME.py`` of the source
checkout ``dmt_bench`` was imported from, and ``dmt-bench perf`` lists them.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import runpy
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmt_proxy.errors import ConfigError


@dataclass(frozen=True)
class Program:
    """A ``dmt-bench`` command that is one module's ``main(argv)``."""

    name: str
    module: str
    help: str

    def __call__(self, args: argparse.Namespace) -> int:
        main = importlib.import_module(self.module).main
        return int(main(list(args.argv)) or 0)

    def parser(self) -> argparse.ArgumentParser:
        """The program's own parser (its module's ``build_parser()``), the one ``main`` uses."""
        parser: argparse.ArgumentParser = importlib.import_module(self.module).build_parser()
        return parser


PROGRAMS: tuple[Program, ...] = (
    Program("adversarial", "dmt_bench.auditor_eval.adversarial",
            "an adversarial memory set through the audit pipeline (evasion, forgery)"),
    Program("mmlu-utility", "dmt_bench.mmlu_utility",
            "MMLU-Pro accuracy of the agent through the proxy, by condition"),
    Program("judge-corpus", "dmt_bench.judge_corpus.generate",
            "write judgment_corpus_v1 (seeded, deterministic)"),
    Program("auditor-eval-build", "dmt_bench.auditor_eval.build",
            "build auditor_eval_v1 from its narratives and MMLU-Pro"),
    Program("auditor-eval-build-v2", "dmt_bench.auditor_eval.build_v2",
            "build auditor_eval_v2 from texts_v2.yaml"),
    Program("auditor-calibrate", "dmt_bench.auditor_eval.calibrate",
            "fit the log-prob auditor's calibration from train-split runs"),
    Program("auditor-replay", "dmt_bench.auditor_eval.replay",
            "replay an LLM-only auditor-eval run through the pipeline, no model call"),
    Program("first-stage-train", "dmt_bench.auditor_eval.first_stage_train",
            "train the embedding first stage on the train split"),
    Program("first-stage-oof", "dmt_bench.auditor_eval.first_stage_oof",
            "out-of-fold first-stage scores of train items"),
    Program("first-stage-gate", "dmt_bench.auditor_eval.first_stage_gate",
            "the first stage as a gate, per kind of text, on train scores"),
    Program("first-stage-report", "dmt_bench.auditor_eval.first_stage_report",
            "two first stages side by side from committed replays"),
)  # fmt: skip

COMMANDS: tuple[str, ...] = (*(p.name for p in PROGRAMS), "perf")


def _pass_through(subparsers: Any, name: str, help: str) -> argparse.ArgumentParser:
    # No option of its own ("\0" is the only prefix): every argument, "--help" included,
    # reaches the program's parser as written.
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=help, add_help=False, prefix_chars="\0"
    )
    parser.add_argument("argv", nargs="*")
    return parser


def register(subparsers: Any) -> None:
    """Add every program, and ``perf``, to ``dmt-bench``."""
    for program in PROGRAMS:
        _pass_through(subparsers, program.name, program.help).set_defaults(func=program)
    perf = _pass_through(subparsers, "perf", "a performance script of benchmarks/perf/")
    perf.set_defaults(func=run_perf)


def perf_dir() -> Path:
    """``benchmarks/perf`` of the source checkout this package was imported from."""
    return Path(__file__).resolve().parents[1] / "benchmarks" / "perf"


def perf_scripts(folder: Path | None = None) -> dict[str, str]:
    """Name -> first docstring line of every runnable script (one with a ``__main__`` block;
    the others are helpers the scripts import)."""
    folder = folder or perf_dir()
    found = {}
    for path in sorted(folder.glob("*.py")):
        source = path.read_text(encoding="utf-8")
        if 'if __name__ == "__main__":' not in source:
            continue
        doc = (ast.get_docstring(ast.parse(source)) or "").strip()
        found[path.stem] = doc.splitlines()[0] if doc else ""
    return found


def run_perf(args: argparse.Namespace) -> int:
    """``dmt-bench perf [NAME [ARGS...]]``: list the scripts, or run one as ``__main__``."""
    folder = perf_dir()
    if not folder.is_dir():
        raise ConfigError(
            f"dmt-bench perf runs the scripts of a source checkout; {folder} does not exist "
            "(clone the repository and install it with pip install -e '.[bench]')"
        )
    scripts = perf_scripts(folder)
    argv: Sequence[str] = args.argv
    if not argv or argv[0] in ("-h", "--help"):
        width = max(map(len, scripts))
        print("usage: dmt-bench perf NAME [ARGS...]   (NAME --help for its options)\n")
        print("\n".join(f"  {name:<{width}}  {line}" for name, line in scripts.items()))
        return 0
    name, rest = argv[0], list(argv[1:])
    if name not in scripts:
        raise ConfigError(f"no performance script {name!r}; one of: {', '.join(scripts)}")
    path = folder / f"{name}.py"
    saved = sys.argv, list(sys.path)
    sys.argv = [str(path), *rest]
    sys.path.insert(0, str(folder))  # as ``python benchmarks/perf/NAME.py`` would
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as stop:  # the script's own exit (sys.exit(main()) or argparse)
        code = stop.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        sys.argv, sys.path[:] = saved
    return 0
