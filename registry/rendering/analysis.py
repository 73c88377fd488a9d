"""What a template reads and includes, read from its syntax tree as plain data.

The checks outside ``rendering`` that need to look inside a template (the
composite checks of ``registry.format``, lint in ``registry.authoring``) ask
here instead of walking Jinja's nodes themselves. Every function takes a
template's source, or a partial's name, and gives back names, attributes
and line numbers, never a Jinja node; a template that does not parse gives
``None`` rather than a Jinja exception (compiling it says why).

- ``variable_reads``: the free variables an expression reads, each with the
  constant attributes read from it (``steps.draft.output``);
- ``is_single_expression``: whether a template is one ``{{ expression }}``
  and nothing else;
- ``referenced_templates`` and ``partial_includes``: the templates one
  includes, imports or extends, and those it does on every render, with
  their lines.
"""

from __future__ import annotations

from dataclasses import dataclass

from jinja2 import TemplateError, nodes

from registry.rendering.sandbox import TemplateEnvironment, _referenced_templates

_UNPARSABLE = (TemplateError, RecursionError, MemoryError)
"""What parsing may raise: Jinja's errors, and Python's limits on a template
nested too deeply or too large."""

# Statements whose body may run once, never, or many times; a block's body
# is replaced by that of a template that extends this one.
_BRANCHES = (nodes.If, nodes.For, nodes.Macro, nodes.CallBlock, nodes.Block)
_INCLUDES = (nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)


def _parse(environment: TemplateEnvironment, source: str, name: str | None = None) -> nodes.Template | None:
    try:
        return environment.parse(source, name=name)
    except _UNPARSABLE:
        return None


@dataclass(frozen=True, order=True)
class VariableRead:
    """A variable an expression reads, with the constant attributes it reads
    from it, at most two: ``steps.draft.output`` (or ``steps['draft'].output``)
    is ``VariableRead("steps", ("draft", "output"))``."""

    name: str
    attributes: tuple[str, ...]


def variable_reads(
    environment: TemplateEnvironment, source: str, free: frozenset[str]
) -> tuple[VariableRead, ...] | None:
    """Every read of one of the ``free`` variables in ``source`` (those it
    does not set itself), once each and sorted; None when it does not parse."""
    tree = _parse(environment, source)
    if tree is None:
        return None
    found: set[VariableRead] = set()
    pending: list[nodes.Node] = [tree]
    while pending:
        node = pending.pop()
        attributes: list[str] = []
        base = node
        while True:
            if isinstance(base, nodes.Getattr):
                attributes.append(base.attr)
                base = base.node
            elif isinstance(base, nodes.Getitem) and isinstance(base.arg, nodes.Const):
                attributes.append(str(base.arg.value))
                base = base.node
            else:
                break
        if isinstance(base, nodes.Name) and base.ctx == "load" and base.name in free:
            found.add(VariableRead(base.name, tuple(reversed(attributes))[:2]))
            continue
        pending.extend(node.iter_child_nodes())
    return tuple(sorted(found))


def is_single_expression(environment: TemplateEnvironment, source: str) -> bool | None:
    """Whether ``source`` is exactly one ``{{ expression }}``, with no text or
    statement around it; None when it does not parse."""
    tree = _parse(environment, source)
    if tree is None:
        return None
    body = tree.body
    return (
        len(body) == 1
        and isinstance(body[0], nodes.Output)
        and len(body[0].nodes) == 1
        and not isinstance(body[0].nodes[0], nodes.TemplateData)
    )


def referenced_templates(environment: TemplateEnvironment, source: str, *, name: str) -> tuple[str | None, ...] | None:
    """The names of the templates ``source`` includes, imports or extends
    (None for a name computed at render time); None when it does not parse."""
    tree = _parse(environment, source, name)
    return None if tree is None else _referenced_templates(tree)


@dataclass(frozen=True)
class Includes:
    """What one template includes, imports or extends."""

    references: tuple[str | None, ...]
    """Every name it includes, imports or extends; None for one computed at
    render time."""
    always: tuple[tuple[str, int], ...]
    """The literal names it includes, imports or extends every time it
    renders (not under an if, a for, a macro, a call or a block), once each
    with its first line."""


def partial_includes(environment: TemplateEnvironment, name: str) -> Includes | None:
    """What the partial ``name`` includes, read through the environment's own
    loader (the registry's name rules, size limit and encoding); None when it
    cannot be read or does not parse."""
    try:
        source, _, _ = environment.loader.get_source(environment, name)  # type: ignore[union-attr]  # a TemplateEnvironment always has its loader
    except _UNPARSABLE:
        return None
    tree = _parse(environment, source, name)
    if tree is None:
        return None
    return Includes(_referenced_templates(tree), _unconditional_includes(tree))


def _unconditional_includes(tree: nodes.Template) -> tuple[tuple[str, int], ...]:
    found: dict[str, int] = {}
    pending: list[nodes.Node] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, _INCLUDES) and isinstance(node.template, nodes.Const):
            name = node.template.value
            if isinstance(name, str) and (name not in found or node.lineno < found[name]):
                found[name] = node.lineno
        if not isinstance(node, _BRANCHES):
            pending.extend(node.iter_child_nodes())
    return tuple(found.items())
