"""What lint reports beyond what serving needs, one definition at a time.

A definition outside ``<usecase>/<name>.yml`` or with a name the registry
cannot serve; inputs no template reads, and includes computed at render
time (so lint cannot follow them); placeholders nothing can fill; tools a template names (``Action: x``)
that the definition does not declare, ``x-`` keys on tools that look like a
misspelt one the executor reads, JSON examples of the reply format that
a ``react_json`` agent's own parser would reject, and ``model.params`` keys
that are misspelt or that the definition's provider does not take (lint
knows a provider by its usual name, ``registry.providers.params.WELL_KNOWN``:
a name only a models file binds gets no such warning).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from registry.authoring.lintreport import Finding, finding
from registry.format.definition import NAME_PATTERN, TOOL_EXTENSIONS
from registry.format.loading import DEFINITION_SUFFIX, LoadedAgent
from registry.format.parsers import OutputParser, ParseError
from registry.models import close_matches, did_you_mean, shorten
from registry.providers.params import NEUTRAL, TABLES, WELL_KNOWN, unsupported
from registry.rendering import find_placeholders

# A provider's own name for a neutral parameter (Anthropic's stop_sequences),
# which a definition writes in the neutral vocabulary.
_NATIVE_NAMES = {native: neutral for table in TABLES.values() for neutral, native in table.items() if native != neutral}


def layout_finding(parts: list[str], file: str) -> Finding | None:
    """Why a definition at ``parts`` (its path under the agents root) is not
    served, or None when it is where it should be."""
    if not file.endswith(DEFINITION_SUFFIX):
        return finding("layout", file, "definitions end in .yml", hint="rename it to .yml")
    if len(parts) != 2:
        where = "directly under the agents root" if len(parts) == 1 else "nested more than one directory deep"
        return finding("layout", file, f"a definition {where} is not served")
    usecase, name = parts[0], parts[1][: -len(DEFINITION_SUFFIX)]
    for label, value in (("usecase", usecase), ("name", name)):
        if not NAME_PATTERN.fullmatch(value):
            return finding("name", file, f"{label} {value!r} is not a valid name, so the agent is not served")
    return None


def usage_warnings(loaded: LoadedAgent, file: str) -> Iterable[Finding]:
    """Inputs no template reads (as a variable or a placeholder), and
    includes computed at render time."""
    compiled = loaded.compiled
    inputs = loaded.definition.get("inputs")
    properties = inputs.get("properties") if isinstance(inputs, dict) else None
    # With a computed include, any partial may read any input.
    if isinstance(properties, dict) and not compiled.dynamic_includes:
        placed = frozenset().union(*compiled.placeholders.values())
        for unused in sorted(set(properties) - compiled.variables - placed):
            yield finding(
                "unused-input",
                file,
                f"input {unused!r} is declared but no template reads it",
                at=("inputs", "properties", unused),
            )
    if compiled.dynamic_includes:
        yield finding(
            "dynamic-include",
            file,
            "a template computes an include name at render time",
            at=("prompt_templates",),
        )


def placeholder_findings(loaded: LoadedAgent, file: str) -> Iterable[Finding]:
    """Placeholders that no input and no runtime variable can fill
    (``AgentSpec.placeholder_fill``). Only when the definition declares
    ``inputs.properties``: without, any input may fill one."""
    compiled = loaded.compiled
    if compiled.pattern is not None:
        return
    spec = compiled.spec
    templates: dict[str, str] = dict(spec.templates)
    for role, names in compiled.placeholders.items():
        for fill in map(spec.placeholder_fill, sorted(names)):
            if fill.fillable:
                continue
            name = fill.name
            line, partial = _written_where(name, templates.get(role, ""), loaded.partials, compiled.partials)
            written = f" (written in {partial}, line {line})" if partial else ""
            if not fill.runtime_kinds:
                message = (
                    f"{role} template: placeholder {{{name}}}{written} is filled by no input and no runtime variable"
                )
                hint = (
                    f"declare {name!r} under inputs.properties, or print it, {{{{ '{{{name}}}' }}}}, to keep it as text"
                )
            else:
                message = (
                    f"{role} template: the executor fills {{{name}}}{written} for {', '.join(fill.runtime_kinds)}"
                    f" agents only, and this one is {spec.kind}"
                )
                hint = f"declare {name!r} under inputs.properties, or use another agent type"
            yield finding(
                "unfilled-placeholder",
                file,
                message,
                hint=hint,
                at=("prompt_templates", role),
                template_line=None if partial else line,
            )


def _written_where(
    name: str, source: str, partials: Mapping[str, str], reached: Iterable[str]
) -> tuple[int | None, str | None]:
    """Where placeholder ``name`` is first written: its line in the role's
    template (and None), or its line in the first partial that writes it (and its name)."""
    for where, text in [(None, source), *((partial, partials.get(partial, "")) for partial in sorted(reached))]:
        for placeholder in find_placeholders(text, names={name}):
            return text.count("\n", 0, placeholder.start) + 1, where
    return None, None


_ACTION_LINE = re.compile(r"^[ \t]*Action[ \t]*:[ \t]*[`'\"*]*([A-Za-z_][A-Za-z0-9_]*)[`'\"*]*[ \t]*$", re.MULTILINE)
_REPLY_KEYS = {"thought", "action", "answer"}


def tool_findings(loaded: LoadedAgent, file: str) -> Iterable[Finding]:
    """Tools the templates name must exist; for react_json agents, every JSON
    example of the reply format must be one the agent's parser accepts."""
    declared = loaded.definition.get("tools")
    texts = [*loaded.definition.get("prompt_templates", {}).items(), *loaded.partials.items()]
    if isinstance(declared, list):
        yield from _tool_extension_findings(declared, file)
        names = {tool.get("name") for tool in declared if isinstance(tool, dict)}
        for where, text in texts:
            for match in _ACTION_LINE.finditer(text):
                if match.group(1) not in names:
                    yield finding("unknown-tool", file, f"{where}: 'Action: {match.group(1)}' names no declared tool")
    spec = loaded.definition.get("output_parser")
    if isinstance(spec, dict) and spec.get("type") == "react_json":
        parser = OutputParser.from_definition(loaded.definition)
        for where, text in texts:
            for example in _json_objects(text):
                if _REPLY_KEYS & set(example):
                    result = parser.parse(json.dumps(example))
                    if isinstance(result, ParseError):
                        yield finding(
                            "react-example",
                            file,
                            f"{where}: the example {shorten(json.dumps(example), 80)} is rejected by the parser"
                            f" ({result.reason}: {shorten(result.observation, 120)})",
                        )


def _tool_extension_findings(declared: list[Any], file: str) -> Iterable[Finding]:
    """An ``x-`` key close to one the executor reads (``x-requires-aproval``),
    or about approval at all (``x-approval``), would silently run the tool
    without approval: say so."""
    for index, tool in enumerate(declared):
        for key in tool if isinstance(tool, dict) else ():
            if isinstance(key, str) and key.startswith("x-") and key not in TOOL_EXTENSIONS:
                hint = did_you_mean(close_matches(key, TOOL_EXTENSIONS, cutoff=0.75))
                if hint is None and "approv" in key.lower():  # x-approval, x-approve, x-needs-approving
                    hint = did_you_mean(["x-requires-approval"])
                if hint:
                    message = f"tool {tool.get('name')!r}: {key!r} is not read by the executor"
                    yield finding("tool-extension", file, message, hint=hint, at=("tools", index, key))


def _json_objects(text: str) -> Iterator[dict[str, Any]]:
    """Every JSON object literally in ``text`` (Jinja's {{ }} and {% %} are not JSON)."""
    decoder = json.JSONDecoder()
    position = text.find("{")
    while position != -1:
        try:
            value, end = decoder.raw_decode(text, position)
        except ValueError:
            position = text.find("{", position + 1)
            continue
        if isinstance(value, dict):
            yield value
        position = text.find("{", end)


def param_findings(loaded: LoadedAgent, file: str) -> Iterable[Finding]:
    """``model.params`` keys that look misspelt (``max_token``), that are a
    provider's own name for a neutral one (``stop_sequences``), or that the
    definition's provider does not take, so the executor never sends them."""
    model = loaded.definition.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("params"), dict):
        return
    params, provider = model["params"], model.get("provider")
    kind = WELL_KNOWN.get(provider) if isinstance(provider, str) else None
    for key in params:
        at = ("model", "params", key)
        if key not in NEUTRAL:
            neutral = _NATIVE_NAMES.get(key)
            # A high cutoff: local servers' own options (typical_p, mirostat) are not misspellings.
            hint = did_you_mean([neutral] if neutral else close_matches(key, NEUTRAL, cutoff=0.8))
            if hint is not None:
                message = f"model.params key {key!r} is not in the parameters' vocabulary"
                yield finding("model-param", file, message, hint=hint, at=at)
                continue
        if kind is not None and unsupported(kind, {key: params[key]}):
            message = f"provider {provider!r} ({kind}) does not take model.params key {key!r}: it is never sent"
            yield finding("model-param", file, message, at=at)
