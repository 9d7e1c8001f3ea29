"""The group-free rule replayed over judge v2's committed test runs (no model call).

The rule (``group_free`` in ``dmt_proxy/audit/judge_stage.py``; the judge's README, second
amendment) was added after ``auditor_eval_v3`` test (two looks) and ``auditor_eval_v4``
test (one look) were measured. Its inputs are all in the committed runs: each item's text,
the LLM's stored verdict and the groups the text names. This replays it over those
verdicts, as the pipeline applies it (on the text the judges see: normalised and bounded),
and writes the runs as they would have been, for ``dmt-bench judge-report``. A further look
at both test splits, reported beside the earlier ones; nothing is chosen from it. An item
whose verdict named the user *and* the assistant (``speaker: both``) and is cleared keeps
the assistant's part only if the judge was sure of it, which the stored verdict does not
say: such items are counted and left as they were.

    python benchmarks/perf/judge_group_free_replay.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from dmt_proxy.audit.judge_stage import group_free
from dmt_proxy.audit.language import probably_english
from dmt_proxy.audit.normalize import NORMALIZER_VERSION
from dmt_proxy.audit.schema import TRAINED_JUDGE_LABEL, AuditVerdict
from dmt_proxy.audit.stages import bounded_for_judges
from dmt_proxy.policy import load_policy

ROOT = Path(__file__).resolve().parents[2]
EVAL = ROOT / "benchmarks" / "results" / "judge_v2" / "eval"
RUNS = ("auditor_eval_v3_qwen2.5-1.5b_auditor_v3_auto_judge_v2_test",
        "auditor_eval_v4_qwen2.5-1.5b_auditor_v3_auto_judge_v2_test")  # fmt: skip
OUT = EVAL / "group_free_replay"


def replay(doc: dict[str, object]) -> dict[str, int]:
    """Apply the rule to every item's verdict in place; what it changed."""
    max_chars = load_policy().audit.judged_chars
    counts = {"items": 0, "cleared": 0, "kept_both": 0}
    for entry in doc["items"]:  # type: ignore[attr-defined]
        counts["items"] += 1
        verdict = AuditVerdict.model_validate(entry["verdict"])
        if verdict.auditor == TRAINED_JUDGE_LABEL:
            continue  # decided by the judge alone: the rule applies to the LLM's word
        text = bounded_for_judges(entry["item"]["text"], max_chars, NORMALIZER_VERSION)[0]
        after = group_free(verdict, text, english=probably_english(text))
        if after == verdict:
            continue
        if verdict.speaker == "both":
            counts["kept_both"] += 1
            continue
        counts["cleared"] += 1
        entry["verdict"] = json.loads(after.model_dump_json(exclude_none=True))
    return counts


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    changed = {}
    for name in RUNS:
        doc = json.loads((EVAL / "runs" / f"{name}.json").read_text(encoding="utf-8"))
        changed[name] = replay(doc)
        (OUT / f"{name}.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n",
                                          encoding="utf-8")  # fmt: skip
    (OUT / "changed.json").write_text(json.dumps(changed, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(changed, indent=1))
    runs = [str(OUT / f"{name}.json") for name in RUNS]
    return subprocess.call([sys.executable, "-m", "dmt_bench.auditor_eval.judge_report", *runs,
                            "--out", str(OUT / "summary")])  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
