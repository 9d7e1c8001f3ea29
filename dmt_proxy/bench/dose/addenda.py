"""Report sections of a dose run beyond the per-cell tables, in one call for ``report.py``.

The pre-registered endpoints (``preregistration.primary_lines``), the positive control
(``positive_control.verdict_lines``) and the source × evaluated-domain content matrix
(``matrix.matrix_lines``), each empty when the run has none of it.
"""

from __future__ import annotations

from dmt_proxy.bench.dose.matrix import matrix_lines
from dmt_proxy.bench.dose.positive_control import verdict_lines
from dmt_proxy.bench.dose.preregistration import primary_lines
from dmt_proxy.bench.dose.results import DoseResults


def addendum_lines(results: DoseResults) -> list[str]:
    """The sections, each preceded by a blank line; [] when there is nothing to add."""
    agent = str(results.config.get("models", {}).get("agent", {}).get("model", "the agent"))
    out: list[str] = []
    for section in (
        primary_lines(results.primary),
        verdict_lines(results.positive_control, agent),
        matrix_lines(results.content_matrix),
    ):
        if section:
            out += ["", *section]
    return out
