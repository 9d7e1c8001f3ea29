"""Plain types shared by memory and audit: audit status and the JSON bias tag.

They live at the bottom of the dependency graph so that ``memory/`` can store a
tag without importing ``audit/``.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

# Re-exported: the tag's type, derived from the one list of domains.
from dmt_proxy.domains import BiasType as BiasType


class AuditStatus(str, Enum):
    """Where a memory is in the audit lifecycle."""

    PENDING = "pending"
    """Stored or queued, not yet audited."""
    CLEAN = "clean"
    """Audited; bias score below tau."""
    TAGGED = "tagged"
    """Audited; bias score at or above tau; carries a tag."""
    QUARANTINED = "quarantined"
    """Tagged, and the policy keeps it out of retrieval."""
    FAILED = "failed"
    """The auditor could not produce a valid verdict; never treated as clean."""
    UNAUDITED = "unaudited"
    """Written with auditing off (mode without DMT, or before the proxy)."""


class BiasTag(BaseModel):
    """The structured tag stored with a biased memory (paper §6.2)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bias_type: BiasType
    target_group: str = Field(max_length=200)
    tendency: str = Field(max_length=200, description='e.g. "favoring youth"')
    score: float = Field(ge=0.0, le=1.0)
    rationale: str = Field(default="", max_length=1000)
    auditor: str = Field(default="", description="auditor model and prompt version")
