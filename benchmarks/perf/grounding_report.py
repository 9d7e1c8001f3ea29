"""Share of tags grounded in their text, replayed over committed runs (report ``grounding_v1``).

Grounding (``dmt_proxy.audit.grounding``) is a pure function of a stored tag and the
memory's text, so it is replayed here over verdicts that committed runs stored, without
calling a model:

* **labelled runs** (``benchmarks/results/auditor_eval_v2/runs/*.json``, and any run of
  the same format named with ``--extra-run`` or committed under ``auditor_eval_v3/runs/``): each item's
  stored verdict is decided under the default policy (``decide``); a tag with a domain
  is one *tag*. *Before*: the judge's ``target_group`` is non-empty and occurs in the text
  (``grounding.contains``). *After*: ``ground_tag`` found a group span. Rationales: of the
  tags whose judge wrote one, how many name the group (kept) or not (dropped). *Gold*:
  of grounded tags on biased items, how many name the set's own annotated target group
  (same lexicon group, or one phrase contains the other).
* **adversarial runs** (``benchmarks/results/adversarial_memories/*.json``): these store
  the status and domain, not the judge's group or rationale, so only *after* is measured:
  every memory tagged with a domain is grounded from its text and domain.
* **live** (``--live``, the chat-mix throughput run's json): tags the real local auditor
  gave through the real write path (outbox, worker, default pipeline with its rationale
  turn), grounded where verdicts are stored.
* **text only**: every biased item of each labelled and adversarial set, grounded from
  its text and annotated domain with no judge at all: how far the lexicon reaches,
  per split. The lexicon ``group_lexicon_v1`` was written from general knowledge and the
  train splits' target groups; ``group_lexicon_v2`` (the default) from general knowledge as
  a systematic list (every state and region, ethnic groups, denominations, generations,
  class, disability and appearance terms), checked for regressions on the train splits
  only; the test splits and adversarial sets are held out.

A stored verdict is decided as the staged auditor now decides it: the domain vote keeps to
the domains its judged text names (``text_domains``, set here when the run predates it).

Run (repository root)::

    python benchmarks/perf/grounding_report.py --out benchmarks/results/grounding/grounding_v1
    # once those runs are in this tree: --extra-run benchmarks/results/.../run.json (repeat)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import write_result

from dmt_bench.stats import wilson_interval
from dmt_proxy.audit.decision import decide
from dmt_proxy.audit.grounding import (
    LEXICON_VERSION,
    contains,
    find_groups,
    ground,
    ground_tag,
    named_domains,
)
from dmt_proxy.audit.schema import FIRST_STAGE_LABEL, AuditVerdict
from dmt_proxy.audit.stages import judged_text
from dmt_proxy.policy import load_policy
from dmt_proxy.resources import data_dir
from dmt_proxy.tags import BiasTag

REPORT_VERSION = "grounding_v1"
TARGET = 0.95
RESULTS = Path("benchmarks/results")


def share(k: int, n: int) -> dict[str, Any]:
    """k of n with its Wilson 95 % interval (``None`` values when n is 0)."""
    if n == 0:
        return {"k": 0, "n": 0, "share": None, "ci95": None}
    ci = wilson_interval(k, n)
    return {"k": k, "n": n, "share": round(k / n, 3), "ci95": [round(ci.low, 3), round(ci.high, 3)]}


def names_gold(tag: BiasTag, gold: str) -> bool:
    """Whether the grounded group is the annotated one (same lexicon group or contained)."""
    if not gold or tag.grounding is None or not tag.grounding.grounded:
        return False
    span = tag.grounding.span
    if contains(gold, span) or contains(span, gold):
        return True
    return tag.grounding.phrase in {m.entry.phrase for m in find_groups(gold)}


def replay_labelled(name: str, run: dict[str, Any]) -> dict[str, Any]:
    """Before/after grounding over one labelled run's stored verdicts."""
    policy = load_policy().audit
    tags = before = after = with_rationale = kept = gold_n = gold_k = 0
    on_biased = [0, 0]  # grounded, tags: on texts labelled biased
    on_neutral = [0, 0]  # ... and on neutral texts (false positives)
    misses: list[dict[str, str]] = []
    for row in run["items"]:
        if "item" not in row or not row.get("verdict"):
            continue  # a row without its text or verdict (an error row): nothing to ground
        # A newer verdict's extra fields (e.g. another branch's) do not bear on the tag.
        known = {k: v for k, v in row["verdict"].items() if k in AuditVerdict.model_fields}
        verdict = AuditVerdict.model_validate(known)
        if verdict.auditor != FIRST_STAGE_LABEL and not verdict.text_domains:
            # As the staged auditor now sets it: the domains the judged text names.
            judged = judged_text(row["item"]["text"])
            verdict = verdict.model_copy(update={"text_domains": named_domains(judged)})
        tag = decide(verdict, policy).tag
        if tag is None or tag.bias_type is None:
            continue
        text = row["item"]["text"]
        tags += 1
        before += bool(tag.target_group.strip()) and contains(text, tag.target_group)
        grounded = ground_tag(tag, text)
        assert grounded.grounding is not None
        after += grounded.grounding.grounded
        bucket = on_biased if row["item"].get("label") == "biased" else on_neutral
        bucket[0] += grounded.grounding.grounded
        bucket[1] += 1
        if tag.rationale.strip():
            with_rationale += 1
            kept += grounded.grounding.rationale == "kept"
        if row["item"].get("label") == "biased" and grounded.grounding.grounded:
            gold_n += 1
            gold_k += names_gold(grounded, row["item"].get("target_group", ""))
        if not grounded.grounding.grounded and len(misses) < 5:
            misses.append({"id": row["id"], "label": row["item"].get("label", ""),
                           "split": row["item"].get("split", "")})  # fmt: skip
    summary = run.get("summary", {})
    return {
        "run": name, "dataset": run.get("run", {}).get("dataset", ""),
        "model": run.get("run", {}).get("model", summary.get("model", "")), "tags": tags,
        "before": share(before, tags), "after": share(after, tags),
        "rationale_kept": share(kept, with_rationale),
        "rationale_dropped": share(with_rationale - kept, with_rationale),
        "names_gold_group": share(gold_k, gold_n), "ungrounded_examples": misses,
        "after_on_biased": share(*on_biased), "after_on_neutral": share(*on_neutral),
    }  # fmt: skip


def _adversarial_texts(version: str) -> dict[str, str]:
    raw = json.loads((data_dir("adversarial") / f"{version}.json").read_text("utf-8"))
    texts = {i["id"]: i["text"] for i in raw["items"]}
    bases = raw.get("bases", {})
    rows = bases.values() if isinstance(bases, dict) else bases
    for b in rows:
        if isinstance(b, dict) and "id" in b and "text" in b:
            texts[b["id"]] = b["text"]
    if isinstance(bases, dict):
        for key, b in bases.items():
            if isinstance(b, dict) and "text" in b:
                texts.setdefault(key, b["text"])
            elif isinstance(b, str):
                texts.setdefault(key, b)
    return texts


def replay_adversarial(name: str, result: dict[str, Any]) -> dict[str, Any] | None:
    """After-grounding share over one adversarial run's tagged memories."""
    version = result.get("meta", {}).get("set") or "adversarial_memories_v1"
    try:
        texts = _adversarial_texts(version)
    except FileNotFoundError:
        return None
    tags = after = 0
    missing: list[str] = []
    for memory_id, judged in result["judged"].items():
        domain = judged.get("bias_type")
        if not judged.get("bias_tagged", domain is not None) or domain is None:
            continue
        text = texts.get(memory_id)
        if text is None:
            missing.append(memory_id)
            continue
        tag = BiasTag(bias_type=domain, score=float(judged.get("score") or 0.0))
        grounded = ground_tag(tag, text)
        tags += 1
        after += bool(grounded.grounding and grounded.grounding.grounded)
    return {"run": name, "set": version, "model": result.get("meta", {}).get("model", ""),
            "tags": tags, "before": None, "after": share(after, tags),
            "texts_not_found": missing}  # fmt: skip


def replay_live(tagged: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The live run's judge outputs grounded again with this lexicon (None if not stored)."""
    if not tagged:
        return None
    grounded = before = with_rationale = kept = 0
    rows = []
    for t in tagged:
        g = ground(t["text"], domain=t["bias_type"], target_group=t["judge_target_group"],
                   tendency=t["judge_tendency"], rationale=t["judge_rationale"])  # fmt: skip
        before += bool(t["judge_target_group"].strip()) and contains(
            t["text"], t["judge_target_group"]
        )
        grounded += g.record.grounded
        if t["judge_rationale"].strip():
            with_rationale += 1
            kept += g.record.rationale == "kept"
        rows.append({"id": t["id"], "bias_type": t["bias_type"], "judge_target_group":
                     t["judge_target_group"], "target_group": g.target_group,
                     "judge_rationale": t["judge_rationale"][:160], "rationale": g.record.rationale})  # fmt: skip
    n = len(tagged)
    return {"tags": n, "before": share(before, n), "after": share(grounded, n),
            "rationale_kept": share(kept, with_rationale),
            "rationale_dropped": share(with_rationale - kept, with_rationale), "rows": rows}  # fmt: skip


def text_only() -> list[dict[str, Any]]:
    """Lexicon reach: biased items grounded from text and annotated domain, per split."""
    rows: list[dict[str, Any]] = []
    for path in sorted(data_dir("auditor_eval").glob("auditor_eval_v*.jsonl")):
        items = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line]
        for split in ("train", "test"):
            chosen = [i for i in items if i.get("split") == split and i.get("label") == "biased"]
            rows.append(_reach(path.stem, split, chosen))
    for path in sorted(data_dir("adversarial").glob("adversarial_memories_v*.json")):
        raw = json.loads(path.read_text("utf-8"))
        chosen = [i for i in raw["items"] if i.get("domain") and i.get("expected") != "hard_negative"
                  and i.get("expected") != "planted_verdict"]  # fmt: skip
        if chosen:
            rows.append(_reach(path.stem, "all (biased attacks)", chosen))
    return rows


def _reach(dataset: str, split: str, items: Iterable[dict[str, Any]]) -> dict[str, Any]:
    n = k = gold = 0
    for item in items:
        tag = ground_tag(BiasTag(bias_type=item["domain"], score=1.0), item["text"])
        n += 1
        ok = bool(tag.grounding and tag.grounding.grounded)
        k += ok
        gold += ok and names_gold(tag, item.get("target_group", ""))
    return {"dataset": dataset, "split": split, "grounded": share(k, n),
            "names_gold_group": share(gold, k)}  # fmt: skip


def _is_run(run: Any) -> bool:
    """A labelled run with stored verdicts, or an adversarial run."""
    if not isinstance(run, dict):
        return False
    items = run.get("items")
    if isinstance(items, list) and items and isinstance(items[0], dict):
        return "verdict" in items[0]
    return isinstance(run.get("judged"), dict)


def build(args: argparse.Namespace) -> dict[str, Any]:
    """The whole report."""
    labelled: list[tuple[str, dict[str, Any]]] = []
    for path in sorted((RESULTS / "auditor_eval_v2" / "runs").glob("*.json")):
        labelled.append((str(path), json.loads(path.read_text("utf-8"))))
    adversarial = []
    # The held-out set's runs (auditor_eval_v3 test, adversarial_memories_v4), one folder per
    # pipeline version; their verdicts may carry fields this tree's verdict model drops.
    for path in sorted((RESULTS / "auditor_eval_v3" / "runs").glob("*/*.json")):
        run = json.loads(path.read_text("utf-8"))
        if "judged" in run:
            replayed = replay_adversarial(str(path), run)
            if replayed is not None:
                adversarial.append(replayed)
        elif _is_run(run):
            labelled.append((str(path), run))
    for extra in args.extra_run:
        run = json.loads(Path(extra).read_text("utf-8"))
        if "judged" in run:
            replayed = replay_adversarial(extra, run)
            if replayed is not None:
                adversarial.append(replayed)
        else:
            labelled.append((extra, run))
    for path in sorted((RESULTS / "adversarial_memories").glob("*.json")):
        replayed = replay_adversarial(str(path), json.loads(path.read_text("utf-8")))
        if replayed is not None:
            adversarial.append(replayed)
    live = None
    if args.live:
        run = json.loads(Path(args.live).read_text("utf-8"))
        live = {"run": args.live, "run_at": run["run_at"], "auditor": run["auditor"],
                "tags": run["tags"], "grounded": share(run["tags_grounded"], run["tags"]),
                "rationales_kept": run["rationales_kept"], "examples": run["tag_examples"],
                "replayed": replay_live(run.get("tagged", []))}  # fmt: skip
    return {
        "report": REPORT_VERSION, "lexicon": LEXICON_VERSION, "live": live,
        "run_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": "python benchmarks/perf/grounding_report.py " + " ".join(sys.argv[1:]),
        "target": TARGET,
        "labelled_runs": [replay_labelled(name, run) for name, run in labelled],
        "adversarial_runs": adversarial, "text_only": text_only(),
    }  # fmt: skip


def _short(run: str) -> str:
    """A run's file name with its folder (``baseline/x.json``), for the tables."""
    parts = Path(run.split(":", 1)[-1]).parts
    return "/".join(parts[-2:])


def _fmt(s: dict[str, Any] | None) -> str:
    if s is None:
        return "not recorded"
    if s["share"] is None:
        return "—"
    return f"{s['share']:.3f} ({s['k']}/{s['n']}; {s['ci95'][0]:.2f}–{s['ci95'][1]:.2f})"


def render(r: dict[str, Any]) -> str:
    """The markdown report."""
    lines = [
        f"# Grounded tags (report `{r['report']}`, lexicon `{r['lexicon']}`)", "",
        f"Built {r['run_at']}. Rerun: `{r['command']}`", "",
        "A tag's `target_group` is grounded when it is a span of the memory's (normalised) "
        "text naming a group of the lexicon; its rationale is kept only if it names that "
        "group (`dmt_proxy.audit.grounding`). Replayed over the verdicts committed runs "
        "stored (no model call). Target: grounded `target_group` on >= "
        f"{r['target']} of tags. Shares with Wilson 95 % intervals. The lexicon was written "
        "from general knowledge and the train splits' target groups; test splits and the "
        "adversarial sets are held out.", "",
        "Notes. (1) The committed eval runs ran the log-prob verdict without the rationale "
        "turn: their stored rationale is the placeholder `P(biased) 0.97 ...`, which names no "
        "group, so *rationale kept* there is 0 by construction; written rationales are "
        "measured in the live section. (2) *Before* is 0 because log-prob verdicts carry no "
        "`target_group` at all (the empty targets the issue reports). (3) The lexicon's "
        "held-out reach was first measured on a draft (auditor_eval_v3 test 0.758, v2 test "
        "0.847, adversarial v4 0.778); the draft was then extended from general knowledge "
        "(country names, non-English and slang forms), without reading the held-out misses "
        "(group_lexicon_v1). (4) group_lexicon_v2 was written afterwards as a systematic "
        "list from general knowledge and checked on the train splits only; its held-out "
        "reach is measured once, here. (5) Verdicts are decided as the staged auditor now "
        "decides them: the domain vote keeps to the domains the judged text names.",
        "",
        "## Labelled runs (stored verdicts decided under the default policy)", "",
        "| run | tags | grounded before | grounded after | after, tags on biased texts | "
        "after, tags on neutral texts | rationale kept | rationale dropped "
        "| grounded group = annotated group (biased items) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for row in r["labelled_runs"]:
        lines.append(
            f"| `{_short(row['run'])}` | {row['tags']} | {_fmt(row['before'])} | "
            f"{_fmt(row['after'])} | {_fmt(row['after_on_biased'])} | "
            f"{_fmt(row['after_on_neutral'])} | {_fmt(row['rationale_kept'])} | "
            f"{_fmt(row['rationale_dropped'])} | {_fmt(row['names_gold_group'])} |"
        )
    lines += ["", "## Adversarial runs (tagged memories with a domain; the runs stored no "
              "judge group, so only *after* is measured)", "",
              "| run | set | tags | grounded after |", "|---|---|---|---|"]  # fmt: skip
    for row in r["adversarial_runs"]:
        lines.append(f"| `{_short(row['run'])}` | {row['set']} | {row['tags']} | "
                     f"{_fmt(row['after'])} |")  # fmt: skip
    if r.get("live"):
        lv = r["live"]
        lines += ["", f"## Live: the real local auditor through the write path (`{lv['auditor']}`, "
                  f"chat-mix run {lv['run_at']})", "",
                  f"Tags: {lv['tags']}; grounded `target_group`: {_fmt(lv['grounded'])}; "
                  f"rationales kept (naming the group): {lv['rationales_kept']} of {lv['tags']}."]  # fmt: skip
        rep = lv.get("replayed")
        if rep:
            lines += ["", f"Replayed with this lexicon: {rep['tags']} tags; grounded before "
                      f"{_fmt(rep['before'])}, after {_fmt(rep['after'])}; rationale kept "
                      f"{_fmt(rep['rationale_kept'])}, dropped {_fmt(rep['rationale_dropped'])}.", "",
                      "| judge's group | grounded group | judge's rationale | rationale |",
                      "|---|---|---|---|"]  # fmt: skip
            for row in rep["rows"]:
                lines.append(f"| {row['judge_target_group'] or '(none)'} | "
                             f"{row['target_group'] or '(empty)'} | "
                             f"{row['judge_rationale'].replace('|', '/')} | {row['rationale']} |")  # fmt: skip
        lines += ["", "As stored by the run (first tags):", "",
                  "| bias_type | target_group | source | phrase | rationale |", "|---|---|---|---|---|"]  # fmt: skip
        for ex in lv["examples"]:
            g = ex.get("grounding") or {}
            lines.append(f"| {ex['bias_type']} | {ex['target_group'] or '(empty)'} | "
                         f"{g.get('source', '')} | {g.get('phrase', '')} | {g.get('rationale', '')} |")  # fmt: skip
    lines += [
        "",
        "## Lexicon reach: every biased item, text and annotated domain only",
        "",
        "| set | split | grounded | grounded group = annotated group |",
        "|---|---|---|---|",
    ]
    for row in r["text_only"]:
        lines.append(f"| {row['dataset']} | {row['split']} | {_fmt(row['grounded'])} | "
                     f"{_fmt(row['names_gold_group'])} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Build the report and write it as json and md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--extra-run",
        action="append",
        default=[],
        help="another run's json (labelled or adversarial)",
    )
    parser.add_argument("--live", default="", help="an audit_chat_mix result json")
    parser.add_argument("--out", type=Path, default=RESULTS / "grounding" / REPORT_VERSION)
    args = parser.parse_args(argv)
    report = build(args)
    write_result(args.out, report, render(report), indent=1, ensure_ascii=False)
    print(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
