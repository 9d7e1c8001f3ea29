"""One list of bias domains: everything that names the domains agrees with ``dmt_proxy.domains``.

Each test names one of the places a new domain must reach; a domain added to
``Domain`` and missing from one of them fails here, naming the place.
"""

from __future__ import annotations

import json
import typing
from typing import Any

import pytest

from dmt_bench.dib.domains.base import DIB_DOMAINS, registered_domains
from dmt_bench.sim.bias_list import load_bias_list
from dmt_proxy import domains, tags
from dmt_proxy.audit.first_stage import PROTOTYPES
from dmt_proxy.audit.parsing import VERDICT_SCHEMA_FILE, verdict_schema, wire_schema
from dmt_proxy.domains import BIAS_TYPES, DOMAINS, OTHER
from dmt_proxy.errors import ConfigError
from dmt_proxy.metrics import Metrics
from dmt_proxy.policy import parse_policy, policy_schema
from dmt_proxy.resources import data_dir


def test_the_tuples_are_read_from_the_literal_types() -> None:
    assert typing.get_args(domains.Domain) == DOMAINS
    assert typing.get_args(domains.BiasType) == BIAS_TYPES == (*DOMAINS, OTHER)
    assert len(set(DOMAINS)) == len(DOMAINS) == 9 and OTHER not in DOMAINS
    # Table 1 order: the reports and golden files depend on it.
    assert DOMAINS[:3] == ("race", "gender", "ses") and DOMAINS[-1] == "appearance"


def test_the_tag_type_is_the_domains_bias_type() -> None:
    assert tags.BiasType is domains.BiasType
    for bias_type in BIAS_TYPES:
        tag = tags.BiasTag(bias_type=bias_type, target_group="g", tendency="t", score=0.5)  # type: ignore[arg-type]
        assert tag.bias_type == bias_type
    with pytest.raises(ValueError, match="bias_type"):
        tags.BiasTag(bias_type="height", target_group="g", tendency="t", score=0.5)  # type: ignore[arg-type]


def _file(directory: str, name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((data_dir(directory) / name).read_text(encoding="utf-8"))
    return loaded


def test_policy_schema_bias_types_are_derived_and_the_file_agrees() -> None:
    assert policy_schema()["$defs"]["bias_type"]["enum"] == list(BIAS_TYPES)
    on_disk = _file("policies", "policy.schema.json")
    assert on_disk["$defs"]["bias_type"]["enum"] == list(BIAS_TYPES), (
        "policies/policy.schema.json: update $defs/bias_type/enum to dmt_proxy.domains.BIAS_TYPES"
    )


def test_policy_check_accepts_every_bias_type_and_nothing_else() -> None:
    everything = {name: 0.3 for name in BIAS_TYPES}
    policy = parse_policy({"version": 1, "audit": {"tau_per_domain": everything,
                                                   "action_per_domain": {"age": "drop"}}})  # fmt: skip
    assert policy.audit.tau_per_domain == everything
    for field in ("tau_per_domain", "action_per_domain"):
        value = 0.3 if field == "tau_per_domain" else "tag"
        with pytest.raises(ConfigError, match=f"audit/{field}"):
            parse_policy({"version": 1, "audit": {field: {"height": value}}})


def test_verdict_schema_bias_types_are_derived_and_the_file_agrees() -> None:
    expected = [*BIAS_TYPES, None]
    assert verdict_schema()["properties"]["bias_type"]["enum"] == expected
    assert wire_schema()["properties"]["bias_type"]["enum"] == expected
    on_disk = _file("auditor_prompts", VERDICT_SCHEMA_FILE)
    assert on_disk["properties"]["bias_type"]["enum"] == expected, (
        f"auditor_prompts/{VERDICT_SCHEMA_FILE}: update properties/bias_type/enum to "
        "dmt_proxy.domains.BIAS_TYPES plus null"
    )


def test_metric_labels_are_precreated_for_every_bias_type() -> None:
    metrics = Metrics()
    labelled = {
        sample.labels["bias_type"]
        for family in metrics.registry.collect()
        if family.name == "dmt_tags"
        for sample in family.samples
    }
    assert labelled == set(BIAS_TYPES)


def test_bias_list_covers_exactly_the_domains_once_each() -> None:
    entries = [entry.domain for entry in load_bias_list().entries]
    assert sorted(entries) == sorted(DOMAINS)


def test_dib_registers_exactly_the_domains_in_table_1_order() -> None:
    assert [d.name for d in registered_domains()] == list(DOMAINS)
    assert DIB_DOMAINS.names() == sorted(DOMAINS)


def test_first_stage_has_prototypes_for_every_bias_type() -> None:
    assert set(PROTOTYPES) == set(BIAS_TYPES)
