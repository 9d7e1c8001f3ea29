"""``dmt-proxy reviews export`` and ``dmt-proxy calibrate --from-reviews``.

Export reads the review trail and the memory store the policy names (SQLite or
PostgreSQL, as the proxy does; stop a single-process proxy on the same state
directory first, as for ``audit-backfill``). Calibrate reads an exported dataset,
refits on its train part (``dmt_proxy.audit.recalibrate``), prints before/after on
the held-back part, and writes a new calibration file that a policy must name
(``audit.calibration``) to use; it never replaces the running one.
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime
from pathlib import Path

from dmt_proxy.audit.logprob import load_calibration
from dmt_proxy.audit.recalibrate import ReviewItem, Scores, refit
from dmt_proxy.errors import ConfigError
from dmt_proxy.memory.assembly import export_reviews
from dmt_proxy.memory.review_dataset import read_dataset, write_dataset
from dmt_proxy.settings import Settings


def _say(text: str) -> None:
    print(text, flush=True)


def cmd_reviews(args: argparse.Namespace, settings: Settings) -> int:
    """Write the human verdicts as a labelled dataset."""
    policy = settings.load_policy()
    rows = asyncio.run(export_reviews(settings, policy, tenant=args.tenant))
    out = Path(args.out)
    write_dataset(out, rows)
    biased = sum(1 for r in rows if r.biased)
    _say(f"{out}: {len(rows)} reviewed memories ({biased} biased, {len(rows) - biased} clean)")
    return 0


def _fmt(s: Scores) -> str:
    def f(v: float | None) -> str:
        return "  n/a" if v is None else f"{v:5.2f}"

    return f"precision {f(s.precision)}  recall {f(s.recall)}  hard-negative FP {f(s.hard_negative_fp)}"


def cmd_calibrate(args: argparse.Namespace, settings: Settings) -> int:
    """Refit on the reviews and write a new, versioned calibration file."""
    policy = settings.load_policy()
    rows = read_dataset(Path(args.from_reviews))
    items = [
        ReviewItem(memory_id=r.memory_id, biased=r.biased, machine_flagged=r.machine_flagged,
                   auditor=r.auditor, p_raw=r.p_raw, first_stage_score=r.first_stage_score)
        for r in rows
    ]  # fmt: skip
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
    version = args.version or f"calibration_reviews_{stamp}"
    out_dir = Path(args.out or settings.state_dir / "calibrations")
    path = out_dir / f"{version}.json"
    if path.exists():
        raise ConfigError(f"{path} exists: a calibration file is never replaced; pick --version")
    running = load_calibration(policy.audit.calibration)
    calibration, report = refit(items, running=running, version=version,
                                trained_on=f"{Path(args.from_reviews).name}")  # fmt: skip
    if not report.auditors:
        raise ConfigError(
            f"nothing to refit: {report.skipped} of {report.items} reviews lack the auditor's "
            "P_raw (a log-prob verdict) or one class (biased and clean both needed)"
        )
    for a in report.auditors:
        _say(f"{a.key}: {a.train} train, {a.holdout} held back; tau {a.tau:.2f}"
             f"{' (with the first-stage fusion)' if a.fusion else ''}")  # fmt: skip
        _say(f"  before ({running.version}): {_fmt(a.before)}")
        _say(f"  after  ({version}): {_fmt(a.after)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(calibration.model_dump_json(indent=2) + "\n", encoding="utf-8")
    _say(f"wrote {path} ({report.skipped} reviews skipped). The running calibration is "
         f"unchanged; to use this one, set audit.calibration: {path} in the policy.")  # fmt: skip
    return 0
