"""MMLU-Pro questions: the daily-interaction stream's source (paper §4.1).

A source is a local JSON-lines file (gzip or plain) with the fields of the
MMLU-Pro test split (``question_id``, ``question``, ``options``, ``answer``,
``category``...), or ``hf:<dataset>`` (for example ``hf:TIGER-Lab/MMLU-Pro``)
loaded with the ``datasets`` library when it is installed and the hub is
reachable. Without an explicit source, ``$DMT_MMLU_PRO`` or the copy of the
test split shipped in the package (``dmt_proxy/data/mmlu_pro/test.jsonl.gz``, its
provenance and licence beside it) is used.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from dmt_proxy.errors import ConfigError
from dmt_proxy.resources import data_dir

OPTION_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
HF_PREFIX = "hf:"


class MmluQuestion(BaseModel):
    """One MMLU-Pro item (only the fields the simulation uses)."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    question_id: int
    question: str
    options: list[str]
    answer: str = ""
    category: str = ""

    def options_block(self) -> str:
        """Options as ``A. text`` lines (the form shown to the agent and the generator)."""
        return "\n".join(f"{OPTION_LETTERS[i]}. {o}" for i, o in enumerate(self.options))

    def plain_prompt(self) -> str:
        """The neutral user query q_raw: the question, then its lettered options."""
        return f"{self.question.strip()}\n\nOptions:\n{self.options_block()}"

    def size_chars(self) -> int:
        """Characters of question plus options (the context-budget filter's measure)."""
        return len(self.question) + sum(len(o) for o in self.options)


class LoadedSource(BaseModel):
    """Questions of a source and a fingerprint of it (recorded with every stream)."""

    model_config = ConfigDict(frozen=True)
    source: str
    sha256: str
    questions: list[MmluQuestion]


def packaged_copy() -> Path:
    """The MMLU-Pro test split shipped in the package."""
    return data_dir("mmlu_pro") / "test.jsonl.gz"


def default_source() -> str:
    """``$DMT_MMLU_PRO``, else the copy shipped in the package."""
    env = os.environ.get("DMT_MMLU_PRO")
    if env:
        return env
    return str(packaged_copy())


def _parse_rows(rows: Iterable[dict[str, Any]], where: str) -> list[MmluQuestion]:
    out: list[MmluQuestion] = []
    for i, row in enumerate(rows, 1):
        try:
            q = MmluQuestion.model_validate(row)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise ConfigError(
                f"{where}: row {i} is not an MMLU-Pro item ({loc}: {first['msg']})"
            ) from None
        if len(q.options) > len(OPTION_LETTERS):
            raise ConfigError(f"{where}: row {i} has {len(q.options)} options (max 26)")
        out.append(q)
    if not out:
        raise ConfigError(f"{where}: no questions")
    return out


def _load_file(path: Path) -> LoadedSource:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"cannot read MMLU-Pro file {path}: {exc.strerror or exc} (set stream.source, "
            f"--mmlu or $DMT_MMLU_PRO to a JSON-lines file of the MMLU-Pro test split)"
        ) from exc
    data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    rows: list[dict[str, Any]] = []
    for n, line in enumerate(data.decode("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: line {n} is not JSON ({exc.msg})") from None
    return LoadedSource(
        source=str(path),
        sha256=hashlib.sha256(raw).hexdigest(),
        questions=_parse_rows(rows, str(path)),
    )


def _load_hub(name: str) -> LoadedSource:
    try:
        import datasets
    except ImportError:
        raise ConfigError(
            f"source '{HF_PREFIX}{name}' needs the 'datasets' package (pip install datasets); "
            "or give a local JSON-lines file"
        ) from None
    try:
        split = datasets.load_dataset(name, split="test")
    except Exception as exc:  # the hub raises many types; all mean "not available here"
        raise ConfigError(f"cannot load '{name}' from the hub: {exc}") from exc
    rows = [dict(r) for r in split]
    digest = hashlib.sha256(
        "".join(json.dumps(r, sort_keys=True) for r in rows).encode()
    ).hexdigest()
    return LoadedSource(
        source=HF_PREFIX + name, sha256=digest, questions=_parse_rows(rows, HF_PREFIX + name)
    )


def load_source(source: str | None = None) -> LoadedSource:
    """Load every question of ``source`` (see the module docstring)."""
    source = source or default_source()
    if source.startswith(HF_PREFIX):
        return _load_hub(source.removeprefix(HF_PREFIX))
    return _load_file(Path(source).expanduser())


def select_questions(
    questions: Sequence[MmluQuestion],
    count: int,
    seed: int,
    *,
    max_chars: int | None = None,
    categories: Sequence[str] | None = None,
) -> list[MmluQuestion]:
    """``count`` distinct questions, sampled with ``random.Random(f"sim-mmlu:{seed}")``.

    Filters apply first: at most ``max_chars`` characters of question plus options
    (keeps injected memories inside a small model's context), and only the given
    categories. The result depends on the seed and the source, not on the machine.
    """
    wanted = {c.lower() for c in categories} if categories else None
    pool = [
        q
        for q in questions
        if (max_chars is None or q.size_chars() <= max_chars)
        and (wanted is None or q.category.lower() in wanted)
    ]
    if len(pool) < count:
        raise ConfigError(
            f"only {len(pool)} MMLU-Pro questions pass the filters "
            f"(max_question_chars={max_chars}, categories={categories}); {count} needed"
        )
    rng = random.Random(f"sim-mmlu:{seed}")
    return rng.sample(pool, count)
