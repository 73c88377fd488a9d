"""The problems found reading an eval file, each with its file, line and column."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from registry.format.safeyaml import JsonPath, YamlDocument
from registry.models import Issue, close_matches, did_you_mean, json_pointer, shorten

SCHEMA_RULE = "eval-schema"
"""The rule of a problem with the file's format (lint's rule ids: ``registry.authoring.lintreport.RULES``)."""


class Problems:
    """Collects the problems of one part of a file, located in ``document``."""

    def __init__(self, source: str, document: YamlDocument | None) -> None:
        self.source = source
        self.document = document
        self.issues: list[Issue] = []

    def add(
        self,
        message: str,
        path: JsonPath,
        *,
        key: str | None = None,
        rule: str = SCHEMA_RULE,
        hint: str | None = None,
    ) -> None:
        """A problem at ``path``, or at its ``key`` (the line of the key itself)."""
        at = path if key is None else path + (key,)
        position = self.document.position(at, key=key is not None) if self.document is not None else None
        self.issues.append(
            Issue(
                message=message,
                path=json_pointer(at),
                file=self.source,
                line=position.line if position else None,
                column=position.column if position else None,
                hint=hint,
                rule=rule,
            )
        )

    def check_keys(self, value: Mapping[str, Any], path: JsonPath, known: Sequence[str], *, what: str) -> None:
        """An unknown key of ``value`` (``what`` it is: "a case") is a problem, with a "did you mean"."""
        for key in value:
            if key not in known:
                hint = did_you_mean(close_matches(str(key), known))
                message = f"unknown key {shorten(key, 60)!r} in {what}" + (f"; {hint}" if hint else "")
                self.add(message, path, key=key, hint=f"the keys are {', '.join(known)}")
