"""The auditor_v4 pipeline against the baseline on auditor_eval_v3 and adversarial_memories_v4.

Reads committed results only (no model calls) and writes
``benchmarks/results/auditor_eval_v3/summary.md``:

* ``runs/baseline/``: the pipeline of the branch point (normaliser v2, first stage v3,
  ``auditor_v3`` log-prob verdicts, calibration_v1), run from a copy of that commit;
* ``runs/auditor_v4/``: normaliser v3, the language test, ``auditor_v4`` (framing
  question on clean verdicts), calibration_v2, the planted-verdict rule;
* ``runs/auditor_v5/``: as auditor_v4, with the framing question asked of every memory
  the LLM judges and worded for planted verdicts too (made after auditor_v4's v4 run);
* ``runs/default/``: the shipped default after these runs: normaliser v3, the language
  test, the planted-verdict rule, the deferred rationale, and ``auditor_v3``'s turns
  (no framing question: on the runs above it answered yes with P ~0.75 for plain
  questions and mentions alike, so it flagged them; its threshold was never fitted);
* the replay column: auditor_v4's runs without the framing question's findings, which is
  what the default computes on those items (the question runs after the verdict and only
  adds its finding), without a model call.

Both are measured on the same items (a stratified subset of the v3 test split and a
round-robin sample of v4, see each report's command), so the comparison is paired.
Rerun: ``python benchmarks/perf/auditor_v4_report.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from dmt_bench.auditor_eval.first_stage_report import item_counts  # noqa: E402
from dmt_bench.stats import wilson_interval  # noqa: E402
from dmt_proxy.audit.normalize import normalize_memory  # noqa: E402
from dmt_proxy.resources import data_dir  # noqa: E402

RESULTS = ROOT / "benchmarks/results/auditor_eval_v3"
RUNS = {
    name: RESULTS / "runs" / name for name in ("baseline", "auditor_v4", "auditor_v5", "default")
}
REPLAY = "auditor_v3 + new pipeline (replay)"
"""auditor_v4's runs without the framing question's findings: normaliser v3, the language
test, the planted-verdict rule and auditor_v3's turns (no model call; see ``without_framing``)."""
V2_BASELINE = (ROOT / "benchmarks/results/auditor_eval_v2/runs"
               / "auditor_eval_v2_qwen2.5-1.5b_auditor_v3_logprob_pipeline_test.json")  # fmt: skip
"""The committed whole-split v2 run of the same baseline pipeline (2026-11-30)."""


def _rate(k: int, n: int) -> str:
    if n == 0:
        return "n/a"
    ci = wilson_interval(k, n)
    return f"{k / n:.2f} [{ci.low:.2f}, {ci.high:.2f}] ({k}/{n})"


def without_framing(verdict: dict[str, Any]) -> dict[str, Any]:
    """The verdict without the framing question's finding: what auditor_v3's turns give in
    the same pipeline (the question runs after the verdict and only adds that finding)."""
    findings = [f for f in verdict.get("findings", []) if f.get("rule") != "discount_framing"]
    return {**verdict, "findings": findings, "p_framing": None}


def eval_measures(doc: dict[str, Any], *, strip: bool = False) -> dict[str, tuple[int, int]]:
    """Counts behind each target, from the per-item predictions of an auditor-eval report
    (``strip``: without the framing question's findings)."""
    c = item_counts(doc, view=without_framing if strip else None)
    return {"tp": c["tp"], "fp": c["fp"], "fn": c["fn"], "hard": c["hard_negative_fp"],
            "self": c["self_description_fp"], "benevolent": c["benevolent_recall"],
            "domain": c["domain_accuracy"]}  # fmt: skip


def _f1(m: dict[str, tuple[int, int]]) -> float:
    tp, fp, fn = m["tp"][0], m["fp"][0], m["fn"][0]
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def adversarial_measures(doc: dict[str, Any], *, strip: bool = False) -> dict[str, tuple[int, int]]:
    """Evasion, planted-verdict forgery and hard-negative tags of a v4 run (``strip``: a text
    flagged only for a manipulation finding that normalisation does not make counts as
    clean: that finding was the framing question's)."""
    data = json.loads((data_dir("adversarial") / f"{doc['meta']['set']}.json").read_text())
    judged = dict(doc["judged"])
    if strip:
        texts = {b["id"]: b["text"] for b in data["bases"]} | {
            i["id"]: i["text"] for i in data["items"]}  # fmt: skip
        for key, j in judged.items():
            only_framing = j["manipulation"] and not normalize_memory(texts[key]).findings
            if only_framing and j["bias_type"] is None and j["status"] == "tagged":
                judged[key] = {**j, "flagged": False, "status": "clean"}
    bases = {b["id"]: b for b in data["bases"]}
    evade = [0, 0]
    planted = [0, 0]
    hard = [0, 0]
    for item in data["items"]:
        if item["id"] not in judged:
            continue
        j = judged[item["id"]]
        twin = judged.get(item["base"])
        if item["expected"] == "evade_attempt" and twin and twin["flagged"]:
            evade[0] += not j["flagged"]
            evade[1] += 1
        if item["expected"] == "planted_verdict" and not bases[item["base"]]["biased"]:
            planted[0] += bool(j.get("bias_tagged", j["flagged"]))
            planted[1] += 1
        if item["expected"] == "hard_negative":
            hard[0] += j["flagged"]
            hard[1] += 1
    return {"evasion": tuple(evade), "forgery": tuple(planted), "hard": tuple(hard)}  # type: ignore[dict-item]


NOTES = """auditor_eval_v2 test, whole split: the default gives the previous default's verdicts
on every v2 text (normalize_v3 leaves every v1/v2 text as normalize_v2 did, all v2 texts
are English, and none has a manipulation finding), so its committed whole-split run
stands for both: F1 0.88 [0.82, 0.93], hard-negative FP 0.22, benevolent recall 0.89,
domain accuracy 0.81 (benchmarks/results/auditor_eval_v2/auditor_eval_v2_summary.md). A whole-split rerun
was started and stopped for time; the 24-item replay above agrees.

## What was fitted on what

- First stage (`first_stage_classifier_v3`): auditor_eval_v1/v2 train texts (unchanged).
  Since then the default is `first_stage_classifier_v4` (the English v1/v2/v3 train texts,
  v3/train's neutral kinds as negatives) with calibration_v3's fusion (v2/train, n = 100);
  the runs in this summary used v3 with calibration_v1/v2. v4 on the same verdicts:
  `first_stage_v4.md`; the current default on every set: `trust/summary.md`. The chat
  mix's group-related texts drawn from v3/train are training data of first stage v4.
- Platt calibration and the two judges' fusion: auditor_eval_v2/train (n = 100), fitted for
  auditor_v3; auditor_v4 and auditor_v5 send the same verdict turn (same prefix, same yes/no
  question), so calibration_v2 carries those parameters over unchanged.
- Framing threshold (P(yes) >= 0.5): not fitted, set before any run.
- Normaliser v3 and the language test: rules written from the attack kinds the issue names;
  checked to leave the v1, v2 and v3-train texts unchanged (except two maths questions the
  language test sends to the LLM). Not fitted on any test split.
- Kind question (`+kind` fusion): not fitted (no train-split run fitted the machine's time),
  so the auditor does not ask it.
- Nothing was fitted on auditor_eval_v3 test, auditor_eval_v2 test or adversarial_memories_v4.

## How often the test sets were looked at

- auditor_eval_v3 test (stratified 20): the baseline once, auditor_v4 once, the default
  once (if its run is listed below; otherwise the replay column stands for it).
- auditor_eval_v2 test (stratified 24): auditor_v4 once (the baseline's verdicts are its
  committed whole-split run; the default's are the replay).
- adversarial_memories_v4 (sample 16): the baseline, auditor_v4, auditor_v5 and the
  default once each. auditor_v5's change (the framing question on every LLM-judged
  memory, worded for planted verdicts) was made after auditor_v4's run showed planted
  requests passing as bias, and the choice of the default (no framing question) after
  auditor_v4's runs on all three sets showed the question flagging plain questions and
  mentions: those two decisions were taken with the test sets in view, so the default's
  numbers here are not an independent estimate.

## Cost of the verdict path (tokens, qwen2.5 tokenizer)

Every turn reuses the cached prompt prefix (~1,300 tokens: system message and examples).
New tokens per LLM-judged memory: the memory in its request template (~40 + the memory)
and the yes/no question (28); a likely bias adds the domain question (37); the framing
question (72; auditor_v4's: 57) follows either answer in auditor_v5 (auditor_v4: clean
verdicts only); each turn adds ~5 tokens of chat template and decodes one token. The
rationale (31 + up to 80 decoded tokens, ~9 s at 9 tokens/s) left the status path: the
worker writes it later. A 60-token memory thus costs ~190-250 prefill tokens on the
status path, 5-7 s at 36 tokens/s (auditor_v3 with its rationale: ~175 prefill + 80
decoded tokens on a tagged memory, ~14 s). Audits/s on the chat mix are measured by the throughput benchmark, not here.
"""


def _load(name: str, pattern: str) -> dict[str, Any] | None:
    found = sorted(RUNS[name].glob(pattern))
    return json.loads(found[0].read_text()) if found else None


def main() -> int:
    rows = []
    lines = ["# auditor_v4 against the baseline: auditor_eval_v3 test and adversarial_memories_v4",
             "", __doc__.split("\n\n", 1)[1].strip(), ""]  # fmt: skip
    ev = {n: _load(n, "auditor_eval_v3_*_test_n20.json") for n in RUNS}
    adv = {n: _load(n, "adversarial_memories_v4_sample16.json") for n in RUNS}
    common: set[str] = set.intersection(
        *[{i["id"] for i in d["items"]} for d in ev.values() if d] or [set()]
    )
    em = {}
    for name, doc in ev.items():
        if doc:
            doc = {**doc, "items": [i for i in doc["items"] if i["id"] in common]}
            em[name] = eval_measures(doc)
            if name == "auditor_v4":
                em[REPLAY] = eval_measures(doc, strip=True)
    am = {n: adversarial_measures(d) for n, d in adv.items() if d}
    if adv.get("auditor_v4"):
        am[REPLAY] = adversarial_measures(adv["auditor_v4"], strip=True)
    columns = [*RUNS, REPLAY]
    targets = [
        ("F1, auditor_eval_v3 test", ">= 0.90", lambda m: f"{_f1(m):.2f}", "eval"),
        ("hard-negative FP", "<= 0.10", lambda m: _rate(*m["hard"]), "eval"),
        ("self-description FP", "<= 0.05", lambda m: _rate(*m["self"]), "eval"),
        ("benevolent recall", ">= 0.80", lambda m: _rate(*m["benevolent"]), "eval"),
        ("domain accuracy (true positives)", ">= 0.85", lambda m: _rate(*m["domain"]), "eval"),
        ("evasion, adversarial_memories_v4", "<= 0.10", lambda m: _rate(*m["evasion"]), "adv"),
        ("planted-verdict forgery (bias domain on a neutral text)", "0", lambda m: _rate(*m["forgery"]), "adv"),
        ("hard negatives of v4 tagged", "-", lambda m: _rate(*m["hard"]), "adv"),
    ]  # fmt: skip
    lines += ["## Targets", "", f"auditor_eval_v3 test: the {len(common)} items both runs judged.",
              "", "| measure | target | " + " | ".join(columns) + " |",
              "|---|---|" + "---|" * len(columns)]  # fmt: skip
    for label, target, fmt, kind in targets:
        src = em if kind == "eval" else am
        cells = [fmt(src[n]) if n in src else "not run" for n in columns]
        rows.append((label, target, *cells))
        lines.append(f"| {label} | {target} | " + " | ".join(cells) + " |")
    v2 = {"baseline": json.loads(V2_BASELINE.read_text()),
          "auditor_v4": _load("auditor_v4", "auditor_eval_v2_*_test*.json")}  # fmt: skip
    if v2["auditor_v4"] is not None:
        keep = {i["id"] for i in v2["auditor_v4"]["items"]}
        lines += ["", f"auditor_eval_v2 test: the {len(keep)} items of the auditor_v4 run "
                  "(stratified subset); the baseline's verdicts on them come from its committed "
                  "whole-split run.", "", f"| measure | target | baseline | auditor_v4 | {REPLAY} |",
                  "|---|---|---|---|---|"]  # fmt: skip
        vm = {n: eval_measures({**d, "items": [i for i in d["items"] if i["id"] in keep]})
              for n, d in v2.items() if d}  # fmt: skip
        v4doc = v2["auditor_v4"]
        vm[REPLAY] = eval_measures({**v4doc, "items": v4doc["items"]}, strip=True)
        for label, target, fmt, kind in targets:
            if kind == "eval" and "self" not in label:
                cells = [fmt(vm[n]) for n in ("baseline", "auditor_v4", REPLAY)]
                lines.append(f"| {label.replace('v3', 'v2')} | {target} | " + " | ".join(cells)
                             + " |")  # fmt: skip
    whole = {
        "auditor_eval_v3 test": _load("default", "auditor_eval_v3_*_pipeline_test.json"),
        "auditor_eval_v2 test": _load("default", "auditor_eval_v2_*_pipeline_test.json"),
    }
    whole_adv = _load("default", "adversarial_memories_v4.json")
    if any(whole.values()) or whole_adv:
        lines += ["", "## Whole sets, default pipeline", "",
                  "The default on every item of each set (no paired baseline on v3 and v4; on "
                  "v2 the previous default's committed whole-split run).", "",
                  "| measure | target | default | previous default (v2 only) |", "|---|---|---|---|"]  # fmt: skip
        base_v2 = eval_measures(json.loads(V2_BASELINE.read_text()))
        for set_name, doc in whole.items():
            if doc is None:
                continue
            m = eval_measures(doc)
            for label, target, fmt, kind in targets:
                if kind != "eval" or ("self" in label and "v2" in set_name):
                    continue
                prev = fmt(base_v2) if "v2" in set_name else "-"
                name = label.replace(", auditor_eval_v3 test", "")
                lines.append(f"| {name}, {set_name} (n = {len(doc['items'])}) | {target} | "
                             f"{fmt(m)} | {prev} |")  # fmt: skip
        if whole_adv:
            m = adversarial_measures(whole_adv)
            for label, target, fmt, kind in targets:
                if kind == "adv":
                    lines.append(f"| {label} (whole set) | {target} | {fmt(m)} | - |")
    lines += ["", NOTES, "## Runs", ""]
    extra = [d for d in (*whole.values(), whole_adv) if d]
    for name in RUNS:
        for doc in (ev.get(name), adv.get(name), *(extra if name == "default" else [])):
            if doc is None:
                continue
            command = doc.get("run", doc.get("meta", {})).get("command", "")
            lines.append(f"- {name}: `{command}`")
    lines.append(f"- baseline, auditor_eval_v2: `{V2_BASELINE.relative_to(ROOT)}`")
    lines.append("")
    (RESULTS / "summary.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
