"""Shared by the diff tests (unit and CLI): a definition with typed inputs and
examples, and repositories with a first release, or a valid release followed by
invalid definitions."""

from __future__ import annotations

from tests.conftest import MINIMAL, LibraryRepo

RULES_PARTIAL = "Rules:\n{% for rule in rules %}- {{ rule }}\n{% endfor %}"
TYPED = """\
name: Typed
prompt_templates:
  user: "{{ question }}{% if limit is defined %} ({{ limit }}){% endif %}{% if tone is defined %} {{ tone }}{% endif %}"
inputs:
  type: object
  required: [question]
  properties:
    question: {type: string}
    limit: {type: number}
    tone: {type: string, enum: [plain, warm]}
examples:
  - name: basic
    inputs: {question: "Why?", limit: 3}
"""


def first_release(repo: LibraryRepo) -> LibraryRepo:
    """``repo`` with v1.0.0: chat/minimal, chat/typed, and chat/ruled with its partial."""
    repo.write("chat/minimal.yml", MINIMAL)
    repo.write("chat/typed.yml", TYPED)
    repo.write(
        "chat/ruled.yml", "name: Ruled\nprompt_templates:\n  system: \"{% include '_partials/rules.jinja' %}\"\n"
    )
    repo.write("_partials/rules.jinja", RULES_PARTIAL)
    repo.commit("base")
    repo.tag("v1.0.0")
    return repo


def broken_library(repo: LibraryRepo) -> LibraryRepo:
    """v2.0.0 valid; then a misspelt key, an undeclared variable and a tab-indented file, committed."""
    typed_without_examples = TYPED.split("examples:")[0]
    repo.write("chat/misspelt.yml", MINIMAL)
    repo.write("chat/undeclared.yml", typed_without_examples)
    repo.write("chat/tabbed.yml", MINIMAL)
    repo.write("chat/fine.yml", MINIMAL)
    repo.commit("valid")
    repo.tag("v2.0.0")
    repo.write("chat/misspelt.yml", MINIMAL.replace("prompt_templates:", "prompt_templatse:"))
    repo.write("chat/undeclared.yml", typed_without_examples.replace("{{ question }}", "{{ questoin }}"))
    repo.write("chat/tabbed.yml", "name: Tabbed\nprompt_templates:\n\tsystem: hi\n")
    repo.commit("broken")
    return repo
