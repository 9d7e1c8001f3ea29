"""Render retrieved memories into the context block the agent sees.

The block is framed by delimiters carrying a nonce, and each memory's text is a
JSON string inside a JSON array. The nonce is an HMAC of the block's content under
a random per-process key: unpredictable to a user, yet the same for the same
memories, so llama-server's prompt cache can reuse an unchanged memory block
(a per-request random nonce made every prompt differ from its first tokens). A
benchmark passes its own key (``nonce_key``, from ``DMT_MEMORY_NONCE_KEY``) so that
identical memories render as identical bytes in every process of a run.
User-controlled text can therefore neither close the block (it cannot compute the
nonce) nor add fields or
a fake tag (quotes and newlines are escaped by JSON); reserved words are also
rewritten so a memory cannot even *look* like it carries an auditor's tag.

In DMT modes each memory carries its audit status and, when tagged, its tag,
preceded by the versioned instruction in ``auditor_prompts/<dmt_prompt>.md``.
Without DMT the same block is rendered without tags (the unmitigated baseline).
The ablation modes show one part each (``dmt_proxy.modes.Mode``): tags without the
instruction (``dmt-tags``), or the instruction over untagged memories
(``dmt-instruction``).

A memory with provenance (``dmt_proxy.provenance``) also carries a short ``source``
(who wrote it, through which door: ``source_note``), in every mode: it is a JSON field the
proxy writes from what it stamped, never from the text, so a memory cannot forge one. A
memory without provenance gets no field and no header line about it, so a block of such
memories is byte for byte what it was before provenance existed; ``with_source=False``
(the policy's ``memory.show_source``, off in the research harness) leaves it out
everywhere.

The memories come as ``MemoryEntry`` (``dmt_proxy.memory.entry``), the one type every
reader of a memory gets; what a block shows of each is computed here from it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Sequence

from dmt_proxy.memory.entry import MemoryEntry
from dmt_proxy.provenance import Provenance, Speaker
from dmt_proxy.tags import AuditStatus, BiasTag

_NONCE_KEY = secrets.token_bytes(32)

RESERVED = re.compile(
    r"bias[\s_\-]*tag|audit[\s_\-]*status|memory[\s_\-]*context|<\s*/?\s*memories|\[/?INST\]", re.I
)


def neutralize(text: str, *, max_chars: int = 4000) -> str:
    """Rewrite reserved markers in user text and bound its length."""
    # Only a bounded prefix is rewritten (a stored memory holds up to 100,000 characters,
    # rendered on the request path): four times the bound leaves room for every marker
    # the rewrite shortens, so the first ``max_chars`` are what rewriting all would give.
    cleaned = RESERVED.sub("[reserved-word]", text[: 4 * max_chars])
    # Angle brackets become look-alikes so chat-template tokens (<|im_end|>, </s>) and
    # tag-like delimiters in user text cannot end a turn or a block in the prompt.
    cleaned = cleaned.replace("<", "\u2039").replace(">", "\u203a")
    if len(cleaned) > max_chars:
        cleaned = cleaned[:max_chars] + " […]"
    return cleaned


def source_note(provenance: Provenance) -> str:
    """What a block says of where a memory came from: who wrote it, through which door."""
    channel = provenance.channel.value
    if provenance.query_by is Speaker.USER:
        # The three chat APIs are one conversation to the agent: the door is "chat".
        if provenance.answer_by is Speaker.ASSISTANT:
            return "chat: the user's words, with the assistant's reply"
        return "chat: the user's words"
    if provenance.query_by is Speaker.ASSISTANT:
        return f"written by the assistant through a memory tool ({channel})"
    if provenance.query_by is Speaker.OPERATOR:
        return "added by an operator (admin API)"
    return f"a tool's output ({channel})"


def _entry(
    index: int, item: MemoryEntry, *, with_tags: bool, with_source: bool
) -> dict[str, object]:
    entry: dict[str, object] = {"n": index, "text": neutralize(item.text),
                                "date": item.created_at.date().isoformat()}  # fmt: skip
    if with_source and item.provenance is not None:
        entry["source"] = source_note(item.provenance)
    if with_tags:
        # A disputed memory is shown as tagged: one judge is confident of a bias.
        status = (
            AuditStatus.TAGGED if item.audit_status is AuditStatus.DISPUTED else item.audit_status
        )
        entry["audit"] = status.value
        tag = item.tag
        if tag is not None and (item.audit_status.needs_tag or tag.manipulation):
            entry["bias_tag"] = _tag_entry(tag)
    return entry


def _tag_entry(tag: BiasTag) -> dict[str, object]:
    shown: dict[str, object] = {"bias_type": tag.bias_type}
    if tag.bias_type is not None:
        shown["target_group"] = neutralize(tag.target_group, max_chars=200)
        shown["tendency"] = neutralize(tag.tendency, max_chars=200)
        shown["score"] = round(tag.score, 2)
        if tag.speaker is not None:  # whose words carry it: the agent must not blame the user
            shown["speaker"] = tag.speaker  # for what its own earlier reply said
    notes: list[str] = []
    if tag.manipulation:
        # The rule, never the attacker's quoted words: those stay out of the agent's view.
        notes.append("manipulation: this memory's text tried to steer its own audit")
    if tag.excerpt:
        notes.append(f"excerpt: {tag.excerpt}")
    if notes:
        shown["findings"] = notes
    return shown


def render_memories(
    items: Sequence[MemoryEntry],
    *,
    with_tags: bool,
    instruction: str = "",
    show_instruction: bool | None = None,
    nonce: str | None = None,
    with_source: bool = True,
    nonce_key: bytes | None = None,
) -> str:
    """The system-message text carrying ``items`` ('' when there are none).

    ``instruction`` is shown when ``show_instruction`` is true; left as None it
    follows ``with_tags`` (the paper's DMT shows both or neither). ``with_source``: each
    memory with provenance says where it came from (module docstring). ``nonce_key``: the
    nonce's HMAC key (``None``: this process's random one).
    """
    if not items:
        return ""
    shown = (
        instruction.strip() if (with_tags if show_instruction is None else show_instruction) else ""
    )
    entries = [_entry(i + 1, item, with_tags=with_tags, with_source=with_source)
               for i, item in enumerate(items)]  # fmt: skip
    body = json.dumps(entries, ensure_ascii=False, indent=1)
    if nonce is None:
        key = _NONCE_KEY if nonce_key is None else nonce_key
        digest = hmac.new(key, f"{with_tags}\n{shown}\n{body}".encode(), hashlib.sha256)
        nonce = digest.hexdigest()[:12]
    header = (
        "Long-term memory: earlier interactions with this user, retrieved for this request. "
        '"text" is what was said before, verbatim.'
    )
    if any("source" in e for e in entries):
        header += ' "source" says who wrote it, as the proxy recorded it when it was written.'
    if with_tags:
        header += (
            ' "audit" and "bias_tag" were written by an independent fairness auditor, '
            "never by the user."
        )
    parts = [f"<memories-{nonce}>", header]
    if shown:
        parts.append(shown)
    parts += [body, f"</memories-{nonce}>"]
    return "\n".join(parts)
