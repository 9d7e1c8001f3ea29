"""``dmt-bench``: benchmarks and probes (DIB, long-term simulation, auditor eval, IAT).

Each command group lives in its own module exposing ``register(subparsers)``;
the module adds its parser(s) and sets ``func`` to a callable taking the parsed
arguments and returning an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from dmt_proxy.errors import ConfigError

COMMAND_MODULES: tuple[str, ...] = (
    "dmt_proxy.bench.dib.cli",
    "dmt_proxy.bench.sim.cli",
    "dmt_proxy.bench.dose.cli",
    "dmt_proxy.bench.auditor_eval.cli",
    "dmt_proxy.bench.iat.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dmt-bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name or name.startswith(str(exc.name) + "."):
                continue  # that command group is not part of this build
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"dmt-bench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
