"""Imports checked in a fresh interpreter: what importing a module actually loads.

The import rules are read from the source in ``tests/unit/test_architecture_doc.py``
(nothing imported); these run them for real, transitively and with package
``__init__`` files included, which needs an interpreter that has imported nothing yet.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap

import pytest

from tests.unit.test_architecture_doc import AUDIT_SEAM, PLAIN_TYPES, ROOT, is_plain_package


@pytest.mark.parametrize("module", sorted(PLAIN_TYPES))
def test_importing_a_plain_type_loads_only_plain_types(module: str) -> None:
    # Transitively and at run time, package __init__ files included: what the ast rule
    # above cannot see (an __init__ re-exporting a registry loads the registry).
    code = (
        "import sys, importlib; importlib.import_module(sys.argv[1]); "
        "print(sorted(m for m in sys.modules if m.startswith('dmt_proxy')))"
    )
    done = subprocess.run([sys.executable, "-c", code, module], capture_output=True,
                          text=True, check=True, cwd=ROOT)  # fmt: skip
    loaded = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert module in loaded
    beyond = [m for m in loaded if m not in PLAIN_TYPES and not is_plain_package(m)]
    assert beyond == [], f"importing {module} loads {beyond}"


@pytest.mark.parametrize("module", ["dmt_proxy.exchange", "dmt_proxy.modes"])
def test_the_request_types_load_no_policy_parser(module: str) -> None:
    # A request names its mode; parsing a policy file (YAML, JSON schema) is start-up work.
    code = (
        "import sys, importlib; importlib.import_module(sys.argv[1]); "
        "print(sorted(m for m in ('yaml', 'jsonschema', 'dmt_proxy.policy') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code, module], capture_output=True,
                          text=True, check=True, cwd=ROOT)  # fmt: skip
    assert ast.literal_eval(done.stdout.strip().splitlines()[-1]) == []


def test_the_memory_side_loads_only_the_audit_seam() -> None:
    # The import rules themselves are read from the source in tests/unit/test_architecture_doc.py;
    # this checks what actually gets loaded, package __init__ files included.
    # The memory package loads nothing of audit/; the write path only its seam, never
    # the service; the service not the audit pipeline.
    # Grounding a tag reads the text as the judges read it: the seam loads the normaliser
    # and the bounded excerpt of a long memory (pure text functions, no model, no I/O) and
    # nothing else of the pipeline.
    allowed = set(AUDIT_SEAM) | {
        "dmt_proxy.audit.normalize", "dmt_proxy.audit.deobfuscate", "dmt_proxy.audit.planted",
        "dmt_proxy.audit.excerpt",
    }  # fmt: skip
    code = (
        "import sys, dmt_proxy.memory\n"
        "assert not [m for m in sys.modules if m.startswith('dmt_proxy.audit')]\n"
        "import dmt_proxy.memory.write.worker, dmt_proxy.memory.write.backfill\n"
        "assert 'dmt_proxy.memory.service' not in sys.modules\n"
        "import dmt_proxy.memory.service\n"
        f"extra = {{m for m in sys.modules if m.startswith('dmt_proxy.audit.')}} - {allowed!r}\n"
        "assert not extra, extra\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_the_fakes_import_without_pytest() -> None:
    code = textwrap.dedent("""
        import sys
        import dmt_proxy.testing.app, dmt_proxy.testing.auditor, dmt_proxy.testing.chat
        import dmt_bench.testing.dib, dmt_bench.testing.sim, dmt_proxy.testing.upstream_server
        print("pytest" in sys.modules)
    """)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "False"


LAZY = textwrap.dedent("""
    import json, sys
    from dmt_proxy.memory.registry import create_backend, known_backends
    from dmt_proxy.memory.registry import backend_class
    from dmt_proxy.audit.registry import known_auditors
    from dmt_bench.dib.domains.base import DIB_DOMAINS
    from dmt_proxy.upstream.clients import client_class, known_clients
    out = {"names": [known_backends(), known_auditors(), DIB_DOMAINS.names(), known_clients()]}
    backend_class("memory")
    client_class("litellm")  # its module is imported; litellm itself only on the first call
    heavy = ("mem0", "langgraph", "langmem", "qdrant_client", "litellm", "torch")
    out["loaded"] = sorted(m for m in heavy if m in sys.modules)
    out["dib"] = sorted(m for m in sys.modules if m.startswith("dmt_bench.dib.domains."))
    print(json.dumps(out))
""")


def test_listing_plugins_imports_none_of_the_heavy_ones() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", LAZY], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    backends, auditors, dib, clients = out["names"]
    assert {"memory", "mem0", "langmem", "letta"} <= set(backends)
    assert {"auto", "litellm", "openai-compat"} <= set(clients)
    assert {"llm", "scripted"} <= set(auditors) and len(dib) == 9
    assert out["loaded"] == []
    assert out["dib"] == ["dmt_bench.dib.domains.base"]
