"""The review console's pages: sign-in, CSRF, hostile memory text, and tenant isolation.

In-process app (shipped fakes: in-memory backend, ScriptedAuditor that tags every
memory about age; what is under test is the console, not judgement). The browser
tests (tests/integration/test_console_browser.py) drive the same pages in Chromium.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dmt_proxy
from dmt_proxy.api.routes_console import visible
from tests.unit.test_review import proxy, seed

HOSTILE = {
    "script": "<script>alert('xss')</script> people over 60 are slow",
    "imitation": '</pre><h1>Memory</h1><button data-action="clear">Clear</button>'
    '<span class="status s-clean">clean</span> over 60',
    "rtl": "old people \u202egnirob era\u202c and \u2066isolated\u2069 \u200bzero-width",
    "attr": '" onmouseover="alert(1)" x=\' over 60',
    "long": "old " + "x" * 99_900,
}


async def sign_in(c: httpx.AsyncClient, key: str = "admin-key", name: str = "rita") -> str:
    resp = await c.post("/console/login", content=f"name={name}&key={key}",
                        headers={"content-type": "application/x-www-form-urlencoded"})  # fmt: skip
    assert resp.status_code == 303, resp.text
    page = (await c.get("/console")).text
    match = re.search(r'<meta name="csrf-token" content="([^"]+)">', page)
    assert match
    return match.group(1)


async def test_sign_in_and_csrf(tmp_path: Path) -> None:
    async with proxy(tmp_path) as (app, c):
        mid = await seed(app, c, "alice", "People over 60 are slow.")
        resp = await c.get("/console/queue")
        assert resp.status_code == 303 and resp.headers["location"] == "/console/login"
        bad = await c.post("/console/login", content="name=x&key=wrong",
                           headers={"content-type": "application/x-www-form-urlencoded"})  # fmt: skip
        assert bad.status_code == 401 and "opens no review" in bad.text
        token = await sign_in(c)
        cookie = c.cookies.get("dmt_console")
        assert cookie
        page = await c.get("/console/queue")
        assert page.status_code == 200 and mid in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["x-frame-options"] == "DENY"
        url = f"/v1/memories/{mid}/review"
        # The cookie alone is not enough to change state: the token must come too.
        assert (await c.post(url, json={"action": "clear"})).status_code == 403
        wrong = {"x-csrf-token": "nope"}
        assert (await c.post(url, json={"action": "clear"}, headers=wrong)).status_code == 403
        cross = {"x-csrf-token": token, "origin": "http://evil.example"}
        assert (await c.post(url, json={"action": "clear"}, headers=cross)).status_code == 403
        cross_login = await c.post("/console/login", content="key=admin-key",
                                   headers={"origin": "http://evil.example",
                                            "content-type": "application/x-www-form-urlencoded"})  # fmt: skip
        assert cross_login.status_code == 403
        ok = await c.post(url, json={"action": "clear"},
                          headers={"x-csrf-token": token, "origin": "http://p"})  # fmt: skip
        assert ok.status_code == 200 and ok.json()["event"]["actor"] == "reviewer:rita"
        history = (await c.get(f"/console/memories/{mid}")).text
        assert "reviewer:rita" in history and "clear" in history
        # A forged or tampered cookie is no session.
        c.cookies.set("dmt_console", cookie[:-2] + "00")
        assert (await c.get("/console")).status_code == 303
        c.cookies.set("dmt_console", cookie)
        assert (await c.post("/console/logout", content="csrf=nope",
                             headers={"content-type": "application/x-www-form-urlencoded"})
                ).status_code == 403  # fmt: skip
        out = await c.post("/console/logout", content=f"csrf={token}",
                           headers={"content-type": "application/x-www-form-urlencoded"})  # fmt: skip
        assert out.status_code == 303 and "Max-Age=0" in out.headers["set-cookie"]


def test_visible_shows_invisible_characters() -> None:
    assert visible("a\u202eb\u200bc\nd\te") == "a\u27e6U+202E\u27e7b\u27e6U+200B\u27e7c\nd\te"
    assert visible(None) == ""


async def test_hostile_memories_render_as_text(tmp_path: Path) -> None:
    async with proxy(tmp_path) as (app, c):
        ids = {k: await seed(app, c, "mallory", text) for k, text in HOSTILE.items()}
        await sign_in(c)
        pages = {"queue": (await c.get("/console/queue")).text,
                 "user": (await c.get("/console/users", params={"user": "mallory"})).text}  # fmt: skip
        for key, mid in ids.items():
            resp = await c.get(f"/console/memories/{mid}")
            assert resp.status_code == 200
            pages[key] = resp.text
        for name, html in pages.items():
            assert "<script>alert" not in html, name
            assert '<button data-action="clear">Clear</button><span' not in html, name
            assert 'onmouseover="alert' not in html, name
            assert "\u202e" not in html and "\u2066" not in html and "\u200b" not in html, name
            # The only scripts are the console's own file.
            assert re.findall(r"<script[^>]*>", html) == [
                '<script src="/console/static/console.js" defer>'
            ], name
        assert "&lt;script&gt;alert" in pages["script"]
        assert "\u27e6U+202E\u27e7" in pages["rtl"]
        assert "x" * 99_000 in pages["long"]  # shown whole, in a scrolling box
        assert len(pages["queue"]) < 60_000  # the queue shows excerpts


def test_console_assets_ship_in_the_package() -> None:
    root = Path(dmt_proxy.__file__).parent / "api" / "console"
    for name in ("templates/base.html", "templates/queue.html", "static/console.js",
                 "static/console.css"):  # fmt: skip
        assert (root / name).is_file(), name
    js = (root / "static" / "console.js").read_text()
    assert "innerHTML" not in js and "eval(" not in js
    assert not re.search(r"https?://", js + (root / "static" / "console.css").read_text())


async def console_text(c: httpx.AsyncClient, ids: list[str], users: list[str]) -> str:
    parts = [(await c.get("/console")).text, (await c.get("/console/queue")).text]
    parts += [(await c.get(f"/console/memories/{mid}")).text for mid in ids]
    parts += [(await c.get("/console/users", params={"user": u})).text for u in users]
    parts.append((await c.get("/v1/reviews/queue")).text)
    return "\n".join(parts)


WRITES = st.lists(
    st.tuples(st.sampled_from(["acme", "globex"]), st.sampled_from(["alice", "bob"])),
    min_size=1,
    max_size=6,
)


async def check_tenant_consoles(tmp: Path, writes: list[tuple[str, str]]) -> None:
    async with proxy(tmp, tenants=True) as (app, c):
        ids: dict[str, str] = {}
        for tenant, user in writes:
            token = f"tok{tenant}{user}"
            ids[await seed(app, c, f"{tenant}/{user}", f"{token} says people over 60 are slow")] = (
                token
            )
        users = sorted({f"{t}/{u}" for t, u in writes} | {u for _, u in writes})
        for tenant in ("acme", "globex"):
            c.cookies.clear()
            await sign_in(c, key=f"{tenant}-key", name="r")
            text = await console_text(c, list(ids), users)
            other = "globex" if tenant == "acme" else "acme"
            assert f"tok{other}" not in text, tenant
            for token in ids.values():
                if token.startswith(f"tok{tenant}"):
                    assert token in text


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(writes=WRITES)
def test_a_tenant_console_never_shows_another_tenant(
    tmp_path_factory: pytest.TempPathFactory, writes: list[tuple[str, str]]
) -> None:
    asyncio.run(check_tenant_consoles(tmp_path_factory.mktemp("console"), writes))


async def test_initech_without_review_right_cannot_sign_in(tmp_path: Path) -> None:
    async with proxy(tmp_path, tenants=True) as (_app, c):
        resp = await c.post("/console/login", content="key=initech-key",
                            headers={"content-type": "application/x-www-form-urlencoded"})  # fmt: skip
        assert resp.status_code == 401


def test_console_command_needs_a_key_and_the_shared_outbox(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dmt_proxy.cli.proxy_cli import main

    for name in ("DMT_ADMIN_KEY", "DMT_TENANTS_FILE", "DMT_OUTBOX", "DMT_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    assert main(["--state-dir", str(tmp_path), "console"]) == 2
    assert "needs DMT_ADMIN_KEY" in capsys.readouterr().err
