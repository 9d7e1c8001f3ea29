"""Authentication comes before anything else on every protected route: a caller without a
key gets a 401 whatever else is wrong with the request (a missing or invalid query
parameter, a body that is not JSON, a body missing a field), so nothing about the
route's input is revealed to, or parsed for, an unauthenticated caller.

In-process app with the shipped in-memory backend and ScriptedAuditor (fakes: the test
is about the order of the checks, not about memory or judgement).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dmt_proxy.api.auth import hash_key
from dmt_proxy.api.routes import ROUTES
from dmt_proxy.api.routing import Access
from dmt_proxy.memory.backends.in_memory import InMemoryBackend
from dmt_proxy.policy import parse_policy
from dmt_proxy.settings import Settings
from dmt_proxy.testing.app import app_client
from dmt_proxy.testing.auditor import ScriptedAuditor
from dmt_proxy.testing.chat import ScriptedChatModel

NOT_JSON = b"{not json"
EMPTY = b"{}"
# (method, path, body): every admin and review route (checked against the declarations
# below), each with input that is also wrong.
PROTECTED = [
    ("GET", "/v1/memories", None),  # missing ?user=
    ("GET", "/v1/memories?user=", None),  # empty user
    ("POST", "/v1/memories", NOT_JSON),
    ("POST", "/v1/memories", EMPTY),  # missing user and query
    ("GET", "/v1/memories/mem_x", None),
    ("DELETE", "/v1/memories/mem_x", None),
    ("DELETE", "/v1/memories", None),  # missing ?user=
    ("GET", "/v1/admin/outbox", None),
    ("GET", "/v1/admin/export", None),  # missing ?user=
    ("GET", "/v1/admin/export?user=", None),  # empty user
    ("GET", "/v1/reviews/queue?limit=0", None),  # limit out of range
    ("GET", "/v1/reviews/queue?since=yesterday", None),  # not a datetime
    ("GET", "/v1/reviews/overview", None),
    ("GET", "/v1/reviews/user", None),  # missing ?user=
    ("GET", "/v1/memories/mem_x/evidence", None),
    ("POST", "/v1/memories/mem_x/review", NOT_JSON),
    ("POST", "/v1/memories/mem_x/review", EMPTY),  # missing action
]

TENANT_KEY = "tenant-key"
# (method, path, body): the audit API, behind a tenant's key, each with input that is also
# wrong; checked with a tenants file (without one, tenant routes are open).
TENANT_PROTECTED = [
    ("POST", "/v1/audits", NOT_JSON),
    ("POST", "/v1/audits", EMPTY),  # missing text
    ("POST", "/v1/audits", b'{"text": "x", "wait": -1}'),  # wait out of range
    ("GET", "/v1/audits/audit_x", None),
]


def test_every_admin_and_review_route_is_checked_here() -> None:
    """A new route behind the admin or a review key joins ``PROTECTED``, or this fails."""
    covered = {(method, path.split("?", 1)[0]) for method, path, _ in PROTECTED}
    for route in ROUTES:
        if route.access in (Access.ADMIN, Access.REVIEW):
            pattern = re.compile(re.sub(r"\{[^}]+\}", "[^/]+", route.path) + "$")
            assert any(m == route.method and pattern.match(p) for m, p in covered), route.name


@pytest.mark.parametrize(("method", "path", "body"), PROTECTED)
@pytest.mark.parametrize("key", [None, "Bearer wrong-key"])
async def test_a_caller_without_a_valid_key_gets_401_before_any_input_error(
    tmp_path: Path, method: str, path: str, body: bytes | None, key: str | None
) -> None:
    settings = Settings.from_env({}, state_dir=tmp_path / "state", admin_key="admin-key")
    policy = parse_policy({"version": 1, "mode": "dmt", "memory": {"backend": "memory"},
                           "audit": {"first_stage": "off"}})  # fmt: skip
    headers = {"content-type": "application/json"}
    if key is not None:
        headers["authorization"] = key
    async with app_client(settings, policy=policy, upstream=ScriptedChatModel(["ok"]),
                          memory_backend=InMemoryBackend(), auditor=ScriptedAuditor()) as proxy:  # fmt: skip
        resp = await proxy.client.request(method, path, content=body, headers=headers)
    assert resp.status_code == 401, (resp.status_code, resp.text)
    assert resp.json()["error"]["type"] == "authentication_error"


async def test_with_the_key_the_same_input_errors_are_400s(tmp_path: Path) -> None:
    """The control: the inputs above are wrong, so a caller with the key learns why."""
    settings = Settings.from_env({}, state_dir=tmp_path / "state", admin_key="admin-key")
    policy = parse_policy({"version": 1, "mode": "dmt", "memory": {"backend": "memory"},
                           "audit": {"first_stage": "off"}})  # fmt: skip
    headers = {"content-type": "application/json", "authorization": "Bearer admin-key",
               "x-dmt-reviewer": "rita"}  # fmt: skip
    async with app_client(settings, policy=policy, upstream=ScriptedChatModel(["ok"]),
                          memory_backend=InMemoryBackend(), auditor=ScriptedAuditor()) as proxy:  # fmt: skip
        for method, path, body in PROTECTED:
            resp = await proxy.client.request(method, path, content=body, headers=headers)
            if "mem_x" in path and body is None:
                assert resp.status_code == 404, (path, resp.text)  # valid input, no such memory
            elif path in ("/v1/admin/outbox", "/v1/reviews/overview"):
                assert resp.status_code == 200, (path, resp.text)  # no input to get wrong
            else:
                assert resp.status_code == 400, (method, path, body, resp.text)


def test_every_audit_route_is_checked_here() -> None:
    """A new route of the audit API joins ``TENANT_PROTECTED``, or this fails."""
    covered = {(method, path) for method, path, _ in TENANT_PROTECTED}
    for route in ROUTES:
        if route.access is Access.TENANT and route.path.startswith("/v1/audits"):
            pattern = re.compile(re.sub(r"\{[^}]+\}", "[^/]+", route.path) + "$")
            assert any(m == route.method and pattern.match(p) for m, p in covered), route.name


def _tenant_settings(tmp_path: Path) -> Settings:
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(
        f"version: 1\ntenants:\n  - name: acme\n    key_sha256: {hash_key(TENANT_KEY)}\n"
    )
    return Settings.from_env({}, state_dir=tmp_path / "state", tenants_file=tenants)


@pytest.mark.parametrize(("method", "path", "body"), TENANT_PROTECTED)
@pytest.mark.parametrize("key", [None, "Bearer wrong-key"])
async def test_a_caller_without_a_tenant_key_gets_401_before_any_input_error(
    tmp_path: Path, method: str, path: str, body: bytes | None, key: str | None
) -> None:
    policy = parse_policy({"version": 1, "mode": "dmt", "memory": {"backend": "memory"},
                           "audit": {"first_stage": "off"}})  # fmt: skip
    headers = {"content-type": "application/json"}
    if key is not None:
        headers["authorization"] = key
    async with app_client(_tenant_settings(tmp_path), policy=policy,
                          upstream=ScriptedChatModel(["ok"]), memory_backend=InMemoryBackend(),
                          auditor=ScriptedAuditor()) as proxy:  # fmt: skip
        resp = await proxy.client.request(method, path, content=body, headers=headers)
    assert resp.status_code == 401, (resp.status_code, resp.text)
    assert resp.json()["error"]["type"] == "authentication_error"


async def test_with_a_tenant_key_the_same_input_errors_are_400s(tmp_path: Path) -> None:
    """The control: with the tenant's key the bodies are refused for what they are."""
    policy = parse_policy({"version": 1, "mode": "dmt", "memory": {"backend": "memory"},
                           "audit": {"first_stage": "off"}})  # fmt: skip
    headers = {"content-type": "application/json", "authorization": f"Bearer {TENANT_KEY}"}
    async with app_client(_tenant_settings(tmp_path), policy=policy,
                          upstream=ScriptedChatModel(["ok"]), memory_backend=InMemoryBackend(),
                          auditor=ScriptedAuditor()) as proxy:  # fmt: skip
        for method, path, body in TENANT_PROTECTED:
            resp = await proxy.client.request(method, path, content=body, headers=headers)
            expected = 404 if body is None else 400  # a valid poll of an unknown audit: 404
            assert resp.status_code == expected, (method, path, body, resp.text)
