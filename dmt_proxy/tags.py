"""Plain types shared by memory and audit: audit status, findings and the JSON bias tag.

They live at the bottom of the dependency graph so that ``memory/`` can store a
tag without importing ``audit/``.

Tag format versions: 1 (``bias_type`` required, no findings); 2 adds
``findings`` and ``first_stage_score`` and lets ``bias_type`` be
``None`` for a tag that carries only findings (a manipulation attempt in an
otherwise unbiased memory); 3 adds ``grounding`` (how the tag's group, tendency
and rationale were grounded in the memory's text, ``dmt_proxy.audit.grounding``). Every
new field has a default, so an older tag reads unchanged; ``grounding`` is left out of
the JSON while it is absent, so a tag without it is written byte for byte as format 2
wrote it.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Re-exported: the tag's type, derived from the one list of domains.
from dmt_proxy.domains import BiasType as BiasType

TAG_FORMAT_VERSION = 3
"""The tag layout written by this release (see the module docstring)."""


class AuditStatus(str, Enum):
    """Where a memory is in the audit lifecycle."""

    PENDING = "pending"
    """Stored or queued, not yet audited."""
    CLEAN = "clean"
    """Audited; bias score below tau."""
    TAGGED = "tagged"
    """Audited; bias score at or above tau (or a manipulation finding); carries a tag."""
    DISPUTED = "disputed"
    """The two judges disagree with confidence (the embedding classifier is sure of a bias
    the LLM auditor does not see, or the reverse); carries a tag and is shown as tagged."""
    QUARANTINED = "quarantined"
    """Tagged, and the policy keeps it out of retrieval."""
    FAILED = "failed"
    """The auditor could not produce a valid verdict; never treated as clean."""
    UNAUDITED = "unaudited"
    """Written with auditing off (mode without DMT, or before the proxy)."""

    @property
    def needs_tag(self) -> bool:
        """Statuses that are meaningless without a tag."""
        return self in (AuditStatus.TAGGED, AuditStatus.DISPUTED, AuditStatus.QUARANTINED)


class FindingKind(str, Enum):
    """What kind of observation the audit made besides (or instead of) a bias."""

    MANIPULATION = "manipulation"
    """The text addresses the auditor, imitates a verdict, a tag or the memory block,
    or smuggles model control tokens: flagged whatever the judges conclude."""
    EXCERPT = "excerpt"
    """The memory was longer than the audit bound; only the excerpt named was judged."""


MANIPULATION_RULES: tuple[str, ...] = (
    "special_token",
    "block_markup",
    "verdict_imitation",
    "forged_entry",
    "tag_imitation",
    "addresses_auditor",
    "instruction_override",
    "verdict_request",
    "role_marker",
    "planted_request",
    "planted_verdict",
)
"""The rules of ``dmt_proxy.audit.normalize`` (a bounded metric label set)."""


class Finding(BaseModel):
    """One observation of the audit, shown with the tag."""

    # Every field is written out, defaults included (the admin API's document says so).
    model_config = ConfigDict(
        frozen=True, extra="forbid", json_schema_serialization_defaults_required=True
    )

    kind: FindingKind
    rule: str = Field(max_length=40)
    """Which check produced it, e.g. ``addresses_auditor``, ``verdict_imitation``."""
    detail: str = Field(default="", max_length=200)
    """Evidence (a short, neutralized quote) or, for an excerpt, what was audited."""


class TagGrounding(BaseModel):
    """How a tag's group, tendency and rationale were grounded in the memory's text."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", json_schema_serialization_defaults_required=True
    )

    lexicon: str = Field(max_length=40)
    """The group lexicon version used, e.g. ``group_lexicon_v1``."""
    grounded: bool
    """``target_group`` is a span of the text naming a group; false: none was found (the
    target is then empty, never invented)."""
    source: Literal["span", "lexicon", "none"]
    """``span``: the judge's own group, found in the text; ``lexicon``: a lexicon group
    phrase found in the text; ``none``: nothing groundable."""
    span: str = Field(default="", max_length=200)
    """The words of the (normalised) text that name the group."""
    phrase: str = Field(default="", max_length=100)
    """The lexicon's normalised name of that group (e.g. ``older people``)."""
    domain: str | None = None
    """The lexicon entry's domain (may differ from the tag's ``bias_type``)."""
    rationale: Literal["kept", "dropped", "empty"] = "empty"
    """Whether the judge's rationale named the group (kept) or not (dropped, not shown)."""


class BiasTag(BaseModel):
    """The structured tag stored with a biased memory (paper §6.2), plus audit findings."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", json_schema_serialization_defaults_required=True
    )

    bias_type: BiasType | None = None
    """The bias domain; ``None`` only for a tag that carries findings alone."""
    target_group: str = Field(default="", max_length=200)
    tendency: str = Field(default="", max_length=200, description='e.g. "favoring youth"')
    score: float = Field(ge=0.0, le=1.0)
    rationale: str = Field(default="", max_length=1000)
    auditor: str = Field(default="", description="auditor model and prompt version")
    findings: tuple[Finding, ...] = ()
    first_stage_score: float | None = Field(default=None, ge=0.0, le=1.0)
    """The embedding classifier's probability of bias, when it judged the memory too."""
    # Left out while absent: an ungrounded tag keeps format 2's exact wire bytes.
    grounding: TagGrounding | None = Field(default=None, exclude_if=lambda v: v is None)
    """Format 3: how ``target_group``, ``tendency`` and ``rationale`` were grounded in the
    text; ``None`` on tags written before grounding (and on findings-only tags)."""
    speaker: Literal["user", "assistant", "both"] | None = Field(
        default=None, exclude_if=lambda v: v is None
    )
    """Whose words carry the bias (judge v2 scores each speaker's words apart): the user's,
    the assistant's (an assistant that generalised about a group), or both; ``None`` on tags
    of a judge that does not attribute (left out, so those keep their wire bytes)."""

    @model_validator(mode="after")
    def _says_something(self) -> BiasTag:
        if self.bias_type is None and not self.findings:
            raise ValueError("a tag needs a bias_type or at least one finding")
        return self

    @property
    def manipulation(self) -> bool:
        """Whether the audit found a manipulation attempt."""
        return any(f.kind is FindingKind.MANIPULATION for f in self.findings)

    @property
    def excerpt(self) -> str:
        """Which part of an oversized memory was audited ('' when all of it was)."""
        return next((f.detail for f in self.findings if f.kind is FindingKind.EXCERPT), "")
