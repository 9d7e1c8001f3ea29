"""``WordHashEncoder``: a fake sentence encoder for unit tests of the trained judge.

Not a language model: a text's row is its words hashed into ``dims`` buckets (unit
length), so a head whose weights favour some words scores texts containing them high.
It lets unit tests drive ``TrainedJudge`` and the staged auditor without loading an
encoder; what the real encoders and the shipped heads do is measured by the benchmark
(``dmt_bench.auditor_eval.judge_train``) and the e2e tests.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

_WORD = re.compile(r"\w+")


def bucket(word: str, dims: int) -> int:
    """The bucket of ``word`` (lower-cased), stable across processes."""
    digest = hashlib.blake2b(word.lower().encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") % dims


class WordHashEncoder:
    """Bag of hashed words, normalised; fits ``dmt_proxy.audit.encoders.SentenceEncoder``."""

    def __init__(self, dims: int = 64, name: str = "word_hash") -> None:
        self.dims = dims
        self.name = name
        self.calls = 0

    def encode(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        rows = np.zeros((len(texts), self.dims), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in _WORD.findall(text):
                rows[i, bucket(word, self.dims)] += 1.0
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        out: np.ndarray = rows / np.maximum(norms, 1e-12)
        return out

    def weights_sha256(self) -> str:
        return "0" * 64
