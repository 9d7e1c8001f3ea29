"""Plugins as pip installs them: entry points read from a wheel's metadata, in a fresh
interpreter, and an installed plugin without a contract config run through the contract
tests in a pytest subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


INSTALLED = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from dmt_proxy import plugins
    print(json.dumps({"source": plugins._source_declaration(),
                      "builtins": plugins.declared_builtins("dmt_proxy.auditors"),
                      "outside": plugins.outside_plugins("dmt_proxy.auditors")}))
""")


def test_an_installed_wheel_reads_its_builtins_from_its_metadata(tmp_path: Path) -> None:
    # The layout pip leaves for a wheel: the package and its dist-info, no pyproject.toml.
    site = tmp_path / "site"
    (site / "dmt_proxy").mkdir(parents=True)
    for name in ("__init__.py", "plugins.py", "errors.py"):
        shutil.copy(ROOT / "dmt_proxy" / name, site / "dmt_proxy" / name)
    dist = site / "dmt_proxy-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: dmt-proxy\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[dmt_proxy.auditors]\nllm = dmt_proxy.audit.auditor\n")
    # -S: no site-packages, so a dmt-proxy installed there (editable) is not seen.
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", INSTALLED, str(site)],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["source"] is None
    assert out["builtins"] == {"llm": "dmt_proxy.audit.auditor"}
    assert "llm" not in out["outside"]  # dmt-proxy's own entry points are never "outside"


def test_an_installed_auditor_without_contract_config_is_skipped(tmp_path: Path) -> None:
    # The plugin is only ever imported by the pytest subprocess, from this directory.
    plugin_dir, unique = tmp_path, f"plug_{uuid.uuid4().hex[:8]}"
    (plugin_dir / f"{unique}_auditor.py").write_text(
        textwrap.dedent("""
            from dmt_proxy.audit.registry import register_auditor

            @register_auditor("bare")
            class Bare:
                @classmethod
                def from_config(cls, config):
                    return cls()
        """),
        encoding="utf-8",
    )
    dist = plugin_dir / f"{unique}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {unique}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[dmt_proxy.auditors]\nbare = {unique}_auditor\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_dir), str(ROOT)])}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-k", "bare",
         str(ROOT / "tests" / "unit" / "test_auditor_contract.py")],
        capture_output=True, text=True, timeout=300, check=False, cwd=ROOT, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "failed" not in proc.stdout and "skipped" in proc.stdout
    assert f"auditor 'bare' (from {unique}_auditor) declares no contract_config" in proc.stdout
