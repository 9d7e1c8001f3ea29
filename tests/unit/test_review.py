"""Human review: the queue, human verdicts, the append-only trail and the hold on the auditor.

In-process app with the shipped in-memory backend, the real SQLite outbox and trail,
and the shipped ScriptedAuditor (a fake: these tests are about what a review stores
and who may make one, not about judgement; the browser e2e test uses the real
auditor).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from dmt_proxy.api import create_app
from dmt_proxy.api.auth import hash_key
from dmt_proxy.audit.protocol import AuditorUnavailable
from dmt_proxy.audit.schema import AuditCandidate, AuditVerdict, FirstStageOpinion
from dmt_proxy.exchange import Exchange
from dmt_proxy.memory.backends.in_memory import InMemoryBackend
from dmt_proxy.memory.base import Scope
from dmt_proxy.memory.review import (
    Evidence,
    ReviewAction,
    Reviewer,
    ReviewRequest,
    ReviewService,
)
from dmt_proxy.memory.write.outbox import SqliteOutbox
from dmt_proxy.memory.write.trail import MemoryTrail, SqliteTrail
from dmt_proxy.memory.write.worker import OutboxWorker
from dmt_proxy.metrics import Metrics
from dmt_proxy.modes import Mode
from dmt_proxy.policy import parse_policy
from dmt_proxy.settings import Settings
from dmt_proxy.tags import AuditStatus
from dmt_proxy.testing.auditor import ScriptedAuditor
from dmt_proxy.testing.chat import ScriptedChatModel

ADMIN = {"authorization": "Bearer admin-key", "x-dmt-reviewer": "rita"}
AGE = "People over 60 never really get new technology."


def judge(candidate: AuditCandidate) -> AuditVerdict:
    """Biased (age) for texts about age, clean otherwise; with both judges' opinions."""
    if "60" in candidate.text or "old" in candidate.text:
        verdict = AuditVerdict.biased("age", score=0.82, target_group="people over 60",
                                      tendency="disfavoring older people",
                                      rationale="generalises about older people",
                                      auditor="scripted@fake")  # fmt: skip
        return verdict.model_copy(update={
            "domain_probs": {"age": 0.9, "gender": 0.1}, "llm_score": 0.7,
            "first_stage": FirstStageOpinion(score=0.95, threshold=0.5,
                                             domain_probs={"age": 0.8, "other": 0.2}),
        })  # fmt: skip
    return AuditVerdict.clean(rationale="nothing", auditor="scripted@fake")


def tenants_file(path: Path) -> Path:
    path.write_text(
        "version: 1\ntenants:\n"
        f"  - name: acme\n    key_sha256: {hash_key('acme-key')}\n    review: true\n"
        f"  - name: globex\n    key_sha256: {hash_key('globex-key')}\n    review: true\n"
        f"  - name: initech\n    key_sha256: {hash_key('initech-key')}\n"
    )
    return path


@asynccontextmanager
async def proxy(
    tmp: Path, *, tenants: bool = False
) -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    settings = Settings.from_env(
        {}, state_dir=tmp / "state", admin_key="admin-key",
        tenants_file=tenants_file(tmp / "t.yaml") if tenants else None,
    )  # fmt: skip
    # The scripted judge alone: the first stage (on by default) is not what is under test.
    policy = parse_policy({"version": 1, "mode": "dmt", "memory": {"backend": "memory"},
                           "audit": {"first_stage": "off"}})  # fmt: skip
    app = create_app(settings, policy=policy, upstream=ScriptedChatModel(["noted"]),
                     memory_backend=InMemoryBackend(), auditor=ScriptedAuditor(judge))  # fmt: skip
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://p") as client,
    ):
        yield app, client


async def seed(app: Any, client: httpx.AsyncClient, user: str, query: str) -> str:
    resp = await client.post("/v1/memories", json={"user": user, "query": query, "answer": "ok"},
                             headers=ADMIN)  # fmt: skip
    assert resp.status_code == 200, resp.text
    assert await app.state.memory.drain(timeout_s=10)
    return str(resp.json()["id"])


async def test_queue_review_and_trail(tmp_path: Path) -> None:
    async with proxy(tmp_path) as (app, c):
        biased = await seed(app, c, "alice", AGE)
        await seed(app, c, "alice", "What is a milestone?")
        queue = (await c.get("/v1/reviews/queue", headers=ADMIN)).json()["data"]
        assert [i["id"] for i in queue] == [biased]  # the clean memory is not asked about
        item = queue[0]
        assert item["audit_status"] == "tagged" and item["domain"] == "age"
        ev = item["evidence"]
        # The staged auditor replaces the first stage's opinion (none in this policy).
        assert ev["llm_score"] == 0.7 and ev["first_stage_score"] is None
        assert ev["p_biased"] == 0.82 and ev["domain_probs"]["age"] == 0.9
        # The group as the memory's text writes it (grounded: a span of the text).
        assert ev["tau"] == 0.5 and ev["target_group"] == "People over 60"
        assert item["uncertainty"] == pytest.approx(1 - 0.32 / 0.5, abs=1e-4)

        detail = (await c.get(f"/v1/memories/{biased}/evidence", headers=ADMIN)).json()
        assert detail["evidence"]["rationale"] == "generalises about older people"
        views = {v["mode"]: v for v in detail["views"]}
        assert '"bias_type": "age"' in views["dmt"]["block"]
        assert "bias_tag" not in views["off"]["block"]

        resp = await c.post(f"/v1/memories/{biased}/review", headers=ADMIN,
                            json={"action": "clear", "reason": "a quote, not an opinion"})  # fmt: skip
        assert resp.status_code == 200, resp.text
        event = resp.json()["event"]
        assert event["actor"] == "reviewer:rita" and event["human"] is True
        assert (event["before_status"], event["after_status"]) == ("tagged", "clean")
        assert resp.json()["memory"]["tag"] is None

        # Retrieval reflects it at once: the DMT block shows the memory untagged.
        user = (await c.get("/v1/reviews/user", params={"user": "alice"}, headers=ADMIN)).json()
        assert '"bias_tag": {' not in user["block"] and "over 60" in user["block"]
        chat = app.state.upstream.chat
        chat.calls.clear()
        await c.post("/v1/chat/completions", json={"model": "local/smollm2", "user": "alice",
                     "messages": [{"role": "user", "content": "Who should lead, over 60?"}]})  # fmt: skip
        prompt = json.dumps(chat.calls[-1].wire_messages())
        assert "over 60" in prompt and '\\"bias_tag\\": {' not in prompt
        assert (await c.get("/v1/reviews/queue", headers=ADMIN)).json()["data"] == []
        history = (await c.get(f"/v1/memories/{biased}/evidence", headers=ADMIN)).json()
        assert [(e["action"], e["actor"]) for e in history["history"]] == [
            ("machine", "auditor:scripted@fake"),
            ("clear", "reviewer:rita"),
        ]
        assert history["held"] is True
        overview = (await c.get("/v1/reviews/overview", headers=ADMIN)).json()
        assert overview["audits"] == 2 and overview["reviews"] == 1
        assert overview["override_rate"] == 1.0


def test_uncertainty_orders_by_closeness_to_tau_and_disagreement() -> None:
    def ev(p: float, llm: float | None = None, fs: float | None = None) -> Evidence:
        return Evidence(p_biased=p, llm_score=p if llm is None else llm, first_stage_score=fs,
                        tau=0.6)  # fmt: skip

    assert ev(0.6).uncertainty == 1.0
    assert ev(1.0).uncertainty == pytest.approx(1 - 0.4 / 0.6, abs=1e-4)
    assert ev(0.0).uncertainty == 0.0
    assert ev(0.95, llm=0.1, fs=0.95).uncertainty == pytest.approx(0.85)  # the judges disagree
    assert Evidence(verdict_status="failed").uncertainty == 1.0


async def test_actions(tmp_path: Path) -> None:
    async with proxy(tmp_path) as (app, c):
        mid = await seed(app, c, "bob", AGE)

        async def act(action: str, **extra: Any) -> httpx.Response:
            return await c.post(f"/v1/memories/{mid}/review", headers=ADMIN,
                                json={"action": action, **extra})  # fmt: skip

        assert (await act("release")).status_code == 400  # not quarantined
        assert (await act("change_domain")).status_code == 400  # no domain
        moved = (await act("change_domain", domain="gender")).json()
        assert moved["memory"]["tag"]["bias_type"] == "gender"
        assert moved["memory"]["tag"]["auditor"] == "reviewer:rita"
        quarantined = (await act("quarantine")).json()["memory"]
        assert quarantined["audit_status"] == "quarantined"
        detail = (await c.get(f"/v1/memories/{mid}/evidence", headers=ADMIN)).json()
        assert not any(v["shown"] for v in detail["views"])
        assert (await act("release")).json()["memory"]["audit_status"] == "tagged"
        assert (await act("clear")).json()["memory"]["audit_status"] == "clean"
        assert (await act("confirm")).status_code == 400  # cleared: no domain left
        assert (await act("confirm", domain="age")).json()["memory"]["audit_status"] == "tagged"
        reaudit = (await act("reaudit", reason="new prompt")).json()
        assert reaudit["memory"]["audit_status"] == "tagged"
        assert reaudit["memory"]["tag"]["auditor"] == "scripted@fake"
        detail = (await c.get(f"/v1/memories/{mid}/evidence", headers=ADMIN)).json()
        assert detail["held"] is False and detail["history"][-1]["action"] == "machine"
        deleted = (await act("delete", reason="spam")).json()
        assert deleted["memory"] is None and deleted["event"]["after_status"] == "deleted"
        assert (await c.get(f"/v1/memories/{mid}", headers=ADMIN)).status_code == 404
        assert (await act("clear")).status_code == 404
        assert (await act("explode")).status_code == 400


async def test_worker_never_overwrites_a_human_verdict(tmp_path: Path) -> None:
    """A reviewer decides a memory whose audit is still to come: the machine verdict is
    not stored over it, until a re-audit is asked for."""
    policy = parse_policy({"version": 1, "mode": "dmt", "memory": {"backend": "memory"}})
    backend, trail = InMemoryBackend(), MemoryTrail()
    outbox = SqliteOutbox(tmp_path / "outbox.sqlite3")
    auditor = ScriptedAuditor([AuditorUnavailable("down", upstream="a", retryable=True), judge(
        AuditCandidate(text=AGE))])  # fmt: skip
    worker = OutboxWorker(outbox=outbox, backend=backend, backend_name="memory", auditor=auditor,
                          policy=policy.audit, metrics=Metrics(), trail=trail)  # fmt: skip
    review = ReviewService(backend=backend, outbox=outbox, trail=trail, policy=policy,
                           auditor=auditor, instruction="")  # fmt: skip
    mid = await outbox.enqueue(
        Exchange(scope=Scope(user="u"), query=AGE, answer="ok", request_id="r", mode=Mode.DMT)
    )
    (item,) = await outbox.due()
    await worker.process(item)  # stored pending; the auditor is down: rescheduled
    record = await backend.get(Scope(user="u"), mid)
    assert record is not None and record.audit_status is AuditStatus.PENDING
    await review.review(
        mid, ReviewRequest(action=ReviewAction.CONFIRM, domain="gender"), Reviewer(name="r")
    )
    (item,) = await outbox.pending()
    await worker.process(item)  # the auditor would say age; the human said gender
    record = await backend.get(Scope(user="u"), mid)
    assert record is not None and record.tag is not None and record.tag.bias_type == "gender"
    assert await outbox.pending() == []
    assert [e.action for e in await trail.history(mid)] == ["confirm"]
    await outbox.aclose()


async def test_trail_is_append_only(tmp_path: Path) -> None:
    async with proxy(tmp_path) as (app, c):
        mid = await seed(app, c, "carol", AGE)
    db = sqlite3.connect(tmp_path / "state" / "outbox.sqlite3")
    for statement in ("UPDATE review_trail SET actor = 'x'", "DELETE FROM review_trail"):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            db.execute(statement)
    assert db.execute("SELECT memory_id FROM review_trail").fetchall() == [(mid,)]
    db.close()
    trail = SqliteTrail(tmp_path / "state" / "outbox.sqlite3")  # reopens: version kept
    assert [e.memory_id for e in await trail.history(mid)] == [mid]
    await trail.aclose()


async def test_who_may_review(tmp_path: Path) -> None:
    async with proxy(tmp_path, tenants=True) as (app, c):
        acme = await seed(app, c, "acme/alice", AGE)
        globex = await seed(app, c, "globex/bob", AGE)
        body = {"action": "clear"}
        for headers in (
            {},
            {"authorization": "Bearer nope"},
            {"authorization": "Bearer initech-key"},
        ):
            assert (await c.post(f"/v1/memories/{acme}/review", json=body,
                                 headers=headers)).status_code == 401  # fmt: skip
            assert (await c.get("/v1/reviews/queue", headers=headers)).status_code == 401
        acme_key = {"authorization": "Bearer acme-key", "x-dmt-reviewer": "ann"}
        queue = (await c.get("/v1/reviews/queue", headers=acme_key)).json()["data"]
        assert [i["id"] for i in queue] == [acme]
        # Another tenant's memory is absent, whatever the route.
        assert (await c.get(f"/v1/memories/{globex}/evidence", headers=acme_key)).status_code == 404
        assert (await c.post(f"/v1/memories/{globex}/review", json=body,
                             headers=acme_key)).status_code == 404  # fmt: skip
        user = (await c.get("/v1/reviews/user", params={"user": "globex/bob"},
                            headers=acme_key)).json()  # fmt: skip
        assert user["user"] == "acme/globex/bob" and user["memories"] == []
        done = await c.post(f"/v1/memories/{acme}/review", json=body, headers=acme_key)
        assert done.json()["event"]["actor"] == "reviewer:acme/ann"
        overview = (await c.get("/v1/reviews/overview", headers=acme_key)).json()
        assert overview["audits"] == 1 and overview["outbox_depth"] == 0
        everything = (await c.get("/v1/reviews/queue", headers=ADMIN)).json()["data"]
        assert [i["id"] for i in everything] == [globex]
        assert json.dumps(everything).count("acme") == 0


async def test_backfill_leaves_a_human_verdict_alone(tmp_path: Path) -> None:
    from dmt_proxy.memory.base import MemoryRecord
    from dmt_proxy.memory.write.backfill import backfill

    policy = parse_policy({"version": 1, "mode": "dmt", "memory": {"backend": "memory"}})
    backend, trail = InMemoryBackend(), MemoryTrail()
    outbox = SqliteOutbox(tmp_path / "outbox.sqlite3")
    scope = Scope(user="u")
    for mid in ("decided", "open"):
        await backend.write(scope, MemoryRecord(id=mid, scope=scope, text=AGE,
                                                audit_status=AuditStatus.FAILED))  # fmt: skip
    review = ReviewService(backend=backend, outbox=outbox, trail=trail, policy=policy,
                           auditor=None, instruction="")  # fmt: skip
    await review.review("decided", ReviewRequest(action=ReviewAction.CLEAR), Reviewer(name="r"))
    statuses = frozenset({AuditStatus.FAILED, AuditStatus.CLEAN})  # re-audit the cleared one too
    report = await backfill(backend, ScriptedAuditor(judge), policy.audit, ["u"],
                            statuses=statuses, trail=trail)  # fmt: skip
    assert (report.held, report.audited) == (1, 1)
    decided, other = await backend.get(scope, "decided"), await backend.get(scope, "open")
    assert decided is not None and decided.audit_status is AuditStatus.CLEAN
    assert other is not None and other.audit_status is AuditStatus.TAGGED
    assert [e.action for e in await trail.history("open")] == ["machine"]
    await outbox.aclose()


def test_review_metric_labels_are_the_review_actions_and_directions() -> None:
    from dmt_proxy.memory.review import DIRECTIONS
    from dmt_proxy.metrics import REVIEW_ACTIONS

    assert tuple(a.value for a in ReviewAction) == REVIEW_ACTIONS
    metrics = Metrics()
    names = {s.labels["direction"] for m in metrics.reviews.collect() for s in m.samples}
    assert names == set(DIRECTIONS)


async def test_reviews_are_counted_by_direction(tmp_path: Path) -> None:
    async with proxy(tmp_path) as (app, c):
        a, b = await seed(app, c, "u", AGE), await seed(app, c, "u", "old people are slow")
        for mid, body in ((a, {"action": "clear"}), (b, {"action": "confirm"}),
                          (b, {"action": "change_domain", "domain": "ses"})):  # fmt: skip
            assert (await c.post(f"/v1/memories/{mid}/review", json=body, headers=ADMIN)).is_success
        text = (await c.get("/metrics")).text
    for line in ('dmt_reviews_total{action="clear",direction="untagged"} 1.0',
                 'dmt_reviews_total{action="confirm",direction="upheld"} 1.0',
                 'dmt_reviews_total{action="change_domain",direction="domain"} 1.0'):  # fmt: skip
        assert line in text
