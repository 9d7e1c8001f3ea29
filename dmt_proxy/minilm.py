"""all-MiniLM-L6-v2 in plain numpy: the sentence-transformers pipeline without torch.

Same weights (``model.safetensors``), same tokenizer (``tokenizer.json`` through the
``tokenizers`` library), same steps as sentence-transformers' ``Transformer ->
Pooling(mean) -> Normalize``: BERT with 6 layers, 12 heads, hidden 384, exact
(erf) GELU, LayerNorm eps 1e-12, truncation at 256 tokens, mean over the
attention mask, unit length. Why: importing torch and sentence-transformers costs
the proxy ~450 MB of RSS and ~13 ms per short query on one thread; this runtime
holds the 87 MB of weights plus ~30 MB of libraries (benchmarks/results/
perf/memory_path/memory_path.md). ``tests/unit/test_minilm.py`` checks it against
sentence-transformers (cosine > 0.9999).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

MAX_SEQ_LENGTH = 256
"""sentence-transformers' ``max_seq_length`` for this model (sentence_bert_config.json)."""
_BATCH = 32
_SQRT_HALF = 1.0 / math.sqrt(2.0)


def _erf(x: np.ndarray) -> np.ndarray:
    """erf(x), Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7; numpy has no erf)."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741
                + t * (-1.453152027 + t * 1.061405429))))  # fmt: skip
    out: np.ndarray = sign * (1.0 - poly * np.exp(-a * a))
    return out


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU: x * Phi(x)."""
    out: np.ndarray = 0.5 * x * (1.0 + _erf(x * _SQRT_HALF))
    return out


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    out: np.ndarray = (x - mean) / np.sqrt(var + eps) * weight + bias
    return out


class MiniLM:
    """A BERT sentence encoder with mean pooling and normalization, numpy only.

    An ``embedder.TextEmbedder`` (``embed``, ``count_tokens``); ``encode`` gives the
    same vectors as one float32 array.
    """

    def __init__(self, model_dir: str | Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        root = Path(model_dir)
        config = json.loads((root / "config.json").read_text("utf-8"))
        if config.get("model_type") != "bert" or config.get("hidden_act") != "gelu":
            raise ValueError(f"{root}: not a BERT model with GELU (config.json)")
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config["layer_norm_eps"])
        self.w: dict[str, np.ndarray] = {
            k: v for k, v in load_file(str(root / "model.safetensors")).items()
            if v.dtype == np.float32
        }  # fmt: skip
        # Transposed once so every projection is x @ W (row-major, contiguous).
        for name in list(self.w):
            if name.endswith(".weight") and self.w[name].ndim == 2 and name.startswith("encoder."):
                self.w[name] = np.ascontiguousarray(self.w[name].T)
        self.tokenizer: Any = Tokenizer.from_file(str(root / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(MAX_SEQ_LENGTH)

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Unit-length embeddings as lists (the ``embedder.TextEmbedder`` protocol)."""
        return [list(map(float, v)) for v in self.encode(list(texts))]

    def count_tokens(self, texts: list[str]) -> int:
        """Tokens the model reads for ``texts`` (after truncation at ``MAX_SEQ_LENGTH``)."""
        return sum(len(e.ids) for e in self.tokenizer.encode_batch(list(texts)))

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-length embeddings, one row per text (batched by length)."""
        if not texts:
            return np.zeros((0, self.w["embeddings.word_embeddings.weight"].shape[1]), np.float32)
        encodings = self.tokenizer.encode_batch(list(texts))
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        out = np.zeros((len(texts), self.w["embeddings.word_embeddings.weight"].shape[1]),
                       np.float32)  # fmt: skip
        for start in range(0, len(order), _BATCH):
            idx = order[start : start + _BATCH]
            width = max(len(encodings[i].ids) for i in idx)
            ids = np.zeros((len(idx), width), np.int64)
            types = np.zeros((len(idx), width), np.int64)
            mask = np.zeros((len(idx), width), np.float32)
            for row, i in enumerate(idx):
                n = len(encodings[i].ids)
                ids[row, :n] = encodings[i].ids
                types[row, :n] = encodings[i].type_ids
                mask[row, :n] = 1.0
            out[idx] = self._forward(ids, types, mask)
        return out

    def _forward(self, ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w, eps = self.w, self.eps
        batch, width = ids.shape
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][np.arange(width)][None, :, :]
             + w["embeddings.token_type_embeddings.weight"][types])  # fmt: skip
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
        hidden = x.shape[-1]
        head = hidden // self.heads
        # Padding positions get the most negative float32, as transformers does.
        bias = ((1.0 - mask) * np.finfo(np.float32).min)[:, None, None, :]
        for n in range(self.layers):
            p = f"encoder.layer.{n}."

            def proj(t: np.ndarray, name: str, p: str = p) -> np.ndarray:
                out: np.ndarray = t @ w[p + name + ".weight"] + w[p + name + ".bias"]
                return out

            def split(t: np.ndarray) -> np.ndarray:
                return t.reshape(batch, width, self.heads, head).transpose(0, 2, 1, 3)

            q = split(proj(x, "attention.self.query"))
            k = split(proj(x, "attention.self.key"))
            v = split(proj(x, "attention.self.value"))
            scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head) + bias
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, width, hidden)
            x = _layer_norm(proj(context, "attention.output.dense") + x,
                            w[p + "attention.output.LayerNorm.weight"],
                            w[p + "attention.output.LayerNorm.bias"], eps)  # fmt: skip
            inner = _gelu(proj(x, "intermediate.dense"))
            x = _layer_norm(proj(inner, "output.dense") + x, w[p + "output.LayerNorm.weight"],
                            w[p + "output.LayerNorm.bias"], eps)  # fmt: skip
        summed = (x * mask[:, :, None]).sum(axis=1)
        pooled = summed / np.clip(mask.sum(axis=1, keepdims=True), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        unit: np.ndarray = (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
        return unit
