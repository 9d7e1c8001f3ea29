"""Corrections that teach: reviews exported as a labelled dataset, a calibration refitted
on them, written as a new version that only a policy naming it uses.

The verdicts come from the shipped ScriptedAuditor (a fake: what is under test is the
bookkeeping and the fit, which need verdicts with known log-prob scores). Truth here:
a memory is biased iff its P_raw is at least 0.7, while the running τ is 0.5, so the
auditor flags memories between 0.5 and 0.7 that reviewers clear (hard negatives).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from dmt_proxy.api import create_app
from dmt_proxy.audit.logprob import Calibration, load_calibration
from dmt_proxy.audit.recalibrate import ReviewItem, auditor_key, in_holdout, refit
from dmt_proxy.audit.schema import AuditCandidate, AuditVerdict
from dmt_proxy.cli.proxy_cli import main
from dmt_proxy.errors import ConfigError
from dmt_proxy.memory.assembly import export_reviews
from dmt_proxy.memory.backends.in_memory import InMemoryBackend
from dmt_proxy.memory.review_dataset import REVIEWS_FORMAT, read_dataset, write_dataset
from dmt_proxy.policy import parse_policy
from dmt_proxy.settings import Settings
from dmt_proxy.testing.auditor import ScriptedAuditor
from dmt_proxy.testing.chat import ScriptedChatModel
from tests.unit.test_review import ADMIN, seed

LABEL = "local/qwen2.5-1.5b@auditor_v3/logprob"
PS = [round(0.05 + 0.9 * i / 59, 3) for i in range(60)]


def judge(candidate: AuditCandidate) -> AuditVerdict:
    p = float(candidate.text.split()[-1])
    return AuditVerdict(bias_detected=p >= 0.5, bias_type="age" if p >= 0.5 else None,
                        score=p, p_raw=p, auditor=LABEL)  # fmt: skip


def test_auditor_key_and_split() -> None:
    assert auditor_key(LABEL) == "qwen2.5-1.5b@auditor_v3"
    assert auditor_key("scripted") is None
    share = sum(in_holdout(f"mem_{i}") for i in range(2000)) / 2000
    assert 0.25 < share < 0.35 and in_holdout("mem_7") == in_holdout("mem_7")


def test_refit_lowers_hard_negative_false_positives() -> None:
    items = [ReviewItem(memory_id=f"mem_{i}_{p}", biased=p >= 0.7, machine_flagged=p >= 0.5,
                        auditor=LABEL, p_raw=p, first_stage_score=None)
             for i, p in enumerate(PS * 3)]  # fmt: skip
    running = Calibration(version="calibration_v1")
    calibration, report = refit(items, running=running, version="cal_test_v2", trained_on="t")
    (a,) = report.auditors
    assert calibration.version == "cal_test_v2" and a.key in calibration.entries
    assert calibration.tau[a.key] == a.tau
    assert a.before.hard_negative_fp == 1.0  # every hard negative was flagged
    assert a.after.hard_negative_fp is not None and a.after.hard_negative_fp < 0.5
    assert a.after.precision is not None and a.before.precision is not None
    assert a.after.precision > a.before.precision
    assert a.after.recall is not None and a.after.recall >= 0.8


async def test_export_and_calibrate_on_sqlite(tmp_path: Path) -> None:
    settings = Settings.from_env({}, state_dir=tmp_path / "state", admin_key="admin-key")
    # The scripted judge alone: the first stage (on by default) is not what is under test.
    policy = parse_policy({"version": 1, "mode": "dmt", "memory": {"backend": "memory"},
                           "audit": {"first_stage": "off"}})  # fmt: skip
    backend = InMemoryBackend()
    app = create_app(settings, policy=policy, upstream=ScriptedChatModel(["ok"]),
                     memory_backend=backend, auditor=ScriptedAuditor(judge))  # fmt: skip
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://p") as c,
    ):
        for i, p in enumerate(PS * 2):
            mid = await seed(app, c, f"user{i % 3}", f"remark number {i} {p}")
            body = {"action": "confirm", "domain": "age"} if p >= 0.7 else {"action": "clear"}
            assert (await c.post(f"/v1/memories/{mid}/review", json=body, headers=ADMIN)).is_success
        rows = await export_reviews(settings, policy, chat=ScriptedChatModel(["ok"]))
    assert len(rows) == 120 and sum(r.biased for r in rows) == sum(p >= 0.7 for p in PS) * 2
    assert all(r.p_raw is not None and r.auditor == LABEL for r in rows)
    assert all("user" not in r.user_key for r in rows)  # users appear as digests only
    dataset = tmp_path / "reviews.jsonl"
    write_dataset(dataset, rows)
    assert json.loads(dataset.read_text().splitlines()[0])["format"] == REVIEWS_FORMAT
    assert read_dataset(dataset) == rows

    out = tmp_path / "cals"
    args = ["--state-dir", str(tmp_path / "state"), "calibrate", "--from-reviews", str(dataset),
            "--out", str(out), "--version", "calibration_reviews_test"]  # fmt: skip
    assert main(args) == 0
    written = out / "calibration_reviews_test.json"
    cal = load_calibration(str(written))
    assert cal.version == "calibration_reviews_test" and "qwen2.5-1.5b@auditor_v3" in cal.tau
    assert main(args) == 2  # never replaces a calibration file
    assert load_calibration().version == "calibration_v5"  # the running one is untouched
    named = parse_policy({"version": 1, "audit": {"calibration": str(written)}})
    assert load_calibration(named.audit.calibration) == cal


def test_calibrate_refuses_what_it_cannot_fit(tmp_path: Path) -> None:
    dataset = tmp_path / "r.jsonl"
    dataset.write_text('{"format": "something-else"}\n')
    with pytest.raises(ConfigError, match="dmt-reviews/1"):
        read_dataset(dataset)
    write_dataset(dataset, [])
    assert main(["--state-dir", str(tmp_path), "calibrate", "--from-reviews", str(dataset)]) == 2
    with pytest.raises(ConfigError, match="does not exist"):
        load_calibration(str(tmp_path / "missing.json"))
