"""``dmt-bench``: benchmarks and probes (DIB, long-term simulation, auditor eval, IAT).

Each command group lives in its own module exposing ``register(subparsers)``;
the module adds its parser(s) and sets ``func`` to a callable taking the parsed
arguments and returning an exit code. The proxy's ``Settings`` (``DMT_*``) are built
once and reach every command as ``args.settings``. A command whose optional
dependencies are missing is still listed, and says which extra to install.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dmt_bench import programs
from dmt_proxy.cli.framework import Cli, CommandGroup

GROUPS: tuple[CommandGroup, ...] = (
    CommandGroup("dmt_bench.dib.cli", ("dib",), extra="bench"),
    CommandGroup("dmt_bench.sim.cli", ("compare", "heatmap", "run", "report"), "bench"),
    CommandGroup("dmt_bench.dose.cli", ("dose", "dose-report"), extra="bench"),
    CommandGroup("dmt_bench.auditor_eval.cli", ("auditor-eval", "first-stage-eval"), "bench"),
    CommandGroup("dmt_bench.auditor_eval.judge_cli", ("judge-train", "judge-report"), "bench"),
    CommandGroup("dmt_bench.iat.cli", ("iat", "iat-report", "iat-drift"), extra="bench"),
    CommandGroup("dmt_bench.programs", programs.COMMANDS, extra="bench"),
)

CLI = Cli(prog="dmt-bench", description=__doc__ or "", groups=GROUPS, sigterm=True)


def build_parser() -> argparse.ArgumentParser:
    """The ``dmt-bench`` argument parser, every command group loaded."""
    return CLI.build_parser()


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``dmt-bench``; SIGTERM stops a run as Ctrl-C does (exit 143)."""
    return CLI.main(argv)


if __name__ == "__main__":
    sys.exit(main())
