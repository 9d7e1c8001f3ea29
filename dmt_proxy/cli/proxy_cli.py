"""``dmt-proxy``: run the proxy and manage the embedded local models.

Every flag can also be set with its ``DMT_*`` environment variable.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dmt_proxy.cli.framework import Cli, CommandGroup
from dmt_proxy.errors import ConfigError
from dmt_proxy.loop_lag import favour_the_event_loop
from dmt_proxy.settings import Settings
from dmt_proxy.upstream import launcher, local_models


def _models_arg(names: list[str]) -> list[local_models.LocalModel]:
    if not names or names == ["all"]:
        return list(local_models.LOCAL_MODELS.values())
    return [local_models.get_model(n) for n in names]


def _print(msg: str) -> None:
    print(msg, flush=True)


def cmd_serve(args: argparse.Namespace) -> int:
    settings: Settings = args.settings
    import uvicorn

    from dmt_proxy.api import create_app
    from dmt_proxy.upstream.factory import check_client

    settings.load_policy()  # fail fast with a clear message before uvicorn starts
    check_client(settings)
    favour_the_event_loop()
    app = create_app(settings)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level,
                access_log=False)  # fmt: skip
    return 0


def cmd_console(args: argparse.Namespace) -> int:
    """The review console against a shared PostgreSQL deployment: a proxy that drains
    nothing (``DMT_WORKER=off``), so it needs the shared outbox (``DMT_OUTBOX=postgres``)."""
    settings: Settings = args.settings
    if not settings.admin_key and not settings.tenants_file:
        raise ConfigError(
            "the review console needs DMT_ADMIN_KEY (or a tenants file with 'review: true')"
        )
    _print(f"review console: http://{settings.host}:{settings.port}/console")
    return cmd_serve(args)


def cmd_mcp(args: argparse.Namespace) -> int:
    from dmt_proxy.mcp_server import stdio

    return stdio.main(args.settings, user_id=args.user_id)


def _lazy(name: str, module: str = "reviews") -> Callable[[argparse.Namespace], int]:
    """A command of ``dmt_proxy.cli.<module>`` (``reviews``, ``users``), imported when it
    runs (it loads the stores)."""

    def run(args: argparse.Namespace) -> int:
        loaded = importlib.import_module(f"dmt_proxy.cli.{module}")
        command: Callable[[argparse.Namespace, Settings], int] = getattr(loaded, name)
        return command(args, args.settings)

    return run


def cmd_worker(args: argparse.Namespace) -> int:
    settings: Settings = args.settings
    from dmt_proxy.cli.worker import main as run_worker

    favour_the_event_loop()
    return run_worker(settings)


def cmd_models(args: argparse.Namespace) -> int:
    settings: Settings = args.settings
    models = _models_arg(args.names)
    if args.action == "pull":
        for model in models:
            local_models.pull(settings.cache_dir, model, force=args.force, progress=_print)
            if args.verify and not local_models.verify(settings.cache_dir, model):
                raise ConfigError(f"{model.name}: sha256 mismatch on re-check")
    elif args.action == "start":
        for model in models:
            _print(
                f"{model.name}: starting llama-server on port {launcher.status(settings, model).port}"
            )
            st = launcher.start(settings, model, wait_s=args.wait)
            _print(f"{model.name}: ready (pid {st.pid}) as {model.alias}")
    elif args.action == "stop":
        for model in models:
            stopped = launcher.stop(settings, model)
            _print(f"{model.name}: {'stopped' if stopped else 'was not running'}")
    else:
        _print(f"{'model':<14} {'alias':<20} {'pulled':<7} {'running':<8} {'healthy':<8} port")
        for model in models:
            st = launcher.status(settings, model)
            _print(f"{model.name:<14} {model.alias:<20} {st.pulled!s:<7} {st.running!s:<8} "
                   f"{st.healthy!s:<8} {st.port}")  # fmt: skip
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    settings: Settings = args.settings
    from dmt_proxy.cli.demo import DemoOptions, run_demo

    options = DemoOptions(model=args.model, user=args.user, audit_timeout_s=args.audit_timeout,
                          contrast=not args.no_contrast, console=args.console)  # fmt: skip
    return run_demo(settings, options)


def cmd_tenants(args: argparse.Namespace) -> int:
    settings: Settings = args.settings
    from dmt_proxy.api.auth import Tenants, hash_key

    if args.action == "hash-key":
        key = sys.stdin.readline().strip() if args.value in (None, "-") else args.value
        if not key:
            raise ConfigError("no key given (argument, or '-' to read one line from stdin)")
        print(hash_key(key))
    else:
        path = Path(args.value or settings.tenants_file or "")
        tenants = Tenants.load(path)
        print(
            f"{path}: {len(tenants.by_hash)} tenant(s): {', '.join(sorted(tenants.by_hash.values()))}"
        )
    return 0


def cmd_backfill(args: argparse.Namespace) -> int:
    settings: Settings = args.settings
    import asyncio

    from dmt_proxy.memory.assembly import backfill_store
    from dmt_proxy.memory.write.backfill import DEFAULT_STATUSES
    from dmt_proxy.tags import AuditStatus

    policy = settings.load_policy()
    statuses = (
        frozenset(AuditStatus(s.strip()) for s in args.status.split(","))
        if args.status
        else DEFAULT_STATUSES
    )
    report = asyncio.run(
        backfill_store(settings, policy, args.user or (), statuses=statuses, progress=_print)
    )
    _print(report.model_dump_json(indent=2))
    return 0 if report.unavailable == 0 else 1


def register(sub: Any) -> None:
    """Add the proxy's own commands (serve, worker, models, audit-backfill, tenants, demo,
    erase, export)."""
    serve = sub.add_parser("serve", help="run the OpenAI-compatible proxy")
    serve.add_argument("--host", help="bind address (DMT_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (DMT_PORT, default 8080)")
    serve.add_argument("--policy", dest="policy_file", type=Path,
                       help="policy YAML (DMT_POLICY_FILE, default policies/default.yaml)")  # fmt: skip
    serve.add_argument("--no-worker", dest="worker", action="store_const", const=False,
                       help="leave the outbox to 'dmt-proxy worker' processes (DMT_WORKER=off)")  # fmt: skip
    serve.set_defaults(func=cmd_serve)

    console = sub.add_parser(
        "console", help="serve the review console on the shared PostgreSQL outbox (no worker)"
    )
    console.add_argument("--host", help="bind address (DMT_HOST, default 127.0.0.1)")
    console.add_argument("--port", type=int, help="port (DMT_PORT, default 8080)")
    console.add_argument("--policy", dest="policy_file", type=Path,
                         help="policy YAML (DMT_POLICY_FILE)")  # fmt: skip
    console.set_defaults(func=cmd_console, worker=False)

    reviews = sub.add_parser("reviews", help="export the human verdicts as a labelled dataset")
    reviews.add_argument("action", choices=["export"])
    reviews.add_argument("--out", default="reviews.jsonl", help="dataset file (JSON lines)")
    reviews.add_argument("--tenant", help="only this tenant's users")
    reviews.add_argument("--policy", dest="policy_file", type=Path,
                         help="policy YAML (DMT_POLICY_FILE)")  # fmt: skip
    reviews.set_defaults(func=_lazy("cmd_reviews"))

    calibrate = sub.add_parser(
        "calibrate", help="refit the auditor's calibration, fusion and tau on exported reviews"
    )
    calibrate.add_argument("--from-reviews", required=True, metavar="FILE",
                           help="a dataset written by 'dmt-proxy reviews export'")  # fmt: skip
    calibrate.add_argument(
        "--out", help="directory of the new file (default <state dir>/calibrations)"
    )
    calibrate.add_argument("--version", help="name of the new calibration (default dated)")
    calibrate.add_argument("--policy", dest="policy_file", type=Path,
                           help="policy YAML naming the running calibration")  # fmt: skip
    calibrate.set_defaults(func=_lazy("cmd_calibrate"))

    erase = sub.add_parser(
        "erase",
        help="erase one user everywhere the proxy writes (memories, outbox, spool, the "
        "review trail's words, the files' free space); the trail keeps tombstones",
    )
    erase.add_argument("--user", required=True, help="the user (tenant/user with tenants)")
    erase.add_argument(
        "--vacuum-full", action="store_true",
        help="PostgreSQL: rewrite the tables (VACUUM FULL) so no byte of the deleted rows "
        "stays in their files; each table is locked while it is rewritten",
    )  # fmt: skip
    erase.add_argument("--policy", dest="policy_file", type=Path,
                       help="policy YAML (DMT_POLICY_FILE)")  # fmt: skip
    erase.set_defaults(func=_lazy("cmd_erase", "users"))

    export = sub.add_parser(
        "export", help="everything held about one user (memories, tags, trail) as one JSON"
    )
    export.add_argument("--user", required=True, help="the user (tenant/user with tenants)")
    export.add_argument("--out", help="file to write (default: standard output)")
    export.add_argument("--policy", dest="policy_file", type=Path,
                        help="policy YAML (DMT_POLICY_FILE)")  # fmt: skip
    export.set_defaults(func=_lazy("cmd_export", "users"))

    worker = sub.add_parser("worker", help="only drain the shared PostgreSQL outbox (no HTTP)")
    worker.add_argument("--policy", dest="policy_file", type=Path,
                        help="policy YAML (DMT_POLICY_FILE)")  # fmt: skip
    worker.set_defaults(func=cmd_worker)

    mcp = sub.add_parser("mcp", help="serve the MCP memory tools on stdin/stdout (desktop agents)")
    mcp.add_argument("--user-id", help="the user when a tool call names none")
    mcp.add_argument("--policy", dest="policy_file", type=Path,
                     help="policy YAML (DMT_POLICY_FILE)")  # fmt: skip
    mcp.set_defaults(func=cmd_mcp)

    models = sub.add_parser("models", help="pull, start, stop or list the embedded local models")
    models.add_argument("action", choices=["pull", "start", "stop", "status"])
    models.add_argument(
        "names", nargs="*", help=f"models ({', '.join(local_models.LOCAL_MODELS)}; default all)"
    )
    models.add_argument("--force", action="store_true", help="pull: re-assemble even if present")
    models.add_argument("--verify", action="store_true", help="pull: re-hash the file afterwards")
    models.add_argument(
        "--wait", type=float, default=180.0, help="start: seconds to wait for health"
    )
    models.set_defaults(func=cmd_models)

    backfill = sub.add_parser("audit-backfill", help="audit memories written without an audit")
    backfill.add_argument("--user", action="append", help="user scope to backfill (repeatable)")
    backfill.add_argument(
        "--policy", dest="policy_file", type=Path, help="policy YAML (DMT_POLICY_FILE)"
    )
    backfill.add_argument(
        "--status", help="statuses to (re)audit, comma-separated (default: unaudited,failed)"
    )
    backfill.set_defaults(func=cmd_backfill)

    tenants = sub.add_parser(
        "tenants", help="hash an API key for the tenants file, or check a file"
    )
    tenants.add_argument("action", choices=["hash-key", "check"])
    tenants.add_argument(
        "value", nargs="?", help="hash-key: the key ('-' = stdin); check: the file"
    )
    tenants.set_defaults(func=cmd_tenants)

    demo = sub.add_parser(
        "demo",
        help="show the proxy at work with the local models: two remarks, their audit verdicts, "
        "and a later request whose memories carry the bias tag",
    )
    demo.add_argument(
        "--model", default="qwen2.5-0.5b", help="local agent model (default qwen2.5-0.5b)"
    )
    demo.add_argument("--user", default="demo-user", help="memory scope of the demo's requests")
    demo.add_argument(
        "--audit-timeout", type=float, default=120.0, metavar="SECONDS",
        help="how long to wait for the auditor's verdicts (default 120)",
    )  # fmt: skip
    demo.add_argument(
        "--no-contrast", action="store_true",
        help="skip asking the later question again in mode off",
    )  # fmt: skip
    demo.add_argument(
        "--console", action="store_true",
        help="afterwards keep the proxy up and print its review console's URL (until Ctrl-C)",
    )  # fmt: skip
    demo.set_defaults(func=cmd_demo)


def global_options(parser: argparse.ArgumentParser) -> None:
    """The flags given before the command."""
    parser.add_argument("--state-dir", type=Path, help="state directory (DMT_STATE_DIR)")
    parser.add_argument("--cache-dir", type=Path, help="model cache (DMT_CACHE_DIR)")


def settings_from_args(args: argparse.Namespace) -> Settings:
    """``Settings`` from ``DMT_*``, with the flags that twin a variable on top."""
    overrides = {
        k: getattr(args, k, None)
        for k in ("state_dir", "cache_dir", "host", "port", "policy_file", "worker")
    }
    return Settings.from_env(**overrides)


GROUPS: tuple[CommandGroup, ...] = (
    CommandGroup(
        register,
        (
            "serve",
            "console",
            "reviews",
            "calibrate",
            "erase",
            "export",
            "worker",
            "mcp",
            "models",
            "audit-backfill",
            "tenants",
            "demo",
        ),
    ),
)

CLI = Cli(prog="dmt-proxy", description=__doc__ or "", groups=GROUPS, options=global_options,
          settings=settings_from_args)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The ``dmt-proxy`` argument parser."""
    return CLI.build_parser()


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``dmt-proxy``."""
    return CLI.main(argv)


if __name__ == "__main__":
    sys.exit(main())
