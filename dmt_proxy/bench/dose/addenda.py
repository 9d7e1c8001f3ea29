"""Report sections of a dose run beyond the per-cell tables, in one call for ``report.py``.

The pre-registered endpoints (``preregistration.primary_lines``), the positive control
(``positive_control.verdict_lines``) and the source × evaluated-domain content matrix
(``matrix.matrix_lines``), each empty when the run has none of it.
"""

from __future__ import annotations

from dmt_proxy.bench.dose.matrix import matrix_lines
from dmt_proxy.bench.dose.positive_control import READ_MODE, verdict_lines
from dmt_proxy.bench.dose.preregistration import primary_lines
from dmt_proxy.bench.dose.results import DoseResults


def control_against_mde(results: DoseResults) -> list[str]:
    """Per pre-registered content endpoint: would the instrument have seen an effect of its
    MDE? Yes when the positive control on that source (mode off, same k) was seen and is at
    least that large."""
    if results.primary is None:
        return []
    controls = {(r.source, r.k): r for r in results.positive_control if r.mode == READ_MODE}
    out = []
    for e in results.primary.endpoints:
        if e.endpoint.contrast != "content" or e.estimate.mde is None:
            continue
        pc = controls.get((e.endpoint.source, e.endpoint.k))
        if pc is None or pc.contrast.value is None:
            out.append(f"- {e.endpoint.id}: no positive control to read its MDE against.")
            continue
        big = pc.seen and pc.contrast.value >= e.estimate.mde
        out.append(
            f"- {e.endpoint.id}: MDE {e.estimate.mde:.2f}; the planted gap reads "
            f"{pc.contrast.value:+.2f} ({'seen' if pc.seen else 'not seen'}): "
            + (
                "the instrument sees an effect of at least the MDE on this agent."
                if big
                else "the instrument is not shown to see an effect of the MDE's size: "
                "a null here is uninformative."
            )
        )
    return out


def addendum_lines(results: DoseResults) -> list[str]:
    """The sections, each preceded by a blank line; [] when there is nothing to add."""
    agent = str(results.config.get("models", {}).get("agent", {}).get("model", "the agent"))
    out: list[str] = []
    for section in (
        primary_lines(results.primary),
        verdict_lines(results.positive_control, agent) + control_against_mde(results),
        matrix_lines(results.content_matrix),
    ):
        if section:
            out += ["", *section]
    return out
