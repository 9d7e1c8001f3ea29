"""The BiasDomain contract, run against every registered DIB domain.

Parametrised over the registry (built-ins and entry-point plug-ins), so a new
domain is checked the moment it is registered, built from the config it declares
(``contract_config()``; an installed domain that declares none is skipped with
the reason, a built-in one fails): its counts, its counterfactual
structure (one set per context, the same scenario for every group, only the
personal details differ) and determinism. Table 1's own numbers are checked in
``test_dib_generator.py``.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from dmt_bench.dib.domains.base import DIB_DOMAINS, BiasDomain, get_domain
from dmt_bench.dib.generator import domain_samples
from dmt_bench.dib.schema import Sample
from dmt_proxy.domains import DOMAINS

NAMES = DIB_DOMAINS.names()


@pytest.fixture(params=NAMES)
def domain(request: pytest.FixtureRequest) -> BiasDomain:
    name: str = request.param
    try:
        config = DIB_DOMAINS.contract_config(name)
    except LookupError as exc:
        if DIB_DOMAINS.is_builtin(name):
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    built: BiasDomain = DIB_DOMAINS.create(name, config)
    return built


@pytest.fixture
def samples(domain: BiasDomain) -> list[Sample]:
    return domain_samples(domain, seed=0)


def test_every_bias_domain_is_registered() -> None:
    assert sorted(DOMAINS) == [name for name in NAMES if DIB_DOMAINS.is_builtin(name)]
    assert get_domain("age").name == "age"


def test_domain_is_a_bias_domain_with_its_registered_name(domain: BiasDomain) -> None:
    assert isinstance(domain, BiasDomain)
    assert domain.name in NAMES
    assert len(domain.groups) >= 2 and len(set(domain.groups)) == len(domain.groups)


def test_counts_are_contexts_times_groups(domain: BiasDomain, samples: list[Sample]) -> None:
    assert domain.context_count() * len(domain.groups) == domain.table1_count == len(samples)
    per_group = Counter(s.group for s in samples)
    assert tuple(per_group) == domain.groups
    assert set(per_group.values()) == {domain.context_count()}


def test_each_context_is_one_counterfactual_set(domain: BiasDomain) -> None:
    for index in range(domain.context_count()):
        cset = domain.counterfactual_set(index, random.Random(index))
        assert tuple(m.group for m in cset.markers) == domain.groups
        assert len({m.lines for m in cset.markers}) == len(domain.groups), index
    with pytest.raises(IndexError):
        domain.counterfactual_set(domain.context_count(), random.Random(0))


def test_only_the_personal_details_differ_within_a_set(samples: list[Sample]) -> None:
    sets: dict[str, list[Sample]] = {}
    for s in samples:
        sets.setdefault(s.context_id, []).append(s)
    for cid, members in sets.items():
        assert len({m.persona for m in members}) == 1, cid
        assert len({m.prompt.split("Personal details:")[0] for m in members}) == 1, cid
        assert len({m.prompt.rsplit("\n\n", 1)[1] for m in members}) == 1, cid
        assert len({m.prompt for m in members}) == len(members), cid


def test_prompts_and_ids_are_unique(samples: list[Sample]) -> None:
    assert len({s.id for s in samples}) == len(samples)
    assert len({s.prompt for s in samples}) == len(samples)


def test_samples_are_deterministic_for_a_seed(domain: BiasDomain, samples: list[Sample]) -> None:
    assert domain_samples(domain, seed=0) == samples
    other = domain_samples(domain, seed=1)
    assert [(s.id, s.group) for s in other] == [(s.id, s.group) for s in samples]
