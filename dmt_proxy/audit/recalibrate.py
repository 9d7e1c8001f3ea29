"""Refit the auditor's calibration, its fusion with the first stage, and τ on human verdicts.

Input: labelled items (``ReviewItem``: the auditor's raw P(yes), the first stage's
score, the machine's decision, and the reviewer's label), as ``dmt-proxy reviews
export`` writes them. Each item goes to the train or the held-back part by a hash of
its memory id (stable across runs: a later export with more reviews keeps earlier
items where they were). On the train part, per auditor (``model@prompt``):

- Platt scaling of P_raw (``dmt_proxy.audit.fit.fit_platt``);
- the fusion of the two judges where the first stage judged too (``dmt_proxy.audit.fit.fit_fusion``);
- τ: the threshold on the new probability with the best F1 on the train part.

On the held-back part, before (the machine's decisions as stored) and after (the
refitted probability against the refitted τ): precision, recall, and the
false-positive rate on hard negatives, the memories reviewers cleared although the
running auditor flagged them (by construction every one of them was a false positive
before; the question is how many remain).

The result is a new ``Calibration`` with a new version, written beside (never over)
the running one; a policy uses it only by naming it (``audit.calibration``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from dmt_proxy.audit.fit import fit_fusion, fit_platt
from dmt_proxy.audit.logprob import Calibration, JudgeFusion, PlattScaling, calibration_key

HOLDOUT_SHARE = 0.3
TAU_GRID = tuple(round(0.05 * i, 2) for i in range(1, 20))


@dataclass(frozen=True)
class ReviewItem:
    """One memory a reviewer decided, with what the machine knew about it."""

    memory_id: str
    biased: bool
    """The reviewer's label."""
    machine_flagged: bool
    """The running auditor's decision (tagged, disputed or quarantined)."""
    auditor: str
    """The verdict's auditor label, e.g. ``local/qwen2.5-1.5b@auditor_v3/logprob``."""
    p_raw: float | None
    first_stage_score: float | None
    first_stage_classifier: str = ""


def auditor_key(label: str) -> str | None:
    """``model@prompt`` of an auditor label (``None`` when it names no model and prompt)."""
    model, at, rest = label.partition("@")
    if not at or not model:
        return None
    return calibration_key(model, rest.split("/", 1)[0])


def in_holdout(memory_id: str) -> bool:
    """Whether ``memory_id`` belongs to the held-back part (a stable hash split)."""
    digest = hashlib.sha256(memory_id.encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32 < HOLDOUT_SHARE


class Scores(BaseModel):
    """Precision, recall and hard-negative false-positive rate of one set of decisions."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    n: int
    precision: float | None
    recall: float | None
    hard_negative_fp: float | None
    """Share of hard negatives (cleared by reviewers, flagged by the running auditor) still
    flagged."""


def scores(items: Sequence[ReviewItem], flagged: Sequence[bool]) -> Scores:
    """Scores of ``flagged`` against the reviewers' labels (``None`` where undefined)."""
    tp = sum(1 for i, f in zip(items, flagged, strict=True) if f and i.biased)
    fp = sum(1 for i, f in zip(items, flagged, strict=True) if f and not i.biased)
    fn = sum(1 for i, f in zip(items, flagged, strict=True) if not f and i.biased)
    hard = [f for i, f in zip(items, flagged, strict=True) if i.machine_flagged and not i.biased]
    return Scores(
        n=len(items),
        precision=round(tp / (tp + fp), 4) if tp + fp else None,
        recall=round(tp / (tp + fn), 4) if tp + fn else None,
        hard_negative_fp=round(sum(hard) / len(hard), 4) if hard else None,
    )


class AuditorRefit(BaseModel):
    """What was refitted for one auditor, and how it does on the held-back part."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    key: str
    train: int
    holdout: int
    platt: PlattScaling
    fusion: JudgeFusion | None = None
    tau: float
    before: Scores
    after: Scores


class RefitReport(BaseModel):
    """The whole refit: per auditor, and the items that could not be used."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    version: str
    items: int
    skipped: int
    """Items without P_raw (a JSON-verdict auditor, a failed audit) or an auditor key."""
    auditors: list[AuditorRefit]


def _f1(items: Sequence[ReviewItem], probs: Sequence[float], tau: float) -> float:
    s = scores(items, [p >= tau for p in probs])
    if not s.precision or not s.recall:
        return 0.0
    return 2 * s.precision * s.recall / (s.precision + s.recall)


def _running_classifier(running: Calibration, key: str) -> str:
    """The first-stage classifier the running fusion of ``key`` names ('' without one)."""
    return next((k.split("+", 1)[1] for k in sorted(running.fusion) if k.startswith(key + "+")), "")


def _probability(item: ReviewItem, platt: PlattScaling, fusion: JudgeFusion | None) -> float:
    assert item.p_raw is not None
    if fusion is not None and item.first_stage_score is not None:
        return fusion.apply(item.p_raw, item.first_stage_score)
    return platt.apply(item.p_raw)


def refit(
    items: Sequence[ReviewItem], *, running: Calibration, version: str, trained_on: str
) -> tuple[Calibration, RefitReport]:
    """A new calibration from ``items`` (module docstring), starting from ``running``."""
    groups: dict[str, list[ReviewItem]] = {}
    skipped = 0
    for item in items:
        key = auditor_key(item.auditor)
        if key is None or item.p_raw is None:
            skipped += 1
            continue
        groups.setdefault(key, []).append(item)
    entries, fusions = dict(running.entries), dict(running.fusion)
    taus: dict[str, float] = {}
    refits: list[AuditorRefit] = []
    for key, group in sorted(groups.items()):
        train = [i for i in group if not in_holdout(i.memory_id)]
        held = [i for i in group if in_holdout(i.memory_id)]
        if not train or len({i.biased for i in train}) < 2:
            skipped += len(group)  # one class only: nothing to fit
            continue
        labels = [i.biased for i in train]
        platt = fit_platt([i.p_raw or 0.0 for i in train], labels, trained_on=trained_on)
        both = [i for i in train if i.first_stage_score is not None]
        classifier = next((i.first_stage_classifier for i in both if i.first_stage_classifier),
                          _running_classifier(running, key))  # fmt: skip
        fusion = None
        if classifier and len({i.biased for i in both}) == 2:
            fusion = fit_fusion(
                [i.p_raw or 0.0 for i in both], [i.first_stage_score or 0.0 for i in both],
                [i.biased for i in both], classifier=classifier, trained_on=trained_on,
            )  # fmt: skip
            fusions[f"{key}+{fusion.classifier}"] = fusion
        probs = [_probability(i, platt, fusion) for i in train]
        tau = max(TAU_GRID, key=lambda t: (_f1(train, probs, t), -abs(t - 0.5)))
        entries[key] = platt
        taus[key] = tau
        after = [_probability(i, platt, fusion) >= tau for i in held]
        refits.append(AuditorRefit(
            key=key, train=len(train), holdout=len(held), platt=platt, fusion=fusion, tau=tau,
            before=scores(held, [i.machine_flagged for i in held]), after=scores(held, after),
        ))  # fmt: skip
    calibration = Calibration(
        version=version, method=running.method,
        description=f"{running.version} refitted on {len(items)} human reviews ({trained_on})",
        entries=entries, fusion=fusions, tau={**running.tau, **taus},
    )  # fmt: skip
    report = RefitReport(version=version, items=len(items), skipped=skipped, auditors=refits)
    return calibration, report
