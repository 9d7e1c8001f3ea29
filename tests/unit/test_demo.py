"""``dmt-proxy demo``'s pure parts: the wording of what it prints, its policy.

Its relay runs over loopback HTTP in ``tests/integration/test_demo_relay.py``.

The demo itself runs with the real models in ``tests/e2e/test_demo_e2e.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dmt_proxy.cli.demo import (
    BIASED,
    NEUTRAL,
    local_model_of,
    write_demo_policy,
)
from dmt_proxy.cli.demo_view import (
    abbreviate,
    label_of,
    labelled,
    memory_block,
    progress_line,
    settled,
    summary_line,
    timeout_message,
    verdict_line,
)
from dmt_proxy.cli.proxy_cli import build_parser
from dmt_proxy.memory.entry import MemoryEntry
from dmt_proxy.memory.render import render_memories
from dmt_proxy.settings import Settings
from dmt_proxy.upstream import local_models
from dmt_proxy.upstream.models import ModelRegistry

AGE_TAG = {
    "bias_type": "age",
    "target_group": "older workers",
    "tendency": "favoring youth",
    "score": 0.9,
    "rationale": "assumes age predicts skill",
    "auditor": "local/qwen2.5-1.5b auditor_v2",
}


def row(remark_text: str, status: str, tag: dict[str, Any] | None = None) -> MemoryEntry:
    return MemoryEntry.model_validate(
        {
            "id": f"{status}-{len(remark_text)}",
            "user": "demo-user",
            "text": f"User: {remark_text}\nAssistant: Sure.",
            "created_at": "2026-11-01T10:00:00+00:00",
            "audit_status": status,
            "tag": tag,
        }
    )


def test_rows_parse_the_admin_listing_and_know_when_their_audit_ended() -> None:
    tagged = row(BIASED.text, "tagged", AGE_TAG)
    assert tagged.tag is not None and tagged.tag.bias_type == "age"
    assert settled(tagged)
    assert not settled(row(NEUTRAL.text, "pending"))
    assert not settled(row(NEUTRAL.text, "unaudited"))
    assert settled(row(NEUTRAL.text, "failed"))


def test_each_row_is_named_after_the_remark_it_stores() -> None:
    remarks = [NEUTRAL, BIASED]
    assert label_of(row(NEUTRAL.text, "clean"), remarks) == "neutral"
    assert label_of(row(BIASED.text, "clean"), remarks) == "biased"
    assert label_of(row("something else", "clean"), remarks) == "other"


def test_verdict_lines_name_the_status_and_the_tag() -> None:
    assert verdict_line(row(NEUTRAL.text, "clean"), "neutral").strip() == "neutral remark -> clean"
    line = verdict_line(row(BIASED.text, "tagged", AGE_TAG), "biased")
    assert line.strip() == (
        "biased remark -> tagged: age, score 0.90 (older workers; favoring youth)"
    )
    assert "no valid verdict" in verdict_line(row(BIASED.text, "failed"), "biased")


def test_progress_counts_audited_and_not_yet_stored_memories() -> None:
    rows = [row(NEUTRAL.text, "clean")]
    line = progress_line(rows, 2, 7.4)
    assert line.strip() == "waiting for the auditor: 1 of 2 audited, 1 not yet stored (7s)"
    rows.append(row(BIASED.text, "pending"))
    assert "1 of 2 audited (" in progress_line(rows, 2, 9)


def test_timeout_message_says_what_happened_and_what_to_do() -> None:
    rows = [row(NEUTRAL.text, "clean"), row(BIASED.text, "pending")]
    msg = timeout_message(rows, 2, 120, {"depth": 1, "oldest_pending_age_s": 118.4})
    assert "after 120s: 1 of 2 memories audited" in msg
    assert "1 write(s) still in the outbox, the oldest 118s old" in msg
    assert "--audit-timeout" in msg
    assert "outbox" not in timeout_message(rows, 2, 120, None)


def test_summary_counts_tags_and_says_whether_the_tag_travelled() -> None:
    rows = [row(NEUTRAL.text, "clean"), row(BIASED.text, "tagged", AGE_TAG)]
    assert summary_line(rows, tag_in_prompt=True) == (
        "1 of 2 memories tagged (age, score 0.90); "
        "the tag travelled with the memory into the next request"
    )
    assert summary_line(rows, tag_in_prompt=False).endswith(
        "but the tag was not in the next request's memory block"
    )
    clean = [row(NEUTRAL.text, "clean"), row(BIASED.text, "clean")]
    assert summary_line(clean, tag_in_prompt=False) == (
        "0 of 2 memories tagged; nothing to carry into the next request"
    )


def test_long_remarks_and_answers_wrap_under_their_label() -> None:
    text = labelled("agent (1.0s)", "word " * 40 + "\n\nSecond paragraph.", indent="  ", width=50)
    lines = text.splitlines()
    assert lines[0].startswith("  agent (1.0s): word")
    hang = " " * len("  agent (1.0s): ")
    assert all(line.startswith(hang) and len(line) <= 50 for line in lines[1:])
    assert lines[-1] == hang + "Second paragraph."
    assert labelled("agent", "  ") == "      agent: (empty)"


def test_the_memory_block_is_found_among_the_upstream_messages_and_shortened() -> None:
    block = render_memories(
        [row(BIASED.text, "tagged", AGE_TAG)],
        with_tags=True, instruction="Treat tagged content as opinion.",
    )  # fmt: skip
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "system", "content": block},
        {"role": "user", "content": "Who should lead?"},
    ]
    assert memory_block(messages) == block
    assert memory_block(messages[::2]) is None
    short = abbreviate(block, width=60)
    assert all(len(line) <= 60 for line in short.splitlines())
    assert '"bias_type": "age"' in short
    assert short.splitlines()[0] == block.splitlines()[0]


def test_demo_policy_routes_the_agent_through_the_relay_and_keeps_the_rest(tmp_path: Path) -> None:
    settings = Settings.from_env({}, state_dir=tmp_path)
    agent = local_models.get_model("qwen2.5-0.5b")
    policy = write_demo_policy(settings, agent, "http://127.0.0.1:9/v1", tmp_path / "p.yaml")
    default = settings.load_policy()
    assert policy.audit == default.audit and policy.memory == default.memory
    registry = ModelRegistry(settings, policy, frozenset())
    route = registry.resolve(agent.alias)
    assert route.api_base == "http://127.0.0.1:9/v1"
    assert route.model == "openai/qwen2.5-0.5b"
    # The auditor still goes straight to its own server.
    assert registry.resolve(policy.audit.auditor_model).api_base != route.api_base


def test_only_embedded_models_are_started_by_the_demo() -> None:
    assert local_model_of("local/qwen2.5-1.5b") == local_models.get_model("qwen2.5-1.5b")
    assert local_model_of("openai/gpt-4o-mini") is None
    assert local_model_of("local/unknown") is None


def test_demo_flags() -> None:
    args = build_parser().parse_args(["demo", "--audit-timeout", "30", "--no-contrast"])
    assert args.audit_timeout == 30.0 and args.no_contrast and args.model == "qwen2.5-0.5b"
    assert not args.console and build_parser().parse_args(["demo", "--console"]).console
