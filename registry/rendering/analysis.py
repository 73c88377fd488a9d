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
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from jinja2 import TemplateNotFound, meta, nodes
from jinja2.exceptions import TemplateError, TemplateSyntaxError

from registry.rendering.environment import TemplateEnvironment


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


def referenced_templates(tree: nodes.Template) -> tuple[str | None, ...]:
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


def _analyse_partial(environment: TemplateEnvironment, name: str) -> tuple[frozenset[str], tuple[str | None, ...]]:
    source, _, _ = environment.loader.get_source(environment, name)  # type: ignore[union-attr]
    try:
        tree = environment.parse(source, name=name)
        found = undeclared_variables(environment, tree), referenced_templates(tree)
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
