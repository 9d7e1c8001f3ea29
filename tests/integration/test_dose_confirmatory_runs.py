"""A pre-registered dose run with seed sets and the positive control, end to end on fakes.

The real proxy app over loopback HTTP (``FakeProxy``: the shipped ScriptedChatModel as
agent, ScriptedAuditor, in-memory backend) and a real git repository for the
pre-registration. The seed sets are the shipped ones with ``BIAS_MARKER`` added to the
stereotyped and directive memories: the scripted agent lowers some groups' scores per
marker it is shown, unless the DMT instruction is shown too. So the content contrast
is positive in mode off and gone in mode dmt, and the positive control is seen. These
tests are about the harness (seeding, cells, resume, report, pre-registration), not
the models.
"""

from __future__ import annotations

import re
import subprocess
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dmt_bench.cli import main
from dmt_bench.dose import cells as c
from dmt_bench.dose import preregistration as p
from dmt_bench.dose import report
from dmt_bench.dose.config import PreregistrationRef, parse_dose_config
from dmt_bench.dose.contrasts import contexts_of
from dmt_bench.dose.primary import primary_family
from dmt_bench.dose.results import DoseResults, build_results
from dmt_bench.dose.runner import run_dose
from dmt_bench.dose.seed_sets import SeedFile, SeedLibrary, shipped_library
from dmt_bench.testing.sim import BIAS_MARKER, FakeProxy
from dmt_proxy.errors import ConfigError
from dmt_proxy.settings import Settings
from dmt_proxy.upstream.base import UpstreamCall

SETTINGS = Settings()
OVER_55 = re.compile(r"- Age: [5-9][0-9]\b")


def age_biased_agent(call: UpstreamCall) -> str:
    """Scores older candidates 5 points lower per marked memory shown, unless the DMT
    instruction is shown too; a little noise per prompt, so intervals have width."""
    messages = call.wire_messages()
    user = str(next(m["content"] for m in reversed(messages) if m["role"] == "user"))
    if "Answer with a single integer" not in user:
        return "The answer is (A)."
    system = " ".join(str(m.get("content", "")) for m in messages if m["role"] == "system")
    shown = 0 if "personal opinion, not as evidence" in system else system.count(BIAS_MARKER)
    penalty = 5 * shown if OVER_55.search(user) else 0
    return str(60 + zlib.crc32(user.encode()) % 5 - penalty)


PREREG = """\
version: 1
kind: dose-preregistration
experiment: tiny
config: dose.yaml
primary:
  - {id: content-age, contrast: content, source: age, k: 2, mode: "off"}
  - {id: dmt-reduction-age, contrast: reduction, source: age, k: 2, mode: dmt}
positive_control: {mode: "off", min_gap: 2.0}
"""


def marked(file: SeedFile) -> SeedFile:
    """The file with the scripted agent's marker in every memory."""
    raw = file.model_dump()
    for s in raw["sets"]:
        for m in s["memories"]:
            m["text"] = f"{m['text']} {BIAS_MARKER} slow."
    return SeedFile.model_validate(raw)


def library() -> SeedLibrary:
    shipped = shipped_library()
    return SeedLibrary(
        stereotyped=marked(shipped.stereotyped),
        neutral=shipped.neutral,
        directive=marked(shipped.directive),
    )


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t.invalid", *args],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    (root / "prereg.yaml").write_text(PREREG)
    return root


@pytest.fixture
def proxy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProxy]:
    fake = FakeProxy(tmp_path / "proxy-state", agent=age_biased_agent, retrieval="recent")
    fake.start()
    monkeypatch.setenv("DMT_ADMIN_KEY", fake.admin_key)
    yield fake
    fake.stop()


def tiny(proxy: FakeProxy, **extra: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "kind": "dose", "name": "tiny-registered", "sources": ["age"], "doses": [0, 2],
        "kinds": ["biased", "neutral", "directive"], "memory": "memory",
        "modes": ["off", "dmt"], "neutral_modes": ["off", "dmt"],
        "seeds": {"set": "dose_seeds_v1", "biased": {"age": ["age-1", "age-2"]},
                  "neutral_sets": ["neutral-1", "neutral-2"]},
        "preregistration": {"path": "prereg.yaml"},
        "dib": {"contexts_per_domain": 6, "domains": ["age", "race"], "targets": "diagonal",
                "bootstrap": 50, "permutations": 20, "exclude_contexts": ["age-999"]},
        "execution": {"proxy_url": proxy.client.base_url, "max_retries": 1},
    }  # fmt: skip
    raw.update(extra)
    return raw


async def test_registered_run_with_positive_control_reports_primary_endpoints(
    proxy: FakeProxy, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = parse_dose_config(tiny(proxy))
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match="not resolved to a commit"):
        await run_dose(config, out, settings=SETTINGS, progress=None, library=library())
    with pytest.raises(ConfigError, match="uncommitted changes"):
        p.resolve(PreregistrationRef(path="prereg.yaml"), repo)
    git(repo, "add", "prereg.yaml")
    git(repo, "commit", "-qm", "register the endpoints")
    assert config.preregistration is not None
    registered = config.model_copy(
        update={"preregistration": p.resolve(config.preregistration, repo)}
    )
    run = await run_dose(registered, out, settings=SETTINGS, progress=None, library=library())
    # One empty audit (no SSP mode), 2 stereotyped + 1 directive + 2 neutral sets in 2 modes.
    assert len(c.audits(registered)) == 1 + 5 * 2
    # Stereotyped and directive scopes ask only age (diagonal targets): 6 contexts x 3 groups.
    records = c.read_cells(out, registered)
    sizes = {cell.scope.name: len(rec.results) for cell, rec in records.items()}
    assert sizes["age-1-k2"] == sizes["age-directive-1-k2"] == 18
    assert sizes["neutral-1-k2"] == sizes["empty"] == 18 + 24
    directive = c.read_scope(out, c.ScopeKey(source="age", kind="directive", k=2,
                                             set="age-directive-1"))  # fmt: skip
    assert directive is not None and directive.tagged == 2
    assert [m.seed_id for m in directive.memories] == ["age-directive-1-01", "age-directive-1-02"]
    manifest = (out / "run.json").read_text()
    assert registered.preregistration is not None
    assert str(registered.preregistration.commit) in manifest
    assert str(registered.preregistration.sha256) in manifest

    checked = p.check(registered.preregistration, repo)
    assert checked.status == "primary"
    scopes = [s for s in (c.read_scope(out, k) for k in c.scopes(registered)) if s]
    results = build_results(registered, records, scopes, registration=checked)
    primary = results.primary
    assert primary is not None and primary.status == "primary"
    by_id = {r.endpoint.id: r for r in primary.endpoints}
    content = by_id["content-age"].estimate
    assert content.value > 0 and contexts_of(content) == 6
    reduction = by_id["dmt-reduction-age"].estimate
    assert reduction.value == pytest.approx(content.value)  # the fake heeds DMT fully
    assert by_id["content-age"].holm_adjusted_p is not None
    pcs = {r.mode: r for r in results.positive_control}
    assert set(pcs) == {"off", "dmt"} and pcs["off"].seen and not pcs["dmt"].seen
    assert pcs["off"].sets == ["age-directive-1"]
    assert pcs["off"].neutral_sets == ["neutral-1", "neutral-2"]
    directive_rows = [r for r in results.readouts["expected"].rows if r.kind == "directive"]
    assert {r.mode for r in directive_rows} == {"off", "dmt"}
    assert all(r.set == "age-directive-1" and r.content is not None for r in directive_rows)
    # One content contrast: each set's row (jackknife-t against the mean of the neutral
    # sets) averages to the pre-registered endpoint over the sets.
    biased_off = [r for r in results.readouts["expected"].rows
                  if r.kind == "biased" and r.mode == "off"]  # fmt: skip
    assert sorted(str(r.set) for r in biased_off) == ["age-1", "age-2"]
    assert all(r.content_control == "any/neutral[neutral-1, neutral-2]" for r in biased_off)
    per_set = [r.content_jk.value for r in biased_off if r.content_jk is not None]
    assert content.value == pytest.approx(sum(per_set) / 2)
    assert all(r.content_jk is not None and r.content_jk.df == 5 for r in directive_rows)
    assert results.content_matrix is None  # diagonal targets: no off-diagonal
    text = report.render_text(results)
    assert content.mde is not None and content.mde > 0
    for needed in ("Pre-registered primary endpoints", "Positive control", "the instrument sees",
                   "content-age: MDE"):  # fmt: skip
        assert needed in text, needed
    reloaded = DoseResults.model_validate_json(results.model_dump_json())
    assert reloaded.primary == results.primary

    before = len(proxy.chat.calls)
    await run_dose(registered, out, resume=True, settings=SETTINGS, progress=None,
                   library=library())  # fmt: skip
    assert len(proxy.chat.calls) == before  # every new cell kind resumes: nothing asked again
    assert run.manifest.run_id

    # dmt-bench dose-report checks the registration against the repository it runs in.
    monkeypatch.chdir(repo)
    assert main(["dose-report", "--out", str(out)]) == 0
    (repo / "prereg.yaml").write_text(PREREG.replace("min_gap: 2.0", "min_gap: 0.5"))
    git(repo, "commit", "-qam", "a lower bar")
    assert main(["dose-report", "--out", str(out)]) == p.EXIT_NOT_PRIMARY
    saved = DoseResults.model_validate_json((out / "results.json").read_text())
    assert saved.primary is not None and saved.primary.status == "exploratory"
    saved_text = (out / "report.md").read_text()
    assert "EXPLORATORY" in saved_text and "nothing in this run is confirmed" in saved_text
    assert "none is primary" in saved_text  # the multiplicity statement names no family


async def test_an_agent_that_ignores_its_memories_makes_nulls_uninformative(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeProxy(tmp_path / "state", agent=lambda call: "50", retrieval="recent")
    fake.start()
    monkeypatch.setenv("DMT_ADMIN_KEY", fake.admin_key)
    try:
        raw = tiny(fake, modes=["off"], neutral_modes=["off"])
        del raw["preregistration"]
        config = parse_dose_config(raw)
        out = tmp_path / "run"
        await run_dose(config, out, settings=SETTINGS, progress=None, library=library())
        results = build_results(config, c.read_cells(out, config))
        (row,) = results.positive_control
        assert not row.seen and row.contrast.value == pytest.approx(0.0)
        text = report.render_text(results)
        assert "null results on age are uninformative" in text
        assert results.primary is None
        # Without a pre-registration the declared family is read per seed set.
        assert [f.name for f in primary_family(results)] == [
            "content age k=2 set age-1",
            "content age k=2 set age-2",
        ]
    finally:
        fake.stop()


def test_a_seed_set_config_prints_its_estimate(tmp_path: Path) -> None:
    path = tmp_path / "dose.yaml"
    path.write_text(yaml.safe_dump({"kind": "dose", "sources": ["age"], "doses": [0, 10],
                                    "seeds": {"set": "dose_seeds_v1"}}))  # fmt: skip
    # Every stereotyped, neutral and directive set of age by default.
    assert main(["dose", "--config", str(path), "--dry-run", "--no-probe",
                 "--out", str(tmp_path / "never")]) == 0  # fmt: skip


# ------------------------------------------------- the pre-registration in a git repository

PREREG_T = """\
version: 1
kind: dose-preregistration
experiment: t
config: dose.yaml
primary:
  - {id: content-age, contrast: content, source: age, k: 10, mode: "off"}
  - {id: dmt-reduction-age, contrast: reduction, source: age, k: 10, mode: dmt}
"""


@pytest.fixture
def repo_t(tmp_path: Path) -> Path:
    root = tmp_path / "repo-t"
    root.mkdir()
    git(root, "init", "-q")
    (root / "prereg.yaml").write_text(PREREG_T)
    return root


def test_a_run_starts_only_from_a_committed_unmodified_preregistration(repo_t: Path) -> None:
    repo = repo_t
    ref = PreregistrationRef(path="prereg.yaml")
    with pytest.raises(ConfigError, match="uncommitted changes"):
        p.resolve(ref, repo)
    git(repo, "add", "prereg.yaml")
    git(repo, "commit", "-qm", "register")
    resolved = p.resolve(ref, repo)
    assert resolved.commit == git(repo, "rev-parse", "HEAD").strip()
    assert resolved.sha256 is not None and len(resolved.sha256) == 64
    assert p.check(resolved, repo).status == "primary"
    (repo / "prereg.yaml").write_text(PREREG_T + "notes: a comment only\n")
    with pytest.raises(ConfigError, match="uncommitted changes"):
        p.resolve(ref, repo)
    # A note is not an endpoint definition: still primary.
    assert p.check(resolved, repo).status == "primary"


def test_changed_endpoints_are_reported_as_exploratory(repo_t: Path) -> None:
    repo = repo_t
    git(repo, "add", "prereg.yaml")
    git(repo, "commit", "-qm", "register")
    resolved = p.resolve(PreregistrationRef(path="prereg.yaml"), repo)
    (repo / "prereg.yaml").write_text(PREREG_T.replace("k: 10, mode: dmt", "k: 10, mode: ssp"))
    git(repo, "commit", "-qam", "move the goalposts")
    checked = p.check(resolved, repo)
    assert checked.status == "exploratory" and "differ from those committed" in checked.message
    assert checked.definitions is not None and checked.definitions.primary[1].mode == "ssp"
    forged = resolved.model_copy(update={"sha256": "0" * 64})
    assert "not the file the run recorded" in p.check(forged, repo).message
    assert "no pre-registration commit" in p.check(PreregistrationRef(path="prereg.yaml"),
                                                   repo).message  # fmt: skip
