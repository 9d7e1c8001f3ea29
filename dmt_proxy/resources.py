"""Locate the versioned data directories the package reads.

``policies/`` and ``auditor_prompts/`` live at the repository root so they can be
reviewed and versioned on their own; the wheel build (``setup.py``) copies them
under ``dmt_proxy/data/``. A source checkout (editable install, CI) reads the root
ones; an installed wheel reads its copies. Everything else the package reads
(``mmlu_pro``, ``iat``, ``bias_list``, ...) lives under ``dmt_proxy/data/`` only.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def _checkout_root() -> Path | None:
    """The repository root when the package runs from a source checkout, else None."""
    root = _PACKAGE_DIR.parent
    # An installed package sits in site-packages, whose other top-level directories
    # belong to other distributions: only a checkout's root is ours to read.
    return root if (root / "pyproject.toml").is_file() else None


def data_dir(name: str) -> Path:
    """Return the directory ``name`` (``policies``, ``auditor_prompts``, ``mmlu_pro``, ...)."""
    root = _checkout_root()
    candidates = [_PACKAGE_DIR / "data" / name]
    if root is not None:
        candidates.insert(0, root / name)
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"data directory '{name}' not found at {' or '.join(map(str, candidates))}"
    )


def prompt_path(versioned_name: str) -> Path:
    """Path of the prompt ``auditor_prompts/<versioned_name>.md`` (e.g. ``ssp_v1``)."""
    path = data_dir("auditor_prompts") / f"{versioned_name}.md"
    if not path.is_file():
        raise FileNotFoundError(f"prompt '{versioned_name}' not found at {path}")
    return path
