"""The Decision-based Implicit Bias benchmark (DIB, paper §3), version ``dib-v1``.

- ``generator``: the 3,776 counterfactual samples, deterministic for a seed;
- ``domains``: one module per bias domain (``@bias_domain`` registry);
- ``scorer`` / ``answers``: asking an endpoint, expected-score and strict parsing;
- ``runner`` / ``report``: concurrent runs and the GBV report.

The scripted decision upstream the tests use is ``dmt_bench.testing.dib``.
"""

from dmt_bench.dib.generator import generate, stratified_sample
from dmt_bench.dib.schema import DIB_VERSION, Sample
from dmt_bench.dib.scorer import DecisionResult, ScoringConfig, ScoringMode, ask

__all__ = [
    "DIB_VERSION",
    "DecisionResult",
    "Sample",
    "ScoringConfig",
    "ScoringMode",
    "ask",
    "generate",
    "stratified_sample",
]
