"""Reading the auditor model's reply: JSON out of the text, checked against the verdict schema.

The reply is parsed and validated with ``jsonschema`` against
``auditor_prompts/auditor_verdict.schema.json`` before anything is built from it;
``VerdictInvalid`` carries a reason the model can act on in the repair retry. The
same schema is what the auditor asks for (``response_format``).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

import jsonschema

from dmt_proxy.domains import BIAS_TYPES
from dmt_proxy.errors import ReplyInvalid
from dmt_proxy.resources import data_dir

VERDICT_SCHEMA_FILE = "auditor_verdict.schema.json"
VERDICT_SCHEMA_NAME = "auditor_verdict"


class VerdictInvalid(ReplyInvalid, ValueError):
    """The model's reply is not a schema-valid verdict; ``reason`` is shown to it on repair."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@lru_cache(maxsize=1)
def verdict_schema() -> dict[str, Any]:
    """The verdict JSON schema shipped in ``auditor_prompts/``.

    Its ``bias_type`` enum is set from ``dmt_proxy.domains.BIAS_TYPES`` (plus
    ``null``) here, so the model is asked for exactly the tag's types; a test keeps
    the file's copy equal.
    """
    path = data_dir("auditor_prompts") / VERDICT_SCHEMA_FILE
    schema: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    schema["properties"]["bias_type"]["enum"] = [*BIAS_TYPES, None]
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def wire_schema() -> dict[str, Any]:
    """The schema as sent for structured output: the core object, without cross-field rules.

    Grammar converters (llama.cpp) and hosted strict modes support only a subset
    of JSON Schema; ``allOf``/``if``/``then`` are checked locally instead.
    """
    keep = ("type", "additionalProperties", "required", "properties")
    return {k: v for k, v in verdict_schema().items() if k in keep}


def response_format() -> dict[str, Any]:
    """The OpenAI ``response_format`` asking for a verdict (llama-server and litellm accept it).

    ``strict`` is off on purpose: OpenAI's strict mode rejects schemas using
    keywords outside its subset (``maxLength``, a typeless ``enum``), while
    llama-server turns the schema into a grammar either way; the reply is
    validated locally in every case.
    """
    return {
        "type": "json_schema",
        "json_schema": {"name": VERDICT_SCHEMA_NAME, "schema": wire_schema(), "strict": False},
    }


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL | re.IGNORECASE)


def _extract_json(text: str) -> Any:
    stripped = text.strip()
    if not stripped:
        raise VerdictInvalid("the reply was empty")
    fenced = _FENCE.match(stripped)
    if fenced:
        stripped = fenced.group(1)
    try:
        return json.loads(stripped)
    except json.JSONDecodeError as first:
        # Without structured output some models add a sentence around the object.
        start, end = stripped.find("{"), stripped.rfind("}")
        if 0 <= start < end:
            try:
                return json.loads(stripped[start : end + 1])
            except json.JSONDecodeError:
                pass
        raise VerdictInvalid(
            f"the reply is not valid JSON ({first.msg} at char {first.pos})"
        ) from None


def parse_verdict(text: str) -> dict[str, Any]:
    """Parse and validate a reply; raise ``VerdictInvalid`` with a reason the model can act on."""
    data = _extract_json(text)
    validator = jsonschema.Draft202012Validator(verdict_schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        problems = []
        for err in errors[:3]:
            where = "/".join(str(p) for p in err.absolute_path) or "the object"
            message = err.message
            if "allOf" in err.schema_path:
                message = (
                    "bias_type must be null when bias_detected is false, "
                    "and one of the bias types when it is true"
                )
            problems.append(f"{where}: {message[:200]}")
        raise VerdictInvalid("; ".join(problems))
    if not isinstance(data, dict):  # the schema requires an object; keeps mypy honest
        raise VerdictInvalid("the reply is not a JSON object")
    return data
