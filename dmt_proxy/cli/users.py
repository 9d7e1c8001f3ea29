"""``dmt-proxy erase --user U`` and ``dmt-proxy export --user U [--out FILE]``.

Both open the store, the outbox and the review trail the policy names (SQLite or
PostgreSQL, as the proxy does), without an auditor or a worker. With the SQLite outbox
or an on-disk store (mem0's Qdrant allows one process per path) stop the proxy on the
same state directory first, as for ``audit-backfill``; on a shared PostgreSQL
deployment they run beside the proxies (a running proxy's admin API does the same:
``DELETE /v1/memories?user=U``, ``GET /v1/admin/export?user=U``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from pydantic import ValidationError

from dmt_proxy.errors import ConfigError
from dmt_proxy.memory.assembly import erase_stored_user, export_stored_user
from dmt_proxy.memory.base import Scope
from dmt_proxy.settings import Settings


def _user(value: str) -> str:
    try:
        return Scope(user=value).user
    except ValidationError as exc:
        reason = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"invalid --user: {reason}") from None


def cmd_erase(args: argparse.Namespace, settings: Settings) -> int:
    """Erase one user everywhere the proxy writes; print what was done as JSON."""
    user = _user(args.user)
    erasure = asyncio.run(erase_stored_user(settings, settings.load_policy(), user,
                                            full=args.vacuum_full))  # fmt: skip
    print(erasure.model_dump_json(indent=2), flush=True)
    return 0


def cmd_export(args: argparse.Namespace, settings: Settings) -> int:
    """Write everything held about one user as one JSON document (stdout or ``--out``)."""
    user = _user(args.user)
    document = asyncio.run(export_stored_user(settings, settings.load_policy(), user))
    text = document.model_dump_json(indent=2) + "\n"
    if args.out in (None, "-"):
        sys.stdout.write(text)
        return 0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"{out}: {len(document.memories)} memories, {len(document.outbox)} queued writes, "
          f"{len(document.trail)} trail events of {user}", file=sys.stderr, flush=True)  # fmt: skip
    return 0
