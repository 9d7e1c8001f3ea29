"""The models a run calls: the local ones checked before anything starts, and each
role's share of a dry run's estimate."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from dmt_bench.harness.config import ModelSpec
from dmt_proxy.errors import ConfigError
from dmt_proxy.settings import Settings


def check_local_models(specs: Iterable[ModelSpec], settings: Settings) -> None:
    """Fail early, with the command to fix it, when one of the local ``specs`` is down.

    Hosted models (any spec that is not ``local/<name>``) are not checked: their
    provider answers for them at the first call.
    """
    from dmt_proxy.upstream import launcher, local_models

    down = sorted(
        {
            s.model.removeprefix("local/")
            for s in specs
            if s.is_local and not launcher.health(settings, local_models.get_model(s.model[6:]))
        }
    )
    if down:
        raise ConfigError(
            f"local model(s) not running: {', '.join(down)}; start them with "
            f"`dmt-proxy models start {' '.join(down)}` (pull first if needed)"
        )


class RoleEstimate(BaseModel):
    """One model role's share of a dry run's estimate: calls, latency per call, seconds."""

    model_config = ConfigDict(frozen=True)
    role: str
    calls: float
    latency_s: float
    latency_source: str
    seconds: float
