"""Build hook: the wheel carries ``policies/`` and ``auditor_prompts/``.

Both directories stay at the repository root, where they are versioned and
reviewed on their own; ``build_py`` copies them to ``dmt_proxy/data/<name>`` in
the build tree, where ``dmt_proxy.resources.data_dir`` finds them in an installed
package. Editable installs skip the copy: a checkout reads the root directories.
Everything else about the package is declared in ``pyproject.toml``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHIPPED = ("policies", "auditor_prompts")


class BuildPyWithData(build_py):
    """``build_py`` that also copies the top-level data directories into the package."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for name in SHIPPED:
            target = Path(self.build_lib) / "dmt_proxy" / "data" / name
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(ROOT / name, target, ignore=shutil.ignore_patterns("__pycache__"))


setup(cmdclass={"build_py": BuildPyWithData})
