"""The render playground's form: an agent's ``inputs`` schema as form fields,
and a submitted form back as render inputs.

``form_fields`` plans one field per property of the schema and
``inputs_from_form`` reads a submission by the same plan, so what a field
shows is what it submits: the fields made from an example's inputs, submitted
as they are, give those inputs back. Both are pure and produce no HTML; the
UI's templates render the ``Field`` values.

- Names are paths of property names joined by ``.``; a ``~`` in a property
  name is written ``~0`` and a ``.`` ``~1`` (as JSON Pointer escapes ``/``),
  so names are unique. ``<object>.~extra`` names the json field that carries
  an open object's undeclared properties when the values shown have some,
  and ``__inputs__`` (``WHOLE_INPUTS``) the one field of a form for a
  definition with no usable schema.
- Kinds: ``text`` (one line) for a string, ``textarea`` for long text (the
  schema says ``x-multiline: true``, has a ``contentMediaType`` or a
  ``maxLength`` over 255 without ``x-multiline: false``, or the value has a
  line break); ``select`` for an ``enum``, and for a boolean that may be left
  out (true, false or not given: a checkbox cannot say "not given");
  ``checkbox`` for a boolean always in the inputs; ``integer`` and ``number``;
  ``textarea`` with ``lines`` for an array of strings, one item a line;
  ``fieldset`` for an object with ``properties``, up to ``MAX_DEPTH`` levels;
  ``json`` for the rest: other arrays, free objects, ``const``, unions and
  other composition, a ``$ref`` not one level into ``#/$defs``, deeper.
- An empty optional field is left out of the inputs, so the schema's default
  applies, and an optional fieldset with every field empty too. An empty
  required field is sent as what it reads as when empty (``""`` for text,
  ``[]`` for lines), or left out when nothing empty is valid for it
  (numbers, selects, json), so the server's schema check words the problem.
- Browsers submit line breaks as ``\\r\\n``; multi-line text comes back with
  ``\\n``. A list of strings that one item a line cannot carry (an item with a
  line break, an empty item, an empty list) is shown as a JSON array, which
  the same field reads back.

For values valid against the schema, what a round trip loses is therefore
only an optional string given as ``""`` or an optional object given as ``{}``
(read as not given), and ``\\r\\n`` in text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from registry.serving.ui.fieldtext import Unreadable, parse_json, read_integer, read_lines, read_number

Kind = Literal["text", "textarea", "select", "checkbox", "number", "integer", "json", "fieldset"]
# A plan's kinds: a field's, and an array of strings, shown as a textarea or as json.
_PlanKind = Literal["text", "textarea", "select", "checkbox", "number", "integer", "json", "fieldset", "lines"]

WHOLE_INPUTS = "__inputs__"
MAX_FIELDS = 200
MAX_DEPTH = 4
MAX_OPTIONS = 500

_EXTRA = "~extra"
_SHORT_TEXT = 255
# Keywords that leave a value's type or shape open: no single control can show it.
_UNEXPRESSIBLE = frozenset(
    {"allOf", "anyOf", "oneOf", "not", "if", "then", "else", "const", "$ref", "$dynamicRef", "prefixItems"}
)
# What may stand next to a `$ref` that is resolved: annotations, which merge with the target.
_REF_SIBLINGS = frozenset(
    {"$ref", "$comment", "title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly"}
)


@dataclass(frozen=True)
class Field:
    """One control of the form, or a fieldset of them (``children``).

    ``name`` is what the form submits it under; ``lines`` marks a textarea
    that holds an array of strings, one item a line. ``default`` is the
    control's text: ``"true"`` or ``"false"`` for a checkbox, the option for
    a select, JSON for a json field; None when there is nothing to show.

    The hints are for HTML attributes (the server validates anyway):
    ``minimum``/``maximum`` for numbers, ``min_length``/``max_length`` for
    text, and ``pattern`` for a single line only when the schema's pattern is
    anchored at both ends without alternation, where the browser's
    whole-value match agrees with JSON Schema's search.
    """

    name: str
    label: str
    kind: Kind
    required: bool
    description: str | None
    default: str | None
    options: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    lines: bool = False
    children: tuple[Field, ...] = ()


@dataclass(frozen=True)
class FormError:
    """A submitted field that could not be read: its name, and what is wrong."""

    field: str
    message: str


class FormData(Protocol):
    """A submitted form: a dict of texts, or Werkzeug's ``MultiDict``."""

    def get(self, key: str, /) -> object: ...


def form_fields(
    inputs_schema: Mapping[str, Any] | None, *, values: Mapping[str, Any] | None = None
) -> tuple[Field, ...]:
    """The fields of a form for ``inputs_schema``.

    Without ``values`` the fields show the schema's defaults. With them (an
    example's inputs, or a previous submission) they show those and nothing
    else: a property ``values`` leaves out shows empty, so that submitting
    the form gives ``values`` back. A schema with no properties to show (None,
    not an object, composed at the top, more than ``MAX_FIELDS`` fields even
    one level deep) gets the one json field ``WHOLE_INPUTS``.
    """
    root = _root_plan(inputs_schema)
    if root is None:
        return (
            Field(
                name=WHOLE_INPUTS,
                label="inputs",
                kind="json",
                required=False,
                description=_description(inputs_schema),
                default=None if values is None else _json_text(values),
            ),
        )
    return _fields(root, values, defaults=values is None)


def inputs_from_form(inputs_schema: Mapping[str, Any] | None, form: FormData) -> tuple[dict[str, Any], list[FormError]]:
    """The render inputs a submitted ``form_fields(inputs_schema)`` form
    stands for, and the fields that could not be read (left out of them).

    Never raises: what cannot be read (a bad number, bad JSON) is a
    ``FormError``; what is read but wrong (an unknown option, text too long)
    is passed on for the server's own validation to report.
    """
    errors: list[FormError] = []
    root = _root_plan(inputs_schema)
    if root is None:
        return _read_whole_inputs(form, errors), errors
    inputs, _ = _read_object(root, form, errors)
    return inputs, errors


@dataclass(frozen=True)
class _Plan:
    """A field before its value: how one property is shown and read back."""

    key: str
    name: str
    kind: _PlanKind
    required: bool
    schema: Mapping[str, Any]
    choices: tuple[Any, ...] = ()
    """A select's values, in the order of ``options``."""
    options: tuple[str, ...] = ()
    children: tuple[_Plan, ...] = ()
    extra: bool = False
    """A fieldset's object accepts undeclared properties."""


class _TooManyFields(Exception):
    """The schema plans into more than ``MAX_FIELDS`` fields at the depth tried."""


def _root_plan(schema: object) -> _Plan | None:
    """The fieldset of the whole form, or None when one json field must hold the inputs."""
    if (
        not isinstance(schema, Mapping)
        or _single_type(schema) != "object"
        or not _has_properties(schema)
        or not _UNEXPRESSIBLE.isdisjoint(schema)
    ):
        return None
    # Too many fields nested: the top-level properties alone, nested objects as json.
    for max_depth in (MAX_DEPTH, 1):
        try:
            return _Planner(schema, max_depth).fieldset(
                schema, key="", name="", required=True, always=True, depth=0, resolved=False
            )
        except _TooManyFields:
            continue
    return None


class _Planner:
    """One walk of an inputs schema into plans, counting fields against ``MAX_FIELDS``."""

    def __init__(self, root: Mapping[str, Any], max_depth: int) -> None:
        self.root = root
        self.max_depth = max_depth
        self.fields = 0

    def fieldset(
        self, node: Mapping[str, Any], *, key: str, name: str, required: bool, always: bool, depth: int, resolved: bool
    ) -> _Plan:
        """A fieldset of ``node``'s properties (a mapping).

        ``always``: the object is in the inputs whenever the form is
        submitted (required, in objects that are too).
        """
        listed = node.get("required")
        required_keys = {k for k in listed if isinstance(k, str)} if isinstance(listed, list) else set()
        children = tuple(
            self.field(
                schema,
                key=child,
                name=_join(name, child.replace("~", "~0").replace(".", "~1")),
                required=child in required_keys,
                always=always and child in required_keys,
                depth=depth + 1,
                resolved=resolved,
            )
            for child, schema in node["properties"].items()
            if isinstance(child, str)
        )
        extra = _is_open(node)
        if extra:
            self._count()
        return _Plan(key, name, "fieldset", required, node, children=children, extra=extra)

    def field(
        self, schema: object, *, key: str, name: str, required: bool, always: bool, depth: int, resolved: bool
    ) -> _Plan:
        """The plan of one property, whose schema may be anything."""
        self._count()
        node, resolved = self._resolve(schema, resolved=resolved)
        if not _UNEXPRESSIBLE.isdisjoint(node):
            return _Plan(key, name, "json", required, node)
        if "enum" in node:
            select = _select(node["enum"])
            if select is None:
                return _Plan(key, name, "json", required, node)
            return _Plan(key, name, "select", required, node, choices=select[0], options=select[1])
        kind = _single_type(node)
        if kind == "string":
            return _Plan(key, name, "textarea" if _is_long(node) else "text", required, node)
        if kind == "integer":
            return _Plan(key, name, "integer", required, node)
        if kind == "number":
            return _Plan(key, name, "number", required, node)
        if kind == "boolean" and always:
            return _Plan(key, name, "checkbox", required, node)
        if kind == "boolean":
            return _Plan(key, name, "select", required, node, choices=(True, False), options=("true", "false"))
        if kind == "array" and self._holds_strings(node.get("items"), resolved=resolved):
            return _Plan(key, name, "lines", required, node)
        if kind == "object" and depth < self.max_depth and _has_properties(node):
            return self.fieldset(
                node, key=key, name=name, required=required, always=always, depth=depth, resolved=resolved
            )
        return _Plan(key, name, "json", required, node)

    def _count(self) -> None:
        self.fields += 1
        if self.fields > MAX_FIELDS:
            raise _TooManyFields

    def _resolve(self, schema: object, *, resolved: bool) -> tuple[Mapping[str, Any], bool]:
        """``schema`` with a ``$ref`` into ``#/$defs`` replaced by its target,
        and whether a reference on this path was; once a path has resolved
        one, further references stay (and make json fields)."""
        if not isinstance(schema, Mapping):
            return {}, resolved
        reference = schema.get("$ref")
        if resolved or not isinstance(reference, str) or not _REF_SIBLINGS.issuperset(schema):
            return schema, resolved
        target = _local_definition(self.root, reference)
        if target is None:
            return schema, resolved
        return {**target, **{k: v for k, v in schema.items() if k != "$ref"}}, True

    def _holds_strings(self, items: object, *, resolved: bool) -> bool:
        node, _ = self._resolve(items, resolved=resolved)
        return _UNEXPRESSIBLE.isdisjoint(node) and _single_type(node) == "string"


def _local_definition(root: Mapping[str, Any], reference: str) -> Mapping[str, Any] | None:
    for prefix, keyword in (("#/$defs/", "$defs"), ("#/definitions/", "definitions")):
        if reference.startswith(prefix):
            escaped = reference[len(prefix) :]
            definitions = root.get(keyword)
            if "/" in escaped or not isinstance(definitions, Mapping):
                return None
            target = definitions.get(escaped.replace("~1", "/").replace("~0", "~"))
            return target if isinstance(target, Mapping) else None
    return None


def _single_type(node: Mapping[str, Any]) -> str | None:
    kind = node.get("type")
    if isinstance(kind, list) and len(kind) == 1:
        kind = kind[0]
    return kind if isinstance(kind, str) else None


def _has_properties(node: Mapping[str, Any]) -> bool:
    properties = node.get("properties")
    return isinstance(properties, Mapping) and len(properties) > 0


def _is_long(node: Mapping[str, Any]) -> bool:
    """Whether a string schema asks for long text (a text area): most strings are short."""
    limit = _length(node.get("maxLength"))
    return node.get("x-multiline", "contentMediaType" in node or (limit is not None and limit > _SHORT_TEXT)) is True


def _is_open(node: Mapping[str, Any]) -> bool:
    """Whether an object schema accepts properties it does not declare."""
    closed = node.get("additionalProperties") is False or node.get("unevaluatedProperties") is False
    return not closed or "patternProperties" in node


def _select(enum: object) -> tuple[tuple[Any, ...], tuple[str, ...]] | None:
    """An enum's values and their options; None when a select cannot show
    them apart (two alike, one empty: an empty select means "not given")."""
    if not isinstance(enum, list) or not 0 < len(enum) <= MAX_OPTIONS:
        return None
    options = [_option_text(value) for value in enum]
    texts = tuple(text for text in options if text)
    if len(texts) < len(enum) or len(set(texts)) < len(texts):
        return None
    return tuple(enum), texts


def _join(parent: str, segment: str) -> str:
    return f"{parent}.{segment}" if parent else segment


def _fields(plan: _Plan, source: object, *, defaults: bool) -> tuple[Field, ...]:
    """The fields of a fieldset's plan, showing ``source`` (the object's value)."""
    given: Mapping[Any, Any] = source if isinstance(source, Mapping) else {}
    fields = [_field(child, given, defaults=defaults) for child in plan.children]
    declared = {child.key for child in plan.children}
    undeclared = {key: value for key, value in given.items() if key not in declared} if plan.extra else {}
    if undeclared:
        fields.append(
            Field(
                name=_join(plan.name, _EXTRA),
                label="other properties",
                kind="json",
                required=False,
                description="Properties the schema does not declare, as a JSON object.",
                default=_json_text(undeclared),
            )
        )
    return tuple(fields)


def _field(plan: _Plan, given: Mapping[Any, Any], *, defaults: bool) -> Field:
    if plan.key in given:
        shown, value = True, given[plan.key]
    else:
        shown, value = defaults and "default" in plan.schema, plan.schema.get("default")
    description = _description(plan.schema)
    if plan.kind == "fieldset":
        return Field(
            name=plan.name,
            label=plan.key,
            kind="fieldset",
            required=plan.required,
            description=description,
            default=None,
            children=_fields(plan, value if shown else None, defaults=defaults),
        )
    kind, text = _shown(plan, value) if shown else ("textarea" if plan.kind == "lines" else plan.kind, None)
    numeric = kind == "integer" or kind == "number"
    textual = kind == "text" or (kind == "textarea" and plan.kind != "lines")
    return Field(
        name=plan.name,
        label=plan.key,
        kind=kind,
        required=plan.required,
        description=description,
        default=text,
        options=plan.options,
        minimum=_bound(plan.schema.get("minimum")) if numeric else None,
        maximum=_bound(plan.schema.get("maximum")) if numeric else None,
        min_length=_length(plan.schema.get("minLength")) if textual else None,
        max_length=_length(plan.schema.get("maxLength")) if textual else None,
        pattern=_html_pattern(plan.schema.get("pattern")) if kind == "text" else None,
        lines=plan.kind == "lines" and kind == "textarea",
    )


def _shown(plan: _Plan, value: object) -> tuple[Kind, str | None]:
    """The kind of control that shows ``value`` for a leaf plan, and its text."""
    if plan.kind == "text" or plan.kind == "textarea":
        text = value if isinstance(value, str) else _json_text(value)
        multiline = text is not None and ("\n" in text or "\r" in text)
        return ("textarea" if multiline else plan.kind), text
    if plan.kind == "select":
        return "select", _option_text(value)
    if plan.kind == "checkbox":
        return "checkbox", "true" if value is True else "false" if value is False else None
    if plan.kind == "integer" or plan.kind == "number":
        return plan.kind, value if isinstance(value, str) else _json_text(value)
    if plan.kind == "lines":
        lines = _lines_text(value)
        return ("textarea", lines) if lines is not None else ("json", _json_text(value))
    return "json", _json_text(value)


def _lines_text(value: object) -> str | None:
    """A list of strings one item a line, when reading the text back gives it again
    (an empty text would read as "not given")."""
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        return None
    text = "\n".join(value)
    return text if text and read_lines(text) == value else None


def _option_text(value: object) -> str | None:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None


def _json_text(value: object) -> str | None:
    # What JSON cannot hold (a date from YAML) shows as its text, for the
    # author to see; what cannot be shown at all (a cycle) shows nothing.
    try:
        return json.dumps(value, ensure_ascii=False, indent=2, default=str)
    except (TypeError, ValueError, RecursionError):
        return None


def _description(schema: object) -> str | None:
    description = schema.get("description") if isinstance(schema, Mapping) else None
    return description if isinstance(description, str) else None


def _bound(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        bound = float(value)
    except OverflowError:
        return None
    return bound if math.isfinite(bound) else None


def _length(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _html_pattern(pattern: object) -> str | None:
    """A schema's pattern as an HTML ``pattern`` hint, when both read it alike."""
    if not isinstance(pattern, str) or "|" in pattern:
        return None
    anchored = pattern.startswith("^") and pattern.endswith("$") and not pattern.endswith("\\$")
    return pattern if anchored else None


def _read_whole_inputs(form: FormData, errors: list[FormError]) -> dict[str, Any]:
    text = _submitted(form, WHOLE_INPUTS, errors)
    if text is None or not text.strip():
        return {}
    try:
        inputs = parse_json(text)
    except Unreadable as exc:
        errors.append(FormError(WHOLE_INPUTS, str(exc)))
        return {}
    if not isinstance(inputs, dict):
        errors.append(FormError(WHOLE_INPUTS, "not a JSON object"))
        return {}
    return inputs


def _read_object(plan: _Plan, form: FormData, errors: list[FormError]) -> tuple[dict[str, Any], bool]:
    """A fieldset's object, and whether any of its fields was filled in."""
    value: dict[str, Any] = {}
    filled = False
    for child in plan.children:
        if child.kind == "fieldset":
            inner, inner_filled = _read_object(child, form, errors)
            if inner_filled or child.required:
                value[child.key] = inner
            filled = filled or inner_filled
        elif child.kind == "checkbox":
            value[child.key] = form.get(child.name) is not None
            filled = filled or value[child.key]
        else:
            text = _submitted(form, child.name, errors)
            if text is None or _is_empty(child, text):
                if child.required and (child.kind == "text" or child.kind == "textarea"):
                    value[child.key] = ""
                elif child.required and child.kind == "lines":
                    value[child.key] = []
                continue
            filled = True
            try:
                value[child.key] = _read(child, text)
            except Unreadable as exc:
                errors.append(FormError(child.name, str(exc)))
    if plan.extra:
        filled = _read_extra(plan, form, value, errors) or filled
    return value, filled


def _read_extra(plan: _Plan, form: FormData, value: dict[str, Any], errors: list[FormError]) -> bool:
    """Adds the undeclared properties of an open object to ``value``; whether the field was filled in."""
    name = _join(plan.name, _EXTRA)
    text = _submitted(form, name, errors)
    if text is None or not text.strip():
        return False
    try:
        extra = parse_json(text)
    except Unreadable as exc:
        errors.append(FormError(name, str(exc)))
        return True
    if not isinstance(extra, dict):
        errors.append(FormError(name, "not a JSON object"))
        return True
    declared = sorted({child.key for child in plan.children}.intersection(extra))
    if declared:
        errors.append(FormError(name, f"declared properties have their own fields: {', '.join(declared)}"))
    else:
        value.update(extra)
    return True


def _submitted(form: FormData, name: str, errors: list[FormError]) -> str | None:
    """The text submitted for ``name``: None when there is none, or when it is not text (an error)."""
    raw = form.get(name)
    if raw is None or isinstance(raw, str):
        return raw
    # Callers other than the web form may pass any values.
    errors.append(FormError(name, "not text"))
    return None


def _is_empty(plan: _Plan, text: str) -> bool:
    # Spaces are text in a text field, and nothing in any other.
    return text == "" if plan.kind == "text" or plan.kind == "textarea" else not text.strip()


def _read(plan: _Plan, text: str) -> Any:
    """The value of a leaf's submitted (non-empty) text; raises ``Unreadable``."""
    if plan.kind == "text" or plan.kind == "textarea":
        return text.replace("\r\n", "\n")
    if plan.kind == "integer":
        return read_integer(text)
    if plan.kind == "number":
        return read_number(text)
    if plan.kind == "select":
        return plan.choices[plan.options.index(text)] if text in plan.options else text
    if plan.kind == "lines":
        return read_lines(text)
    return parse_json(text)
