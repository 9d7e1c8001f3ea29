"""A dose run's pre-registration: committed endpoints, checked against the run at report time.

The pre-registration is a YAML file in the repository (format: ``Preregistration``;
``benchmarks/configs/dose_confirmatory_v1.prereg.yaml``) named by the config's
``preregistration.path``. It declares the primary endpoints, the analysis (interval,
α, Holm family) and the positive control's threshold.

1. Run start (``resolve``): the file must be committed and unmodified in the working
   tree, else the run is refused. The commit that last changed it and the file's
   SHA-256 are written into the run's config (``preregistration.commit``/``sha256``),
   so the manifest (``run.json``) records them and they are part of the config digest.
2. Report time (``check``): the file as committed at that commit is read with
   ``git show``; its digest must match the recorded one, and its endpoint definitions
   (``primary``, ``analysis``, ``positive_control``) must equal those in the working
   tree now. If anything differs or cannot be verified, the endpoints are still
   computed but reported as **exploratory**, with the reason, and ``dmt-bench
   dose-report`` exits with status 4 (``EXIT_NOT_PRIMARY``); the report is written
   either way.
3. Evaluation (``evaluate``): every endpoint's contrast (``contrasts.contrast``,
   jackknife-t over DIB contexts) and Holm's correction over the declared family.
   These endpoints are then the report's one primary family (``dose.primary``
   renders them; a run without a pre-registration has the family declared there).
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dmt_bench.dose.contrasts import METHOD, Scored, contrast, mean_terms
from dmt_bench.dose.positive_control import MIN_GAP, keys_of
from dmt_bench.stats import ClusterEstimate, holm
from dmt_proxy.errors import ConfigError

if TYPE_CHECKING:
    from dmt_bench.dose.config import DoseConfig, PreregistrationRef

EXIT_NOT_PRIMARY = 4
"""``dmt-bench dose-report``'s status when the endpoints could not be reported as primary."""


class Endpoint(BaseModel):
    """One pre-registered endpoint on the source's own domain (the diagonal).

    ``content``: mean ΔGBV_d(stereotyped sets of d) − mean ΔGBV_d(neutral sets) at
    (k, mode). ``reduction``: content(k, off) − content(k, mode), the mode's absolute
    reduction of the content effect (positive: the mode narrows it).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str
    contrast: Literal["content", "reduction"]
    source: str
    k: int = Field(gt=0)
    mode: str

    @model_validator(mode="after")
    def _mode(self) -> Endpoint:
        if self.contrast == "reduction" and self.mode == "off":
            raise ValueError(f"endpoint {self.id}: a reduction compares a mode with off")
        return self


class Analysis(BaseModel):
    """How the endpoints are tested."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    interval: Literal["jackknife-t"] = "jackknife-t"
    confidence: float = 0.95
    alpha: float = 0.05
    multiplicity: Literal["holm"] = "holm"
    readout: Literal["expected"] = "expected"


class PositiveControlRule(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    mode: str = "off"
    min_gap: float = MIN_GAP


class Preregistration(BaseModel):
    """The committed file (``version: 1``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    version: Literal[1]
    kind: Literal["dose-preregistration"]
    experiment: str
    config: str
    """Repository-relative path of the dose config this registers."""
    hypotheses: str = ""
    primary: list[Endpoint] = Field(min_length=1)
    analysis: Analysis = Field(default_factory=Analysis)
    positive_control: PositiveControlRule = Field(default_factory=PositiveControlRule)
    notes: str = ""

    @model_validator(mode="after")
    def _unique(self) -> Preregistration:
        ids = [e.id for e in self.primary]
        if len(set(ids)) != len(ids):
            raise ValueError("endpoint ids must be unique")
        return self

    def definitions_digest(self) -> str:
        """SHA-256 of what decides the primary results (endpoints, analysis, control rule)."""
        payload = self.model_dump(mode="json", include={"primary", "analysis", "positive_control"})
        blob = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()


def parse_preregistration(text: str, where: str) -> Preregistration:
    """Validate a pre-registration's YAML text; ConfigError names the problem."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where} is not valid YAML: {exc}") from exc
    if isinstance(raw, dict) and "primary" in raw:
        for e in raw["primary"] or []:
            if isinstance(e, dict) and e.get("mode") is False:
                e["mode"] = "off"  # YAML 1.1 reads a bare off as false
    control = raw.get("positive_control") if isinstance(raw, dict) else None
    if isinstance(control, dict) and control.get("mode") is False:
        control["mode"] = "off"
    try:
        return Preregistration.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{where} is invalid: {exc}") from None


def check_against_config(prereg: Preregistration, config: DoseConfig) -> None:
    """ConfigError when an endpoint asks for cells the config does not read."""
    for e in prereg.primary:
        if e.source not in config.sources:
            raise ConfigError(f"endpoint {e.id}: {e.source} is not a source of the config")
        if e.k not in config.doses:
            raise ConfigError(f"endpoint {e.id}: k = {e.k} is not a dose of the config")
        for mode in {e.mode, "off"}:
            if mode not in config.modes or mode not in config.neutral_modes:
                raise ConfigError(
                    f"endpoint {e.id}: biased and neutral cells must be read in {mode}"
                )
    if "neutral" not in config.kinds or "biased" not in config.kinds:
        raise ConfigError("a pre-registered dose run needs biased and neutral kinds")


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise ConfigError(f"git {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def repo_root(start: Path) -> Path:
    """The git work tree holding ``start`` (ConfigError outside one)."""
    return Path(
        _git(start if start.is_dir() else start.parent, "rev-parse", "--show-toplevel").strip()
    )


def resolve(ref: PreregistrationRef, root: Path) -> PreregistrationRef:
    """The reference with the commit and SHA-256 of the committed, clean file (run start).

    ConfigError when the file is missing, invalid, not committed or modified.
    """
    path = root / ref.path
    if not path.is_file():
        raise ConfigError(f"pre-registration {ref.path} not found under {root}")
    text = path.read_text(encoding="utf-8")
    parse_preregistration(text, ref.path)
    if _git(root, "status", "--porcelain", "--", ref.path).strip():
        raise ConfigError(
            f"pre-registration {ref.path} has uncommitted changes: commit it before the run"
        )
    commit = _git(root, "log", "-1", "--format=%H", "--", ref.path).strip()
    if not commit:
        raise ConfigError(f"pre-registration {ref.path} is not committed: commit it before the run")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return ref.model_copy(update={"commit": commit, "sha256": digest})


class Registration(BaseModel):
    """The outcome of ``check``: the definitions to evaluate and whether they are primary."""

    model_config = ConfigDict(frozen=True)
    status: Literal["primary", "exploratory"]
    message: str
    path: str
    commit: str | None = None
    definitions: Preregistration | None = None


def control_gap(registration: Registration | None) -> float:
    """The positive control's threshold: the registered ``min_gap``, else ``MIN_GAP``."""
    if registration is None or registration.definitions is None:
        return MIN_GAP
    return registration.definitions.positive_control.min_gap


def check(ref: PreregistrationRef, root: Path) -> Registration:
    """Compare the committed pre-registration with the run's record and the working tree."""
    path = root / ref.path
    current: Preregistration | None = None
    if path.is_file():
        current = parse_preregistration(path.read_text(encoding="utf-8"), ref.path)

    def exploratory(reason: str) -> Registration:
        return Registration(
            status="exploratory",
            message=f"not reported as primary: {reason}",
            path=ref.path,
            commit=ref.commit,
            definitions=current,
        )

    if ref.commit is None or ref.sha256 is None:
        return exploratory("the run recorded no pre-registration commit")
    try:
        committed_bytes = subprocess.run(
            ["git", "-C", str(root), "show", f"{ref.commit}:{ref.path}"],
            capture_output=True, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return exploratory(f"cannot read {ref.path} at commit {ref.commit[:12]} (git)")
    if hashlib.sha256(committed_bytes).hexdigest() != ref.sha256:
        return exploratory(f"{ref.path} at {ref.commit[:12]} is not the file the run recorded")
    registered = parse_preregistration(committed_bytes.decode("utf-8"), ref.path)
    if current is None:
        current = registered
    if current.definitions_digest() != registered.definitions_digest():
        return exploratory(
            f"the endpoint definitions in {ref.path} differ from those committed in "
            f"{ref.commit[:12]} before the run"
        )
    return Registration(
        status="primary",
        message=f"pre-registered in {ref.path} at commit {ref.commit[:12]}; unchanged since",
        path=ref.path,
        commit=ref.commit,
        definitions=registered,
    )


class EndpointResult(BaseModel):
    """One endpoint's estimate, and its place in the Holm family."""

    model_config = ConfigDict(frozen=True)
    endpoint: Endpoint
    estimate: ClusterEstimate
    holm_adjusted_p: float | None
    reject: bool


class PrimaryReport(BaseModel):
    """The pre-registered endpoints as evaluated on the run."""

    model_config = ConfigDict(frozen=True)
    status: Literal["primary", "exploratory"]
    message: str
    method: str = METHOD
    alpha: float
    family: list[str]
    endpoints: list[EndpointResult]


def _content_terms(
    scored: Scored, source: str, k: int, mode: str, scale: float = 1.0
) -> list[tuple[float, Any]]:
    plus = keys_of(scored, "biased", source, k, mode)
    minus = keys_of(scored, "neutral", source, k, mode) or keys_of(scored, "neutral", None, k, mode)
    return mean_terms(plus, minus, scale)


def endpoint_contrast(scored: Scored, e: Endpoint, confidence: float = 0.95) -> ClusterEstimate:
    """The endpoint's contrast on the source's own domain."""
    if e.contrast == "content":
        terms = _content_terms(scored, e.source, e.k, e.mode)
    else:
        off = _content_terms(scored, e.source, e.k, "off")
        mode = _content_terms(scored, e.source, e.k, e.mode, scale=-1.0)
        terms = off + mode if off and mode else []
    return contrast(scored, terms, e.source, confidence)


def evaluate(
    config: DoseConfig, scored: Scored, registration: Registration
) -> PrimaryReport | None:
    """Every declared endpoint with Holm's correction (None without definitions)."""
    defs = registration.definitions
    if defs is None:
        return None
    a = defs.analysis
    estimates = {e.id: endpoint_contrast(scored, e, a.confidence) for e in defs.primary}
    adjusted = holm({i: c.p_value for i, c in estimates.items()}, alpha=a.alpha)
    results = [
        EndpointResult(
            endpoint=e,
            estimate=estimates[e.id],
            holm_adjusted_p=adjusted[e.id].adjusted
            if math.isfinite(estimates[e.id].p_value)
            else None,
            reject=adjusted[e.id].reject,
        )
        for e in defs.primary
    ]
    return PrimaryReport(
        status=registration.status,
        message=registration.message,
        alpha=a.alpha,
        family=[e.id for e in defs.primary],
        endpoints=results,
    )


def load_preregistration(path: Path) -> Preregistration:
    """Read and validate a pre-registration file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read pre-registration {path}: {exc.strerror or exc}") from exc
    return parse_preregistration(text, str(path))
