"""benchmarks/results/README.md indexes every committed result, and cited result paths exist.

Layout (described in the index): one folder per benchmark, ``perf/<benchmark>/`` for the
performance benchmarks; inside a benchmark folder a run is a report pair (``<run>.md`` +
``<run>.json``) or a run directory. Nothing but the index and PERFORMANCE.md sits at the
top level.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
INDEX = RESULTS / "README.md"
TOP_LEVEL_FILES = {"README.md", "PERFORMANCE.md"}
# What a report pair's files end with; the stem before it names the run.
REPORT_SUFFIXES = (".md", ".json", ".png", ".yaml", ".txt", ".html")
# A cited path ends where a path character stops (the dot of "qwen2.5" is one).
CITED = re.compile(r"benchmarks/results(?:/[A-Za-z0-9_.\-]+)*/?")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _run_name(path: Path) -> str:
    """A run's name: a directory's name, or a report file's name without its suffix."""
    if path.is_file():
        for suffix in REPORT_SUFFIXES:
            if path.name.endswith(suffix):
                return path.name[: -len(suffix)]
    return path.name


def _indexed(text: str, rel: str) -> bool:
    """``rel`` occurs in the index as a whole path (not as the prefix of a longer name)."""
    return re.search(re.escape(rel) + r"(?![A-Za-z0-9_\-])", text) is not None


def _benchmark_folders() -> list[Path]:
    tops = sorted(p for p in RESULTS.iterdir() if p.is_dir())
    perf = RESULTS / "perf"
    return [p for p in tops if p != perf] + sorted(p for p in perf.iterdir() if p.is_dir())


def _cited_docs() -> list[Path]:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return docs + sorted((ROOT / "benchmarks").rglob("*.md"))


def test_only_the_index_and_the_performance_summary_sit_at_the_top_level() -> None:
    loose = sorted(p.name for p in RESULTS.iterdir() if p.is_file())
    assert set(loose) <= TOP_LEVEL_FILES, (
        f"result files at the top of benchmarks/results/: {sorted(set(loose) - TOP_LEVEL_FILES)}; "
        "move them into their benchmark's folder and index them in README.md"
    )
    assert INDEX.is_file()


def test_every_folder_and_top_level_file_is_in_the_index() -> None:
    text = INDEX.read_text(encoding="utf-8")
    tops = [p.name for p in RESULTS.iterdir()]
    missing = [name for name in tops if not _indexed(text, name)]
    folders = _benchmark_folders()
    missing += [
        str(p.relative_to(RESULTS))
        for p in folders
        if not _indexed(text, str(p.relative_to(RESULTS)))
    ]
    assert not missing, f"not in benchmarks/results/README.md: {missing}"


def test_every_run_is_in_the_index() -> None:
    # A folder with its own README.md explains its runs there; the index still links it.
    text = INDEX.read_text(encoding="utf-8")
    missing = []
    for folder in _benchmark_folders():
        if (folder / "README.md").is_file() or folder == RESULTS / "perf":
            continue
        for child in folder.iterdir():
            rel = f"{folder.relative_to(RESULTS)}/{_run_name(child)}"
            if not _indexed(text, rel):
                missing.append(rel)
    assert not missing, f"runs not in benchmarks/results/README.md: {sorted(set(missing))}"


def test_the_index_names_no_run_that_is_gone() -> None:
    text = INDEX.read_text(encoding="utf-8")
    names = {p.name for p in _benchmark_folders()} | {"perf"}
    gone = []
    for match in re.finditer(r"(?<![\w./\-])([a-z][a-z0-9_]*(?:/[A-Za-z0-9_.\-]+)+)", text):
        rel = match.group(1).rstrip(".")
        if rel.split("/")[0] not in names:
            continue  # a path outside benchmarks/results (a script, a config, a run dir)
        path = RESULTS / rel
        if not (
            path.exists() or any(path.with_name(path.name + s).exists() for s in REPORT_SUFFIXES)
        ):
            gone.append(rel)
    assert not gone, f"the index names results that do not exist: {sorted(set(gone))}"


@pytest.mark.parametrize("doc", _cited_docs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_cited_result_paths_exist(doc: Path) -> None:
    # A cited stem (an ``--out`` value) counts when its report pair exists; a pattern
    # (``tool_calls_<model>.md``, ``adversarial_memories_v*.json``) is not a path.
    text = doc.read_text(encoding="utf-8")
    missing = []
    for match in CITED.finditer(text):
        if text[match.end() : match.end() + 1] in ("<", "{", "*", "["):
            continue
        path = ROOT / match.group(0).rstrip(".")
        if not (
            path.exists() or any(path.with_name(path.name + s).exists() for s in (".md", ".json"))
        ):
            missing.append(match.group(0))
    assert not missing, f"{doc.relative_to(ROOT)} cites paths that do not exist: {missing}"


@pytest.mark.parametrize(
    "doc",
    [ROOT / "README.md", *sorted(RESULTS.rglob("*.md"))],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_relative_links_resolve(doc: Path) -> None:
    broken = []
    for match in LINK.finditer(doc.read_text(encoding="utf-8")):
        target = match.group(1).split("#")[0]
        if target and not re.match(r"[a-z]+:", target) and not (doc.parent / target).exists():
            broken.append(target)
    assert not broken, f"{doc.relative_to(ROOT)} links to missing files: {broken}"
