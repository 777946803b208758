"""A policy document's source text: JSON or YAML, read into plain data, then validated.

The source is recorded as sent (its digest is of these bytes); what it means is
domain/policy/document.py's. YAML is read with the safe loader only: no tags, no objects.
"""

from __future__ import annotations

import json
import re
from typing import Final

import yaml

from domain.policy.document import Compiler, PolicyDocument, PolicyInvalid
from infra.policy_cel import CelCompiler
from infra.policy_document import parse_policy

# A 200-rule document fits many times over. Kept well under the API's 1 MiB body cap
# even JSON-escaped (6 bytes a character), so a source one character too long is a 422
# naming the field, never a 413 for the whole body.
MAX_SOURCE_BYTES: Final = 64 * 1024
COMPILER: Final = CelCompiler()


class _Loader(yaml.SafeLoader):  # type: ignore[misc]
    """The safe loader with YAML 1.2's booleans: only true and false. YAML 1.1 also reads
    `on`, `off`, `yes` and `no` as booleans, which would turn a rule's `on:` key into
    True."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"),
)


def read_source(source: str) -> object:
    """The data a source holds; PolicyInvalid naming the problem when it is neither JSON
    nor YAML."""
    if len(source.encode("utf-8")) > MAX_SOURCE_BYTES:
        raise PolicyInvalid(None, f"the document must be at most {MAX_SOURCE_BYTES} bytes")
    if source.lstrip().startswith("{"):
        try:
            return json.loads(source)
        except json.JSONDecodeError as exc:
            raise PolicyInvalid(None, f"not valid JSON: {exc}") from None
    try:
        return yaml.load(source, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise PolicyInvalid(None, f"not valid YAML: {' '.join(str(exc).split())}") from None


def compile_source(source: str, compiler: Compiler = COMPILER) -> PolicyDocument:
    """The validated document of a source text; PolicyInvalid otherwise."""
    return parse_policy(read_source(source), compiler)
