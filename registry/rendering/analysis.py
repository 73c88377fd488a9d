"""Template analysis: what a template needs, what it references, whether it
compiles.

Jinja's ``meta`` module answers the questions a loader asks of a template
before rendering it (``meta.find_undeclared_variables``,
``meta.find_referenced_templates``); this module asks them of the
registry's sandboxed environment, keeps a partial's answers for the
environment's life (``analyse_partial``), and says why a template does not
compile (``TemplateCompileError`` with its ``TemplateProblem``). Reading a
template's syntax tree to learn something about it happens here and nowhere
else in the registry; the guard (``registry.rendering.guard``) rewrites the
tree, and reads it only to do so.

For the checks outside ``rendering`` that need to look inside a template
(the composite checks of ``registry.format``, lint in
``registry.authoring``), the answers are plain data: names, attributes and
line numbers, never a Jinja node; a template that does not parse gives
``None`` rather than a Jinja exception (compiling it says why):

- ``variable_reads``: the free variables an expression reads, each with the
  constant attributes read from it (``steps.draft.output``);
- ``is_single_expression``: whether a template is one ``{{ expression }}``
  and nothing else;
- ``referenced_templates`` and ``partial_includes``: the templates one
  includes, imports or extends, and those it does on every render, with
  their lines.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from jinja2 import TemplateNotFound, meta, nodes
from jinja2.exceptions import TemplateError, TemplateSyntaxError

from registry.rendering.environment import TemplateEnvironment
from registry.rendering.placeholders import written_names


@dataclass(frozen=True)
class TemplateProblem:
    """A template that does not compile, with its 1-based line within the template."""

    message: str
    line: int | None


@contextmanager
def compiling() -> Iterator[None]:
    """Jinja's and Python's errors while parsing and compiling a template, as
    the ``TemplateCompileError`` every caller reports."""
    try:
        yield
    except TemplateSyntaxError as exc:
        raise TemplateCompileError(TemplateProblem(exc.message or str(exc), exc.lineno)) from exc
    except TemplateError as exc:
        raise TemplateCompileError(TemplateProblem(str(exc), None)) from exc
    except (RecursionError, SyntaxError, MemoryError) as exc:
        raise TemplateCompileError(too_complex(exc)) from exc


def too_complex(exc: BaseException) -> TemplateProblem:
    """Python's own limits, reached by compiling a template (deep nesting)."""
    reason = "nested too deeply" if isinstance(exc, (RecursionError, SyntaxError)) else "too large"
    return TemplateProblem(f"template is {reason} to compile", None)


class TemplateCompileError(Exception):
    """A template does not compile; ``problem`` says where."""

    def __init__(self, problem: TemplateProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def tree_references(tree: nodes.Template) -> tuple[str | None, ...]:
    """Names of templates this one includes, imports or extends; None for a
    name computed at render time."""
    return tuple(meta.find_referenced_templates(tree))


def undeclared_variables(environment: TemplateEnvironment, tree: nodes.Template) -> frozenset[str]:
    """Variables the template reads that neither it nor the environment's
    globals define: what its caller must give."""
    return frozenset(meta.find_undeclared_variables(tree)) - set(environment.globals)


def analyse_partial(environment: TemplateEnvironment, name: str) -> tuple[frozenset[str], tuple[str | None, ...]]:
    """Variables a partial needs and the templates it references; the partial
    is compiled too (and kept in the environment's cache for rendering).

    Raises ``TemplateNotFound`` when it does not exist and
    ``TemplateCompileError`` when it does not compile.
    """
    known = environment.partial_analyses.get(name)
    if known is None:
        try:
            known = _analyse_partial(environment, name)
        except (TemplateNotFound, TemplateCompileError) as exc:
            known = exc
        environment.partial_analyses[name] = known
    if isinstance(known, Exception):
        raise known.with_traceback(None)  # raised again and again: keep its traceback from growing
    return known


def partial_placeholders(environment: TemplateEnvironment, name: str) -> frozenset[str]:
    """The names the partial's text writes as placeholders
    (``registry.rendering.placeholders.written_names``); raises as
    ``analyse_partial`` does."""
    analyse_partial(environment, name)
    return environment.partial_placeholders.get(name, frozenset())


def _analyse_partial(environment: TemplateEnvironment, name: str) -> tuple[frozenset[str], tuple[str | None, ...]]:
    source, _, _ = environment.loader.get_source(environment, name)  # type: ignore[union-attr]
    environment.partial_placeholders[name] = written_names(source)
    try:
        tree = environment.parse(source, name=name)
        found = undeclared_variables(environment, tree), tree_references(tree)
        environment.get_template(name)
    except TemplateSyntaxError as exc:
        raise TemplateCompileError(TemplateProblem(exc.message or str(exc), exc.lineno)) from exc
    except TemplateNotFound:
        raise
    except TemplateError as exc:
        raise TemplateCompileError(TemplateProblem(str(exc), None)) from exc
    except (RecursionError, SyntaxError, MemoryError) as exc:
        raise TemplateCompileError(too_complex(exc)) from exc
    return found


def single_expression(tree: nodes.Template) -> nodes.Expr | None:
    """The one expression a template is made of (``{{ inputs.issues }}``),
    or None when it holds anything else (text, tags, several expressions)."""
    body = tree.body
    if (
        len(body) == 1
        and isinstance(body[0], nodes.Output)
        and len(body[0].nodes) == 1
        and not isinstance(body[0].nodes[0], nodes.TemplateData)
    ):
        return body[0].nodes[0]
    return None


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
    return None if tree is None else single_expression(tree) is not None


def referenced_templates(environment: TemplateEnvironment, source: str, *, name: str) -> tuple[str | None, ...] | None:
    """The names of the templates ``source`` includes, imports or extends
    (None for a name computed at render time); None when it does not parse."""
    tree = _parse(environment, source, name)
    return None if tree is None else tree_references(tree)


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
    return Includes(tree_references(tree), _unconditional_includes(tree))


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
