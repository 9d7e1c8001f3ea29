"""Locate the versioned data directories shipped at the top of the repository.

``policies/`` and ``auditor_prompts/`` live at the repository root so they can be
reviewed and versioned on their own; an installed wheel carries copies under
``dmt_proxy/data/``. Source checkouts (editable installs, CI) use the root ones.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """Return the directory ``name`` (``policies``, ``auditor_prompts``, ...)."""
    for candidate in (_PACKAGE_DIR.parent / name, _PACKAGE_DIR / "data" / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"data directory '{name}' not found next to {_PACKAGE_DIR}")


def prompt_path(versioned_name: str) -> Path:
    """Path of the prompt ``auditor_prompts/<versioned_name>.md`` (e.g. ``ssp_v1``)."""
    path = data_dir("auditor_prompts") / f"{versioned_name}.md"
    if not path.is_file():
        raise FileNotFoundError(f"prompt '{versioned_name}' not found at {path}")
    return path
