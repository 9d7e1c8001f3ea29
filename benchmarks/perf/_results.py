"""Helpers shared by the benchmark scripts' result writers."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def finite(value: Any) -> Any:
    """``value`` with every NaN/inf float replaced by None (strict JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def write_result(
    stem: Path,
    data: Any,
    markdown: str | None = None,
    *,
    indent: int = 2,
    ensure_ascii: bool = True,
    allow_nan: bool = True,
    add_suffix: bool = False,
) -> None:
    """Write a script's result: ``data`` as ``<stem>.json`` (``json.dumps`` with these
    options, then a newline) and, given ``markdown``, that text as ``<stem>.md``, exactly
    as given (UTF-8; the folder is created).

    The suffixes replace the stem's own, as ``Path.with_suffix`` does (``--out x.json``
    writes ``x.json`` and ``x.md``); ``add_suffix=True`` appends them to the name
    instead, for a name with a dot of its own (``tool_calls_qwen2.5-0.5b``). ``data`` is
    written as given: pass ``finite(data)`` for strict JSON.
    """

    def path(suffix: str) -> Path:
        return stem.with_name(stem.name + suffix) if add_suffix else stem.with_suffix(suffix)

    stem.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=indent, ensure_ascii=ensure_ascii, allow_nan=allow_nan)
    path(".json").write_text(text + "\n", encoding="utf-8")
    if markdown is not None:
        path(".md").write_text(markdown, encoding="utf-8")
