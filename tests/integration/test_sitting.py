"""A run's manifest records what each sitting ran: commit, changed files, packages, inputs
(the parts that read the checkout with git; what the report makes of them: the unit test)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from dmt_bench.harness.rundir import MANIFEST, Manifest, open_run_dir, set_status
from dmt_bench.harness.runlock import release
from dmt_bench.harness.sitting import input_hashes, this_sitting

ROOT = Path(__file__).resolve().parents[2]


class _Config:
    kind, name = "dose", "sitting-test"

    def digest(self) -> str:
        return "d" * 64

    def model_dump(self, *, mode: str) -> dict[str, object]:
        return {"name": self.name}


def test_a_sitting_names_the_checkouts_commit_and_hashes_the_shipped_inputs() -> None:
    sitting = this_sitting()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    assert sitting.commit == head
    assert sitting.dirty is not None  # a checkout: clean ([]) or the changed paths
    assert "dmt-proxy" in sitting.packages and sitting.python
    judge = input_hashes(("judge",))
    assert judge and all(len(h) == 64 for h in judge.values())
    assert set(judge) <= set(sitting.inputs)
    assert any(k.startswith("policies/") for k in sitting.inputs)


def test_each_start_and_resume_appends_a_sitting_and_old_manifests_still_load(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    manifest = open_run_dir(out, _Config(), resume=False, version="dose-v2")
    assert len(manifest.sittings) == 1
    set_status(out, "stopped")
    release(out)
    again = open_run_dir(out, _Config(), resume=True, version="dose-v2")
    release(out)
    assert len(again.sittings) == 2
    stored = Manifest.model_validate_json((out / MANIFEST).read_text("utf-8"))
    assert len(stored.sittings) == 2
    # A manifest written before sittings were recorded loads with none.
    old = json.loads((out / MANIFEST).read_text("utf-8"))
    del old["sittings"]
    assert Manifest.model_validate(old).sittings == []
