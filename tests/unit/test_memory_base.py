"""Scope and record validation, audit combination, and the backend registry's errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel, ValidationError

from dmt_proxy.errors import ConfigError
from dmt_proxy.memory.backends.in_memory import keyword_score, keyword_tokens
from dmt_proxy.memory.base import (
    MAX_TEXT_CHARS,
    AuditState,
    MemoryRecord,
    Scope,
    combine_audit,
    interaction_text,
)
from dmt_proxy.memory.registry import (
    BackendConfig,
    BackendPlugin,
    create_backend,
    known_backends,
    register_backend,
)
from dmt_proxy.tags import AuditStatus, BiasTag


def tag(score: float, group: str = "older workers") -> BiasTag:
    return BiasTag(bias_type="age", target_group=group, tendency="disfavoring", score=score)


def test_scope_key_is_stable_and_distinguishes_parts() -> None:
    assert Scope(user="a").key == Scope(user="a").key
    keys = {
        Scope(user="a").key,
        Scope(user="a", agent="b").key,
        Scope(user="a", session="b").key,
        Scope(user="a,b").key,
        Scope(user="A").key,
    }
    assert len(keys) == 5
    assert len(Scope(user="x" * 256).key) == 32
    assert Scope(user="a", agent="z").user_key == Scope(user="a").user_key


@pytest.mark.parametrize(
    "fields",
    [
        {"user": ""},
        {"user": "   "},
        {"user": "a\nb"},
        {"user": "x" * 257},
        {"user": "a", "agent": ""},
    ],
)
def test_scope_rejects_bad_parts(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Scope(**fields)


def test_scope_visibility_rule() -> None:
    written = Scope(user="u", agent="a", session="s")
    assert Scope(user="u").sees(written)
    assert Scope(user="u", agent="a").sees(written)
    assert Scope(user="u", session="s").sees(written)
    assert not Scope(user="u", session="t").sees(written)
    assert not Scope(user="v").sees(written)
    assert not Scope(user="u", agent="a").sees(Scope(user="u"))


def test_record_from_interaction_and_consistency() -> None:
    record = MemoryRecord.from_interaction(Scope(user="u"), "q?", "r.")
    assert record.text == "User: q?\nAssistant: r."
    assert record.audit_status is AuditStatus.PENDING
    assert record.updated_at == record.created_at
    assert len(record.id) == 36
    with pytest.raises(ValidationError, match="requires a tag"):
        MemoryRecord(scope=Scope(user="u"), text="t", audit_status=AuditStatus.TAGGED)
    with pytest.raises(ValidationError):
        MemoryRecord(scope=Scope(user="u"), text="")


def test_one_interaction_format_cut_to_fit_a_record() -> None:
    assert interaction_text("q?", "r.") == "User: q?\nAssistant: r."
    long = interaction_text("q" * MAX_TEXT_CHARS, "r.")
    assert len(long) == MAX_TEXT_CHARS and long.endswith(" […]")
    record = MemoryRecord.from_interaction(Scope(user="u"), "q" * MAX_TEXT_CHARS, "r.")
    assert record.text == long and record.query == "q" * MAX_TEXT_CHARS


def test_combine_audit() -> None:
    clean = AuditState(status=AuditStatus.CLEAN)
    pending = AuditState(status=AuditStatus.PENDING)
    low = AuditState(status=AuditStatus.TAGGED, tag=tag(0.6, "low"))
    high = AuditState(status=AuditStatus.QUARANTINED, tag=tag(0.9, "high"))
    assert combine_audit([]) == AuditState(status=AuditStatus.CLEAN)
    assert combine_audit([clean, pending]).status is AuditStatus.PENDING
    assert combine_audit([clean, low]) == low
    both = combine_audit([low, clean, high])
    assert both.status is AuditStatus.QUARANTINED and both.tag == high.tag
    assert (
        combine_audit([AuditState(status=AuditStatus.UNAUDITED), clean]).status
        is AuditStatus.UNAUDITED
    )


def test_keyword_scoring() -> None:
    assert keyword_tokens("My dogs are named Rex!") == {"dog", "nam", "rex"}
    assert keyword_score(set(), {"a"}) == 0.0
    assert keyword_score({"dog"}, {"dog"}) == 1.0


async def test_unknown_backend_lists_known_ones(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"unknown memory backend 'nope'.*langmem, letta, mem0, memory"
    ):
        await create_backend("nope", BackendConfig(state_dir=tmp_path))


async def test_bad_options_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="scoring"):
        await create_backend("memory", BackendConfig(state_dir=tmp_path, options={"scoring": "x"}))
    with pytest.raises(ConfigError, match="cores: Extra inputs"):
        await create_backend("letta", BackendConfig(state_dir=tmp_path, options={"cores": 3}))


@pytest.mark.parametrize("name", ["memory", "mem0", "langmem", "letta"])
async def test_broken_store_path_is_a_config_error(name: str, tmp_path: Path) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError, match="memory store path"):
        await create_backend(name, BackendConfig(state_dir=blocker))


async def test_corrupt_store_file_is_a_config_error(tmp_path: Path) -> None:
    for name, file in (("letta", "paging.sqlite"), ("langmem", "store.sqlite")):
        path = tmp_path / "memory" / name / file
        path.parent.mkdir(parents=True)
        path.write_bytes(b"this is not a sqlite database" * 100)
        with pytest.raises(ConfigError, match="cannot be opened"):
            await create_backend(name, BackendConfig(state_dir=tmp_path))


async def test_register_backend_decorator(tmp_path: Path) -> None:
    @register_backend("test-null")
    class NullBackend(BackendPlugin):
        name: ClassVar[str]

        class Options(BaseModel):
            pass

        @classmethod
        async def open(cls, config: BackendConfig, options: BaseModel) -> Any:
            return cls()

    assert "test-null" in known_backends()
    assert isinstance(
        await create_backend("test-null", BackendConfig(state_dir=tmp_path)), NullBackend
    )
    with pytest.raises(ValueError, match="already registered"):
        register_backend("test-null")(type("Other", (), {}))
