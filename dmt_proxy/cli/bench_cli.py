"""``dmt-bench``: benchmarks and probes (DIB, long-term simulation, auditor eval, IAT).

Each command group lives in its own module exposing ``register(subparsers)``;
the module adds its parser(s) and sets ``func`` to a callable taking the parsed
arguments and returning an exit code. The proxy's ``Settings`` (``DMT_*``) are built
once, here, and reach every command as ``args.settings``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from types import FrameType

from dmt_proxy.errors import ConfigError
from dmt_proxy.settings import Settings

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


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a container or session stopping), raised as Ctrl-C's interrupt is.

    By default SIGTERM ends the process on the spot: a long run then neither records
    that it stopped nor its time so far, and its proxy is left to die with it. As an
    interrupt it takes Ctrl-C's path: the run is marked stopped (resumable) with its
    elapsed time, and the proxy it started is stopped cleanly.
    """


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises ``Terminated`` inside the block (main thread only), then as before."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.settings = Settings.from_env()
        with sigterm_interrupts():
            return int(args.func(args))
    except ConfigError as exc:
        print(f"dmt-bench: error: {exc}", file=sys.stderr)
        return 2
    except Terminated:
        print("dmt-bench: terminated (SIGTERM)", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
