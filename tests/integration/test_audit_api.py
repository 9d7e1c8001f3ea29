"""The audit API on a real proxy process, called with the shipped SDK clients.

``dmt-proxy serve`` with a tenants file; its agent and its auditor are the shipped fake
upstream (``dmt_proxy.testing``), which answers every audit with one canned verdict (a
gender bias): what is under test is the API and the client over a real socket (waiting,
polling, tenants, errors) and that a text gets the tag a memory of it is stored with,
not a model's judgement. The real LLM auditor code parses that verdict; the policy's
decision and grounding run as on the write path.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from dmt_proxy.api.auth import hash_key
from dmt_proxy.client import AsyncAuditClient, AuditAPIError, AuditClient
from tests.proxy_process import (
    ADMIN,
    FakeUpstream,
    ProxyProcess,
    admin_memories,
    proxy_env,
    wait_outbox_empty,
    write_policy,
)

VERDICT = json.dumps(
    {"rationale": "It generalises about women.", "bias_detected": True, "bias_type": "gender",
     "target_group": "women", "tendency": "bad at math", "score": 0.9}
)  # fmt: skip
"""The fake auditor's verdict on every text."""
TEXT = "Women are bad at math, my manager says."
KEYS = {"acme": "integration-key-acme", "globex": "integration-key-globex"}


@dataclass
class Deployment:
    proxy: ProxyProcess
    fakes: tuple[FakeUpstream, ...]

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.proxy.port}"

    def stop(self) -> None:
        self.proxy.stop()
        for fake in self.fakes:
            fake.stop()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp("audit_api")
    tenants = tmp / "tenants.yaml"
    lines = ["version: 1", "tenants:"]
    for name, key in KEYS.items():
        lines += [f"  - name: {name}", f"    key_sha256: {hash_key(key)}"]
    tenants.write_text("\n".join(lines) + "\n")
    agent = FakeUpstream(args=("--answer", "Noted.")).start()
    judge = FakeUpstream(args=("--answer", VERDICT)).start()
    policy = write_policy(tmp / "policy.yaml", models={"agent": agent, "judge": judge},
                          default_model="agent", audit={"auditor_model": "judge"})  # fmt: skip
    proxy = ProxyProcess(state_dir=tmp / "state",
                         env=proxy_env(DMT_TENANTS_FILE=str(tenants)))  # fmt: skip
    deployed = Deployment(proxy, (agent, judge))
    try:
        proxy.start("--policy", str(policy))
        yield deployed
    finally:
        deployed.stop()


def test_the_sync_client_gets_the_tag_a_memory_of_the_text_is_stored_with(
    deployment: Deployment,
) -> None:
    with AuditClient(f"{deployment.root}/v1", KEYS["acme"]) as client:
        result = client.audit(TEXT, channel="crm", user="alice")
        assert client.get(result.id) == result  # kept for polling in the process
    assert result.status == "completed" and result.channel == "crm"
    outcome = result.outcome
    assert outcome is not None and outcome.audit_status == "tagged"
    assert outcome.tag is not None and outcome.tag.bias_type == "gender"
    assert outcome.decided_by == "auditor" and "judge" in outcome.judge
    # Nothing of the audited text was stored for its user, nor queued, nor put on the trail.
    base = deployment.proxy.base_url
    export = httpx.get(f"{base}/admin/export", params={"user": "acme/alice"}, headers=ADMIN,
                       timeout=30).json()  # fmt: skip
    assert (export["memories"], export["outbox"], export["trail"]) == ([], [], [])
    # The same text written to memory is stored with the same status and tag.
    written = httpx.post(f"{base}/memories", headers=ADMIN, timeout=30,
                         json={"user": "acme/bob", "query": TEXT})  # fmt: skip
    assert written.status_code == 200, written.text
    wait_outbox_empty(base, 60)
    [stored] = admin_memories(base, "acme/bob")
    assert stored["audit_status"] == outcome.audit_status
    assert stored["tag"] == outcome.model_dump(mode="json")["tag"]


async def test_the_async_client_polls_a_pending_audit(deployment: Deployment) -> None:
    async with AsyncAuditClient(deployment.root, KEYS["acme"], poll_interval_s=0.1) as client:
        result = await client.audit(TEXT, wait=0, speaker="assistant")  # 202 first, then polls
    assert result.status == "completed" and result.speaker == "assistant"
    assert result.outcome is not None and result.outcome.audit_status == "tagged"


async def test_tenants_see_only_their_own_audits(deployment: Deployment) -> None:
    async with AsyncAuditClient(deployment.root, KEYS["acme"]) as acme:
        audit_id = (await acme.audit(TEXT)).id
    async with AsyncAuditClient(deployment.root, KEYS["globex"]) as globex:
        with pytest.raises(AuditAPIError) as other:
            await globex.get(audit_id)
    assert other.value.status_code == 404
    with AuditClient(deployment.root, "not-a-key") as stranger, pytest.raises(AuditAPIError) as no:
        stranger.audit(TEXT)
    assert (no.value.status_code, no.value.error_type) == (401, "authentication_error")


def test_audits_are_counted_by_outcome_and_route(deployment: Deployment) -> None:
    with AuditClient(deployment.root, KEYS["acme"]) as client:
        client.audit(TEXT)
    exposition = httpx.get(f"{deployment.root}/metrics", timeout=30).text
    tagged = [line for line in exposition.splitlines()
              if line.startswith('dmt_api_audits_total{outcome="tagged"}')]  # fmt: skip
    assert tagged and float(tagged[0].split()[-1]) >= 1
    assert 'route="/v1/audits"' in exposition
