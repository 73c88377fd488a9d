"""Reading an eval file: its header at once, its cases one at a time.

A dataset may hold 100,000 cases, so an ``EvalFile`` never holds them: the
file is read as a stream of YAML events (``registry.format.yamlstream``),
and each case is composed, checked and turned into an ``EvalCase`` only when
the one before it has been handed out. Memory stays that of one case, plus
the id of each case read so far (to find duplicates). The header (``agent``,
``description``, ``defaults``) is read when the file is opened, so it must
come before ``cases:``.

Every problem is an ``Issue`` with the file, line and column, and unknown
keys and assertion kinds come with a "did you mean". ``entries`` yields each
case or why it cannot be run, for lint to report everything; ``cases`` yields
only good cases and raises ``ConfigurationError`` at the first problem, for a
runner. The published JSON Schema, ``schemas/eval.v1.schema.json``, is for
editors; this module is what the runtime trusts, and a test keeps the two
in agreement.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from registry.errors import ConfigurationError, summarize
from registry.evals.dataset import (
    MAX_REPEAT,
    Defaults,
    EvalCase,
    EvalHeader,
    InvalidCase,
    Turn,
)
from registry.evals.expectations import read_agent_name, read_expect
from registry.evals.problems import SCHEMA_RULE, Problems
from registry.format.safeyaml import JsonPath, Position, YamlDocument, YamlError, kind_of
from registry.format.yamlstream import Piece, StreamLimits, stream_pieces
from registry.models import Issue, location, shorten

FILE_KEYS = ("agent", "description", "defaults", "cases")
DEFAULTS_KEYS = ("repeat", "expect")
CASE_KEYS = ("id", "description", "tags", "inputs", "history", "repeat", "expect")
TURN_KEYS = ("role", "content")
ROLES = ("user", "assistant")
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", re.ASCII)
"""A case id: it names the case in reports and test reports."""
TAG_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", re.ASCII)
MAX_TAGS = 20
MAX_DESCRIPTION = 2_000
DUPLICATE_ID_RULE = "eval-duplicate-id"


@dataclass(frozen=True)
class EvalLimits:
    """Bounds on what an eval file may be."""

    stream: StreamLimits = StreamLimits()
    """The file's size, and each case's (events, characters, nesting, values with aliases expanded)."""


@contextmanager
def open_eval_file(
    path: str | Path, *, source: str | None = None, agent: str | None = None, limits: EvalLimits = EvalLimits()
) -> Iterator[EvalFile]:
    """The eval file at ``path``, open for reading; ``source`` names it in
    messages (default: the path), ``agent`` is the one its path names
    (``dataset.agent_of_path``). Raises ``ConfigurationError`` when it cannot be read."""
    name = source or str(path)
    try:
        stream = Path(path).open("rb")
    except FileNotFoundError as exc:
        raise ConfigurationError(f"eval file {name} does not exist") from exc
    except OSError as exc:
        raise ConfigurationError(f"eval file {name} cannot be read: {exc.strerror or exc}") from exc
    with stream:
        yield EvalFile(stream, source=name, agent=agent, limits=limits)


class EvalFile:
    """One eval file, read from ``stream``: ``header`` at once, the cases on demand, once."""

    def __init__(
        self, stream: IO[bytes], *, source: str, agent: str | None = None, limits: EvalLimits = EvalLimits()
    ) -> None:
        self.source = source
        self.problems: list[Issue] = []
        """Problems of the file found while its cases are read (after the last
        case, a syntax error...); the header's are ``header.issues``, a case's
        its ``InvalidCase.issues``."""
        self._pieces = stream_pieces(stream, streamed="cases", limits=limits.stream)
        self._cases_at: Position | None = None
        self._started = False
        self._ended = False
        self.header = self._read_header(agent)

    def entries(self, *, limit: int | None = None) -> Iterator[EvalCase | InvalidCase]:
        """Each case, or why it cannot be run, in file order: at most ``limit``
        of them (the rest of the file is then not read)."""
        if self._started:
            raise RuntimeError("the cases of an EvalFile are read once; open the file again")
        self._started = True
        ids: dict[str, int] = {}
        count = 0
        while not self._ended and (limit is None or count < limit):
            piece = self._next_piece()
            if piece is None:
                break
            if len(piece.path) == 2:
                yield self._case(piece, ids)
                count += 1
            else:
                self._after_cases(piece)
        if limit is None or count < limit:
            self._check_cases(count)

    def cases(self, *, limit: int | None = None) -> Iterator[EvalCase]:
        """Each good case, in file order, at most ``limit``. Raises
        ``ConfigurationError`` (every problem in ``errors``) at the header's
        problems, before any case; at the first case that cannot be run; and
        at a problem of the file found after the last case."""
        _raise_for(self.header.issues)
        for entry in self.entries(limit=limit):
            if isinstance(entry, InvalidCase):
                _raise_for(entry.issues)
            else:
                yield entry
        _raise_for(self.problems)

    # --- the header ------------------------------------------------------------------------------

    def _read_header(self, path_agent: str | None) -> EvalHeader:
        values: dict[str, Any] = {}
        positions: dict[JsonPath, Position] = {}
        keys: dict[JsonPath, Position] = {}
        issues: list[Issue] = []
        while not self._ended:
            piece = self._next_piece()
            if piece is None:
                break
            issues.extend(self._located(piece.issues))
            if piece.items:
                self._cases_at = piece.start
                keys[piece.path] = piece.start
                break
            if piece.document is not None:
                values[str(piece.path[0])] = piece.document.value
                positions.update(piece.document.values)
                keys.update(piece.document.keys)
                keys[piece.path] = piece.start
        document = YamlDocument(values, positions, keys)
        problems = Problems(self.source, document)
        problems.check_keys(values, (), FILE_KEYS, what="an eval file")
        agent = read_agent_name(values["agent"], ("agent",), problems) if "agent" in values else path_agent
        if "agent" not in values and path_agent is None:
            problems.add(
                "this file does not say which agent it evaluates, and its path does not name one",
                (),
                hint="write 'agent: usecase/name', or move it to <evals root>/<usecase>/<name>.yml",
            )
        if "cases" in values:  # the streamed list is not a header value: this is something else
            problems.add(f"cases is a list of cases, not {kind_of(values['cases'])}", ("cases",))
        description = _description(values, (), problems)
        defaults = _defaults(values.get("defaults"), problems)
        return EvalHeader(
            self.source,
            agent,
            defaults,
            description,
            tuple(issues + problems.issues),
            document,
        )

    # --- the cases -------------------------------------------------------------------------------

    def _case(self, piece: Piece, ids: dict[str, int]) -> EvalCase | InvalidCase:
        index = int(piece.path[1])
        where = location(self.source, piece.start.line, piece.start.column)
        if piece.document is None:
            return InvalidCase(index, None, where, tuple(self._located(piece.issues)))
        problems = Problems(self.source, piece.document)
        path = piece.path
        value = piece.document.value
        if not isinstance(value, dict):
            problems.add(f"a case is a mapping with an id, inputs and expect, not {kind_of(value)}", path)
            return InvalidCase(index, None, where, tuple(problems.issues))
        problems.check_keys(value, path, CASE_KEYS, what="a case")
        case_id = _case_id(value, path, problems)
        if case_id in ids:
            problems.add(
                f"case id {case_id!r} is used again (first on line {ids[case_id]})",
                path + ("id",),
                rule=DUPLICATE_ID_RULE,
                hint="give each case its own id: reports compare cases by id",
            )
        elif case_id is not None:
            ids[case_id] = piece.start.line
        inputs = value.get("inputs", {})
        if not isinstance(inputs, dict):
            problems.add(f"inputs is a mapping of the agent's inputs, not {kind_of(inputs)}", path + ("inputs",))
        history = _history(value.get("history"), path + ("history",), problems)
        description = _description(value, path, problems)
        tags = _tags(value.get("tags"), path + ("tags",), problems)
        repeat = _repeat(value, path, problems)
        expect = read_expect(value.get("expect"), path + ("expect",), problems)
        if problems.issues:
            return InvalidCase(index, case_id, where, tuple(problems.issues))
        assert case_id is not None  # a case without a good id has a problem
        defaults = self.header.defaults
        return EvalCase(
            id=case_id,
            index=index,
            inputs=inputs,
            expect=defaults.expect + expect,
            repeat=repeat or defaults.repeat,
            history=history,
            description=description,
            tags=tags,
            where=where,
            document=piece.document,
        )

    def _after_cases(self, piece: Piece) -> None:
        """A top-level key after the cases: the header was read before them."""
        self.problems.extend(self._located(piece.issues))
        if not piece.path:
            return
        problems = Problems(self.source, YamlDocument({}, {}, {piece.path: piece.start}))
        key = str(piece.path[0])
        if key in FILE_KEYS:
            problems.add(
                f"{key} comes after cases; write it before them, since cases are read one at a time after the header",
                (),
                key=key,
            )
        else:
            problems.check_keys({key: None}, (), FILE_KEYS, what="an eval file")
        self.problems.extend(problems.issues)

    def _check_cases(self, count: int) -> None:
        if self._cases_at is None and not self.header.issues and not self.problems:
            self.problems.append(_file_issue(self.source, "an eval file needs cases: a list of cases"))
        elif self._cases_at is not None and count == 0:
            where = self._cases_at
            self.problems.append(
                Issue(
                    message="cases is empty; give it at least one case",
                    path="/cases",
                    file=self.source,
                    line=where.line,
                    column=where.column,
                    rule=SCHEMA_RULE,
                )
            )

    # --- reading pieces --------------------------------------------------------------------------

    def _next_piece(self) -> Piece | None:
        """The next piece of the file; None at its end, or after a problem
        with the file as a whole (recorded in ``problems``, or in the header's
        issues when the header is still being read)."""
        try:
            return next(self._pieces)
        except StopIteration:
            self._ended = True
            return None
        except YamlError as exc:
            self._ended = True
            self.problems.extend(self._located(exc.issues))
            return None

    def _located(self, issues: tuple[Issue, ...] | list[Issue]) -> list[Issue]:
        return [issue if issue.file else replace(issue, file=self.source) for issue in issues]


def _raise_for(issues: tuple[Issue, ...] | list[Issue]) -> None:
    if issues:
        ordered = sorted(issues, key=lambda issue: (issue.line or 0, issue.column or 0))
        raise ConfigurationError(summarize(ordered), errors=ordered)


def _file_issue(source: str, message: str) -> Issue:
    return Issue(message=message, file=source, rule=SCHEMA_RULE)


def _case_id(value: dict[str, Any], path: JsonPath, problems: Problems) -> str | None:
    case_id = value.get("id")
    if case_id is None:
        problems.add("a case needs an id (id: refund-simple)", path)
        return None
    if not isinstance(case_id, str) or not ID_PATTERN.fullmatch(case_id):
        problems.add(
            f"id {shorten(repr(case_id), 60)} is not an id: 1-128 characters of letters, digits, '_', '.' and '-'",
            path + ("id",),
        )
        return None
    return case_id


def _description(value: dict[str, Any], path: JsonPath, problems: Problems) -> str | None:
    description = value.get("description")
    if description is not None and (not isinstance(description, str) or len(description) > MAX_DESCRIPTION):
        problems.add(f"description is a text of at most {MAX_DESCRIPTION} characters", path + ("description",))
        return None
    return description


def _tags(value: Any, path: JsonPath, problems: Problems) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_TAGS:
        problems.add(f"tags is a list of at most {MAX_TAGS} tags, not {kind_of(value)}", path)
        return ()
    for index, tag in enumerate(value):
        if not isinstance(tag, str) or not TAG_PATTERN.fullmatch(tag):
            problems.add(
                f"tag {shorten(repr(tag), 40)} is not a tag: 1-64 letters, digits, '_', '.' and '-'", path + (index,)
            )
    return tuple(value)


def _repeat(value: dict[str, Any], path: JsonPath, problems: Problems) -> int | None:
    repeat = value.get("repeat")
    if repeat is None:
        return None
    if isinstance(repeat, bool) or not isinstance(repeat, int) or not 1 <= repeat <= MAX_REPEAT:
        problems.add(f"repeat is a whole number from 1 to {MAX_REPEAT}, not {shorten(repeat, 40)}", path + ("repeat",))
        return None
    return repeat


def _history(value: Any, path: JsonPath, problems: Problems) -> tuple[Turn, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        problems.add(f"history is a list of prior turns ({{role, content}}), not {kind_of(value)}", path)
        return ()
    turns = []
    for index, turn in enumerate(value):
        at = path + (index,)
        if not isinstance(turn, dict):
            problems.add(f"a turn is a mapping with role and content, not {kind_of(turn)}", at)
            continue
        problems.check_keys(turn, at, TURN_KEYS, what="a turn")
        role, content = turn.get("role"), turn.get("content")
        if role not in ROLES:
            problems.add(f"a turn's role is user or assistant, not {shorten(repr(role), 40)}", at)
        elif not isinstance(content, str):
            problems.add(f"a turn's content is a text, not {kind_of(content)}", at)
        else:
            turns.append(Turn(role, content))
    return tuple(turns)


def _defaults(value: Any, problems: Problems) -> Defaults:
    if value is None:
        return Defaults()
    path: JsonPath = ("defaults",)
    if not isinstance(value, dict):
        problems.add(f"defaults is a mapping (repeat, expect), not {kind_of(value)}", path)
        return Defaults()
    problems.check_keys(value, path, DEFAULTS_KEYS, what="defaults")
    repeat = _repeat(value, path, problems)
    return Defaults(repeat or 1, read_expect(value.get("expect"), path + ("expect",), problems))
