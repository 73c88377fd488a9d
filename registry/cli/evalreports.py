"""Where ``prompt-registry eval`` writes its reports: the main one
(``--format``, to stdout or ``-o FILE``) and any number more with
``--report FORMAT=FILE``, all from one run.

A CI job wants a Markdown note, a JUnit file and an HTML page of the same
evaluation; running it once per format would ask the models three times
and could give three different answers. Every target is checked before
anything runs (a known format, a directory that exists, no file named
twice), so a typo costs no model call.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from registry.cli.terminal import use_colour
from registry.errors import ConfigurationError
from registry.models import close_matches, did_you_mean

if TYPE_CHECKING:
    from registry.evals.results import EvalRun


@dataclass(frozen=True)
class ReportTarget:
    """One report: its format, and its file (None: standard output)."""

    format: str
    path: Path | None


def report_targets(args: argparse.Namespace, formats: Sequence[str]) -> tuple[ReportTarget, ...]:
    """The reports asked for, the main one first, each checked
    (``ConfigurationError`` naming the option)."""
    main = ReportTarget(args.format, Path(args.output) if args.output else None)
    targets = [main, *(_parse_report(value, formats) for value in args.report or ())]
    seen: set[Path] = set()
    for target in targets:
        if target.path is None:
            continue
        resolved = target.path.resolve()
        if resolved in seen:
            raise ConfigurationError(f"{target.path} is named for two reports: give each its own file")
        seen.add(resolved)
        _check_writable(target.path)
    return tuple(targets)


def _parse_report(value: str, formats: Sequence[str]) -> ReportTarget:
    name, equals, path = value.partition("=")
    if not equals or not name or not path:
        raise ConfigurationError(f"--report {value!r}: write it FORMAT=FILE, as in --report junit=eval.xml")
    if name not in formats:
        hint = did_you_mean(close_matches(name, formats)) or f"one of {', '.join(formats)}"
        raise ConfigurationError(f"--report {value!r}: no format {name!r}; {hint}")
    return ReportTarget(name, Path(path))


def _check_writable(path: Path) -> None:
    """Refuse a file that could not be written once the run is over."""
    directory = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise ConfigurationError(f"cannot write {path}: it is a directory")
    if not directory.is_dir():
        raise ConfigurationError(f"cannot write {path}: there is no directory {directory}")
    if not os.access(directory, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ConfigurationError(f"cannot write {path}: permission denied")


def write_reports(targets: Sequence[ReportTarget], result: EvalRun) -> None:
    """Render and write every report. The main one goes to standard output,
    or to its file with the gate's verdict on standard output; the others
    are named on standard error, so standard output stays one report."""
    from registry.authoring.colour import paint
    from registry.evals.reports import RENDERERS, plain

    for index, target in enumerate(targets):
        colour = target.path is None and target.format == "text" and use_colour(sys.stdout)
        painter = (lambda text, style: paint(text, style, colour=True)) if colour else plain
        text = RENDERERS[target.format](result, painter)
        if target.path is None:
            sys.stdout.write(text)
            continue
        try:
            target.path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(f"cannot write {target.path}: {exc.strerror or exc}") from exc
        if index:
            print(f"{target.format} report: {target.path}", file=sys.stderr)
    main = targets[0]
    if main.path is not None:
        verdict = "passed" if result.gate.passed else "failed"
        print(f"gate {verdict} (--fail-on {result.gate.fail_on}); the report is in {main.path}")
