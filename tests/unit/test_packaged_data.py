"""The project carries its own data: nothing is read from ``../shared``.

The packaged MMLU-Pro copy matches its README, and nothing names the old ``../shared``
location; that the quick compare's stream set-up reads only packaged data is run in a
subprocess by ``tests/integration/test_packaged_data_alone.py``.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGED = ROOT / "dmt_proxy" / "data" / "mmlu_pro"
CHECKS_SHARED = {Path(__file__), ROOT / "tests" / "integration" / "test_packaged_data_alone.py"}
"""The tests that name the old location to check that nothing reads it."""


def test_packaged_copy_matches_its_readme() -> None:
    readme = (PACKAGED / "README.md").read_text(encoding="utf-8")
    digest = hashlib.sha256((PACKAGED / "test.jsonl.gz").read_bytes()).hexdigest()
    assert re.search(r"sha256 \| `([0-9a-f]{64})`", readme).group(1) == digest  # type: ignore[union-attr]
    assert "MIT" in (PACKAGED / "LICENSE").read_text(encoding="utf-8")


def test_nothing_points_at_shared_data() -> None:
    """No code, test, script, config or CI file names the old ``../shared`` location."""
    pattern = re.compile(r"\.\./shared|shared/data")
    offenders = []
    for top in (
        "dmt_proxy",
        "dmt_bench",
        "tests",
        "scripts",
        "benchmarks/configs",
        "benchmarks/perf",
        ".ci",
    ):
        for path in (ROOT / top).rglob("*"):
            if path.is_file() and path.suffix not in {".gz", ".pyc"} and path not in CHECKS_SHARED:
                text = path.read_text(encoding="utf-8", errors="replace")
                offenders += [f"{path.relative_to(ROOT)}" for _ in pattern.findall(text)[:1]]
    assert offenders == []
