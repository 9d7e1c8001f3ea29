"""The console shows a tag's group and tendency grounded in the text, never an ungrounded rationale.

In-process app as in ``test_review`` (its scripted judge tags every memory mentioning
"60" or "old" as an age bias against "people over 60", with the rationale "generalises
about older people"), so what is under test is where grounding is applied and shown.
"""

from __future__ import annotations

from pathlib import Path

from dmt_proxy.memory.base import Scope
from dmt_proxy.tags import AuditStatus, BiasTag
from tests.unit.test_console import sign_in
from tests.unit.test_review import ADMIN, proxy, seed

INVENTED = "studies show people who grew up on farms work harder"


async def test_a_group_the_text_names_is_shown_with_its_rationale(tmp_path: Path) -> None:
    async with proxy(tmp_path) as (app, c):
        mid = await seed(app, c, "alice", "Honestly, old folks can't learn computers.")
        await sign_in(c)
        page = (await c.get(f"/console/memories/{mid}")).text
        assert 'id="memory-group">old folks<' in page
        assert "generalises about older people" in page  # names the group: kept
        assert "people over 60" not in page  # the judge's group is not in the text
        assert "rationale kept (it names the group)" in page


async def test_a_tag_with_no_group_in_the_text_shows_no_group_and_no_rationale(
    tmp_path: Path,
) -> None:
    async with proxy(tmp_path) as (app, c):
        mid = await seed(app, c, "bob", "My old car broke down on the way to work.")
        record = await app.state.memory.review.backend.get(Scope(user="bob"), mid)
        assert record.audit_status is AuditStatus.TAGGED  # the status is kept
        assert record.tag.target_group == "" and record.tag.rationale == ""
        assert record.tag.grounding is not None and not record.tag.grounding.grounded
        queue = (await c.get("/v1/reviews/queue", headers=ADMIN)).json()["data"]
        evidence = next(i["evidence"] for i in queue if i["id"] == mid)
        assert evidence["target_group"] == "" and evidence["rationale"] == ""
        await sign_in(c)
        page = (await c.get(f"/console/memories/{mid}")).text
        assert "no group named in the text" in page
        assert "people over 60" not in page and "generalises about older people" not in page


async def test_a_tag_stored_before_grounding_is_grounded_for_display(tmp_path: Path) -> None:
    async with proxy(tmp_path) as (app, c):
        mid = await seed(app, c, "carol", "People over 60 never really get new technology.")
        backend = app.state.memory.review.backend
        old = BiasTag(bias_type="age", target_group="farmers", tendency="favoring farmers",
                      score=0.9, rationale=INVENTED)  # fmt: skip
        await backend.update(Scope(user="carol"), mid, audit_status=AuditStatus.TAGGED, tag=old)
        await sign_in(c)
        page = (await c.get(f"/console/memories/{mid}")).text
        assert 'id="memory-group">People over 60<' in page
        assert "farm" not in page.split("<h2>As the agent sees it</h2>")[0]
