"""The mitigation mode of a request: a plain type, apart from the policy that parses it.

Request types (``dmt_proxy.exchange``), the outbox and the renderer name a mode without
loading the policy's YAML and JSON-schema parsers; ``dmt_proxy.policy`` re-exports it
for the policy's own users.
"""

from __future__ import annotations

from enum import Enum


class Mode(str, Enum):
    """Mitigation mode for a request.

    ===================  ===  ==============  ===============  ===========
    mode                 SSP  writes audited  memories tagged  instruction
    ===================  ===  ==============  ===============  ===========
    ``off``              no   no              no               no
    ``ssp``              yes  no              no               no
    ``dmt``              no   yes             yes              yes
    ``dmt-tags``         no   yes             yes              no
    ``dmt-instruction``  no   no              no               yes
    ``ssp+dmt``          yes  yes             yes              yes
    ===================  ===  ==============  ===============  ===========

    ``dmt`` is the paper's method: the auditor tags memories at write time, and
    retrieved memories are shown with their tags after the instruction to treat
    tagged content as opinion. The two ablations separate its parts: ``dmt-tags``
    shows the tags without the instruction; ``dmt-instruction`` shows the memories
    untagged with the instruction (its writes are not audited: nothing it shows
    depends on an audit, and skipping it keeps quarantine or drop from changing
    which memories it sees).
    """

    OFF = "off"
    SSP = "ssp"
    DMT = "dmt"
    DMT_TAGS = "dmt-tags"
    DMT_INSTRUCTION = "dmt-instruction"
    SSP_DMT = "ssp+dmt"

    @property
    def uses_ssp(self) -> bool:
        """The static fairness system prompt is added."""
        return self in (Mode.SSP, Mode.SSP_DMT)

    @property
    def audits_writes(self) -> bool:
        """The auditor reviews the memories this mode writes (they start ``pending``)."""
        return self in (Mode.DMT, Mode.DMT_TAGS, Mode.SSP_DMT)

    @property
    def shows_tags(self) -> bool:
        """Retrieved memories are shown with their audit status and bias tag."""
        return self in (Mode.DMT, Mode.DMT_TAGS, Mode.SSP_DMT)

    @property
    def shows_instruction(self) -> bool:
        """The DMT instruction (``audit.dmt_prompt``) precedes the retrieved memories."""
        return self in (Mode.DMT, Mode.DMT_INSTRUCTION, Mode.SSP_DMT)

    @property
    def uses_dmt(self) -> bool:
        """Any part of DMT is on (tags, the instruction, or both)."""
        return self.shows_tags or self.shows_instruction
