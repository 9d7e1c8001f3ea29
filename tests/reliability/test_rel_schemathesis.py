"""Schema-driven fuzzing: schemathesis generates requests from the proxy's own OpenAPI
document (valid and deliberately invalid ones) and sends them to a real proxy process.

Every answer must be non-5xx and match the document (status code, content type, body
schema). The upstream and the auditor are the shipped fake server (not a model: the test
is about the HTTP contract); provider and local model names cannot leave the machine
(``proxy_env``). The number of examples is bounded, and fixed by ``derandomize``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.proxy_process import ADMIN, FakeUpstream, ProxyProcess
from tests.reliability.harness import proxy_with_clean_auditor

pytestmark = pytest.mark.slow

EXAMPLES = 100
"""Per operation and generation mode (operations without input are exhausted after one)."""
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]  # fmt: skip


def on_alias(case: schemathesis.Case, pin: bool) -> schemathesis.Case:
    if pin and isinstance(case.body, dict):
        case.body["model"] = "fast"
    return case


def test_schemathesis_finds_no_5xx_and_no_schema_violation(
    proxy_factory: Callable[..., ProxyProcess],
    fakes: Callable[..., FakeUpstream],
    tmp_path: Path,
    report: Callable[[str], None],
) -> None:
    proxy = proxy_with_clean_auditor(proxy_factory, fakes, tmp_path / "policy.yaml")
    root = f"http://127.0.0.1:{proxy.port}"
    for user in ("alice", "bob"):  # real records, so the memory routes' 200s are checked too
        body = {"model": "fast", "user": user, "messages": [{"role": "user", "content": "Hi"}]}
        # A hang guard: the first requests of a fresh process are its slowest (lazy imports).
        assert httpx.post(f"{root}/v1/chat/completions", json=body, timeout=60).status_code == 200

    schema = schemathesis.openapi.from_url(f"{root}/openapi.json")
    statuses: Counter[int] = Counter()
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]

    def fuzzer(operation: schemathesis.APIOperation, mode: GenerationMode) -> Callable[[], None]:
        cases = operation.as_strategy(generation_mode=mode)
        if operation.path == "/v1/chat/completions" and mode is GenerationMode.POSITIVE:
            # A random model name is a 404 before the pipeline runs: send half to the alias.
            cases = st.tuples(cases, st.booleans()).map(lambda pair: on_alias(*pair))

        @given(case=cases)
        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  phases=[Phase.explicit, Phase.generate],
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        def fuzz(case: schemathesis.Case) -> None:
            response = case.call(base_url=root, headers=ADMIN, timeout=30)
            statuses[response.status_code] += 1
            try:
                case.validate_response(response, checks=CHECKS)
            except Exception as exc:  # collect all, report together (no shrinking)
                found = getattr(exc, "exceptions", None) or [exc]
                failures.extend(f"{operation.label} [{mode.value}] {response.status_code}: "
                                f"{str(e).splitlines()[0][:300]}" for e in found)  # fmt: skip

        return fuzz  # type: ignore[no-any-return]

    no_negative: list[str] = []
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                fuzzer(operation, mode)()
            except Unsatisfiable:
                # No parameters and no body (e.g. GET /healthz): nothing can be made invalid.
                assert mode is GenerationMode.NEGATIVE, operation.label
                no_negative.append(operation.label)

    total = sum(statuses.values())
    server_errors = sum(n for status, n in statuses.items() if status >= 500)
    report(
        f"abuse/schemathesis {schemathesis.__version__}: {len(operations)} operations, "
        f"{total} requests (max {EXAMPLES} per operation and mode, positive+negative), "
        f"statuses {dict(sorted(statuses.items()))}, 5xx={server_errors}, "
        f"check failures={len(failures)} (no invalid input exists for {len(no_negative)})"
    )
    assert failures == [], "\n".join(failures[:10])
    assert server_errors == 0
    # Still up, possibly still auditing what the fuzzing wrote: a hang guard, not a pace.
    assert httpx.get(f"{root}/healthz", timeout=60).status_code == 200
