"""Report sections of a dose run beyond the per-cell tables, in one call for ``report.py``.

The positive control (``positive_control.verdict_lines``, with each pre-registered
content endpoint's MDE read against it), the content contrast in every mode
(``by_mode.mode_lines``) and the source × evaluated-domain content matrix
(``matrix.matrix_lines``), each empty when the run has none of it. The primary
endpoints themselves lead the report (``primary.py``), once.
"""

from __future__ import annotations

import math

from dmt_bench.dose.by_mode import interval_count, mode_lines
from dmt_bench.dose.matrix import matrix_lines
from dmt_bench.dose.positive_control import READ_MODE, verdict_lines
from dmt_bench.dose.results import DoseResults


def control_against_mde(results: DoseResults) -> list[str]:
    """Per pre-registered content endpoint: would the instrument have seen an effect of its
    MDE? Yes when the positive control on that source (mode off, same k) was seen and is at
    least that large."""
    if results.primary is None:
        return []
    controls = {(r.source, r.k): r for r in results.positive_control if r.mode == READ_MODE}
    out = []
    for e in results.primary.endpoints:
        if e.endpoint.contrast != "content" or not math.isfinite(e.estimate.mde):
            continue
        pc = controls.get((e.endpoint.source, e.endpoint.k))
        if pc is None or not math.isfinite(pc.contrast.value):
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


def addendum_intervals(results: DoseResults) -> int:
    """How many intervals the sections print (for the report's one multiplicity statement)."""
    estimates = [r.contrast for r in results.positive_control]
    if results.content_matrix is not None:
        estimates += [c.content for c in results.content_matrix.cells]
    finite = sum(1 for e in estimates if math.isfinite(e.low) and math.isfinite(e.high))
    return finite + interval_count(results.mode_contrasts)


def addendum_lines(results: DoseResults) -> list[str]:
    """The sections, each preceded by a blank line; [] when there is nothing to add."""
    agent = str(results.config.get("models", {}).get("agent", {}).get("model", "the agent"))
    out: list[str] = []
    for section in (
        verdict_lines(results.positive_control, agent) + control_against_mde(results),
        mode_lines(results.mode_contrasts),
        matrix_lines(results.content_matrix),
    ):
        if section:
            out += ["", *section]
    return out
