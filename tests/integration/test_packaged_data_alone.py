"""The project carries its own data: the quick compare's stream set-up reads only packaged data.

The stream set-up (``benchmarks/configs/quick.yaml`` through the simulation's
``Experiment.streams``, with the shipped scripted generator) runs in a subprocess from a
copy of the checkout that has no ``shared/`` beside it; an audit hook records every path
the process opens or lists, and none may be under a ``shared`` folder beside the copy or
beside this checkout. The stream must be the one the committed quick run used. The
in-process checks of the packaged copy are in ``tests/unit/test_packaged_data.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from dmt_bench.sim.stream import read_stream

ROOT = Path(__file__).resolve().parents[2]
QUICK_RUN = ROOT / "benchmarks" / "results" / "sim" / "quick_mem0_seed0"


SCRIPT = r"""
import asyncio, json, os, sys
from pathlib import Path

seen = []

def audit(event, args):
    if event in ("open", "os.listdir", "os.scandir") and args:
        target = args[0]
        if isinstance(target, (str, bytes, os.PathLike)):
            seen.append(os.path.abspath(os.fsdecode(target)))

sys.addaudithook(audit)

import dmt_proxy
from dmt_bench.harness.progress import Bars
from dmt_bench.sim.config import load_config
from dmt_bench.sim.runner import Experiment
from dmt_proxy.settings import Settings
from dmt_bench.testing.sim import scripted_generator

checkout, out = Path(sys.argv[1]), Path(sys.argv[2])
config = load_config(checkout / "benchmarks" / "configs" / "quick.yaml")
exp = Experiment(config, out, settings=Settings(), resume=False, bars=Bars(enabled=False),
                 generator=scripted_generator())
try:
    stream = asyncio.run(exp.streams([None]))[None]
finally:
    exp.close()
meta = json.loads(next((out / "streams").glob("*.meta.json")).read_text())
print(json.dumps({
    "package": dmt_proxy.__file__,
    "source": meta["source"],
    "sha256": meta["source_sha256"],
    "turns": [[t.question_id, t.inject, t.domain] for t in stream],
    "opened": seen,
}))
"""


def _copy_checkout(dest: Path) -> Path:
    """What a clone holds that the stream set-up needs; no ``shared/`` next to it."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("dmt_proxy", "policies", "auditor_prompts"):
        shutil.copytree(ROOT / name, dest / name, ignore=skip)
    (dest / "benchmarks" / "configs").mkdir(parents=True)
    shutil.copy2(ROOT / "benchmarks" / "configs" / "quick.yaml", dest / "benchmarks" / "configs")
    shutil.copy2(ROOT / "pyproject.toml", dest)
    return dest


def test_quick_stream_set_up_reads_only_packaged_data(tmp_path: Path) -> None:
    checkout = _copy_checkout(tmp_path / "clone" / "dmt-proxy")
    assert not (checkout.parent / "shared").exists()
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMT_")}
    env["PYTHONPATH"] = str(checkout)
    env["DMT_STATE_DIR"] = str(tmp_path / "state")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(checkout), str(tmp_path / "run")],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])

    assert Path(got["package"]).is_relative_to(checkout)  # the copy, not the checkout under test
    forbidden = (str(checkout.parent / "shared"), str(ROOT.parent / "shared"), "/work/shared")
    assert [p for p in got["opened"] if p.startswith(forbidden) or "shared/data" in p] == []
    packaged = checkout / "dmt_proxy" / "data" / "mmlu_pro" / "test.jsonl.gz"
    assert got["source"] == str(packaged) and str(packaged) in got["opened"]
    # the same data, and the same stream, as the committed quick run (built from ../shared)
    committed_meta = json.loads((QUICK_RUN / "streams" / "mixed-all.meta.json").read_text())
    assert got["sha256"] == committed_meta["source_sha256"]
    committed = read_stream(QUICK_RUN / "streams" / "mixed-all.jsonl")
    assert got["turns"] == [[t.question_id, t.inject, t.domain] for t in committed]
