"""The sandbox: rendering untrusted Jinja templates under one policy.

Templates come from prompt authors, and inputs from callers; neither is
trusted. The server and the client render through this package alike, and
other packages import it from here, by the names below, never Jinja itself:

- ``limits``: ``RenderLimits``, ``RENDER_SEMANTICS`` (the rendering
  contract) and the budget one render spends (output, loop iterations, the
  clock); ``pausing`` for the server's slow lane.
- ``environment``: ``TemplateEnvironment``, the sandboxed environment every
  template is compiled in; partials by name (``PartialSource``,
  ``normalize_include_name``).
- ``guard``: the syntax-tree rewrite that makes compiled code count;
  ``output``: the filters it calls to count and measure output;
  ``modules``: imported partials' modules, kept across renders or not;
  ``filters``: Jinja's built-in filters, wrapped with size checks;
  ``sizes``: size estimates, made before an operation runs.
- ``analysis``: what a template needs and references, and why it does not
  compile (``TemplateCompileError``, ``TemplateProblem``,
  ``analyse_partial``); for the format's and lint's checks, what an
  expression reads (``variable_reads``, ``is_single_expression``) and what a
  template includes (``referenced_templates``, ``partial_includes``).
- ``messages``: compiled templates (``CompiledTemplate``,
  ``CompiledValue``) and rendering them (``render_messages``).
- ``placeholders``: the second phase, after Jinja: the ``{name}``
  placeholders rendered text leaves (``find_placeholders``), the names a
  template's source writes (``written_names``, and a partial's:
  ``partial_placeholders``), and filling them (``fill_placeholders``;
  from a render's inputs, ``placeholders_from_inputs``).

Every Jinja name beyond Jinja's documented API that the guard needs is
reached through ``jinja_internals``, which says why for each one
(tests/rendering/test_jinja_internals.py fails loudly if a Jinja release changes them).
``TemplateNotFound`` is Jinja's, named here for the loaders of other
packages that raise it for a partial a release lacks.

May import: ``registry.errors`` and ``registry.models``. Nothing else of
the registry.
"""

from jinja2 import TemplateNotFound

from registry.rendering.analysis import (
    Includes,
    TemplateCompileError,
    TemplateProblem,
    VariableRead,
    analyse_partial,
    is_single_expression,
    partial_includes,
    partial_placeholders,
    referenced_templates,
    variable_reads,
)
from registry.rendering.environment import PartialSource, TemplateEnvironment, normalize_include_name
from registry.rendering.limits import RENDER_SEMANTICS, Pause, RenderLimits, pausing
from registry.rendering.messages import CompiledTemplate, CompiledValue, render_messages
from registry.rendering.placeholders import (
    fill_placeholders,
    find_placeholders,
    placeholder_text,
    placeholders_from_inputs,
    written_names,
)

__all__ = [
    "Includes",
    "VariableRead",
    "is_single_expression",
    "partial_includes",
    "referenced_templates",
    "variable_reads",
    "RENDER_SEMANTICS",
    "CompiledTemplate",
    "CompiledValue",
    "PartialSource",
    "Pause",
    "RenderLimits",
    "TemplateCompileError",
    "TemplateEnvironment",
    "TemplateNotFound",
    "TemplateProblem",
    "analyse_partial",
    "normalize_include_name",
    "pausing",
    "render_messages",
    "fill_placeholders",
    "find_placeholders",
    "partial_placeholders",
    "placeholder_text",
    "placeholders_from_inputs",
    "written_names",
]
