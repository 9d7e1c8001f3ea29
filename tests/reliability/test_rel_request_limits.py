"""Request-body limits of the chat route, below HTTP: nesting depth, Unicode, user ids."""

from __future__ import annotations

import json

import pytest

from dmt_proxy.api.admission import memory_scope
from dmt_proxy.api.bodies import MAX_JSON_DEPTH
from dmt_proxy.api.routes_chat import parse_chat_request
from dmt_proxy.errors import InvalidRequest
from dmt_proxy.memory.base import Scope


def body(content: object = "hi", **extra: object) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": content}], **extra}).encode()


def nested(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


def test_nesting_up_to_the_limit_is_accepted_and_beyond_is_a_400() -> None:
    # The body object is level 1 and the field's value level 2.
    parse_chat_request(body(extra=nested(MAX_JSON_DEPTH - 1)))
    with pytest.raises(InvalidRequest, match=f"deeper than {MAX_JSON_DEPTH}"):
        parse_chat_request(body(extra=nested(MAX_JSON_DEPTH)))
    with pytest.raises(InvalidRequest, match="nested too deeply"):
        parse_chat_request(b"[" * 100_000 + b"]" * 100_000)


@pytest.mark.parametrize(("raw", "ok"), [
    (b'{"messages":[{"role":"user","content":"\\ud83d\\ude00"}]}', True),   # an escaped pair
    (b'{"messages":[{"role":"user","content":"\\ud800"}]}', False),         # a lone surrogate
    (b'{"messages":[{"role":"user","content":"x","\\udfff":1}]}', False),   # ... in a key
    (b'{"messages":[{"role":"user","content":"\\\\ud800"}]}', True),        # a literal backslash
    (b'\xef\xbb\xbf{"messages":[{"role":"user","content":"bom"}]}', True),  # UTF-8 BOM
    (b'{"messages":[{"role":"user","content":"\xed\xa0\x80"}]}', False),    # encoded surrogate
    (b'{"messages":[{"role":"user","content":"\xff"}]}', False),            # not UTF-8
])  # fmt: skip
def test_unicode_that_cannot_be_sent_on_is_a_400(raw: bytes, ok: bool) -> None:
    if ok:
        assert parse_chat_request(raw).messages
    else:
        with pytest.raises(InvalidRequest):
            parse_chat_request(raw)


def test_memory_user_must_be_a_valid_scope() -> None:
    assert memory_scope(None, "  alice ") == Scope(user="alice")
    assert memory_scope("acme", "alice") == Scope(user="acme/alice")
    assert memory_scope(None, "   ") is None and memory_scope(None, None) is None
    for bad in ("a\tb", "x\x00", "u" * 300):
        with pytest.raises(InvalidRequest) as info:
            memory_scope(None, bad)
        assert info.value.param == "user"
    with pytest.raises(InvalidRequest):  # the tenant prefix counts toward the limit
        memory_scope("t" * 64, "u" * 200)
