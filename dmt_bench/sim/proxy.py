"""The simulation's proxy: its policy per memory architecture, and a running one's client.

The proxy itself, managed or running, is the harness's (``dmt_bench.harness.proxy``).
"""

from __future__ import annotations

from typing import Any

from dmt_bench.harness.proxy import (
    ProxyClient,
    ProxySpec,
    connect_proxy,
    run_policy,
    validate_backend_options,
)
from dmt_bench.harness.sitting import nonce_key
from dmt_bench.sim.config import SimConfig


def build_policy(config: SimConfig, backend: str) -> dict[str, Any]:
    """The proxy policy for one memory architecture (mode comes per request).

    ``memory.options`` carries the config's ``backend_options`` for ``backend`` (left
    out when there are none, as before they existed); the auditor prompt is the
    config's, which defaults to the proxy's own default.
    """
    memory: dict[str, Any] = {"backend": backend, "top_k": config.agent.top_k}
    options = config.options_for(backend)
    if options:
        memory["options"] = options
    return run_policy(f"sim-{backend}", config.models, config.audit, memory)


def check_backend_options(config: SimConfig, backend: str) -> None:
    """ConfigError naming the problem when ``backend`` would reject its options."""
    validate_backend_options(backend, config.options_for(backend))


def sim_proxy_spec(config: SimConfig, backend: str) -> ProxySpec:
    """The proxy of one memory architecture of a simulation."""
    return ProxySpec(
        policy=build_policy(config, backend),
        request_timeout_s=config.execution.request_timeout_s,
        start_timeout_s=config.execution.proxy_start_timeout_s,
        nonce_key=nonce_key(config.digest()),
    )


def external_proxy(config: SimConfig) -> ProxyClient:
    """A client for ``execution.proxy_url``, with the admin key from its env variable."""
    url = config.execution.proxy_url
    assert url is not None
    return connect_proxy(
        url,
        config.execution.admin_key_env,
        "the simulation waits on /v1/admin/outbox and reads /v1/memories",
    )
