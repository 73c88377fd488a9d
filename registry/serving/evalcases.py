"""An agent's eval cases at a release, as the UI's agent page lists them (read-only).

The eval file of ``usecase/name`` is ``<evals root>/usecase/name.yml``
(``registry.evals.dataset``) in the very commit the page's release resolved
to, read by the streaming reader lint and ``prompt-registry eval`` use
(``registry.evals.reading``). A dataset may hold 100,000 cases and a page
must not read them all: the first ``SHOWN`` cases are listed, and at most
``COUNTED`` are read to say how many follow. Every problem found on the way
(the header's, a case's, the file's) is listed at file:line as lint reports
it, so a broken file shows why instead of breaking the page.

What is listed is kept per process, keyed by the file's path and git blob
id: equal ids, equal content, so nothing is ever invalidated, and a file
unchanged across releases is read once.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache

from registry.errors import StoreError
from registry.evals.dataset import Assertion, EvalCase, InvalidCase, Judge, eval_path, evals_root
from registry.evals.reading import EvalFile
from registry.models import Issue, Release, shorten
from registry.store.git import GitStore, GitTree
from registry.store.protocol import Store

log = logging.getLogger(__name__)

SHOWN = 50
"""Cases listed on the page."""
COUNTED = 1_000
"""Cases read at most, to say how many follow those listed (about 0.2 ms each)."""
MAX_PROBLEMS = 50
"""Problems listed; the rest are counted."""
INPUTS_SHOWN = 300
"""Characters of a case's inputs shown, as compact JSON: a page of 50 cases stays small."""
_KEPT = 64
"""Listings kept per process: each is at most ``SHOWN`` cases of bounded size."""


@dataclass(frozen=True)
class Expectation:
    """One assertion of a case, in the words its class gives it (``describe``)."""

    kind: str
    """As written in the file: ``contains``, ``judge``, ..."""
    description: str
    judge: str | None = None
    """The judge agent (``usecase/name``) of a ``judge`` assertion, an agent of the same release."""


@dataclass(frozen=True)
class ListedCase:
    """One case as the page lists it, with its file's defaults applied."""

    id: str
    line: int | None
    description: str | None
    tags: tuple[str, ...]
    inputs: str
    """Compact JSON, cut to ``INPUTS_SHOWN`` characters."""
    history: int
    """Prior turns of the conversation."""
    repeat: int
    expect: tuple[Expectation, ...]


@dataclass(frozen=True)
class EvalCases:
    """The eval file of one agent at one release, as far as the page reads it."""

    path: str
    """Where the file is (or would be) in the repository: ``ai_gateway/evals/support/triage.yml``."""
    found: bool = False
    """The release has the file (its cases, or why they cannot be read, follow)."""
    blob: str | None = None
    """Its git blob id."""
    agent: str | None = None
    """The agent the file says it evaluates (``agent:``, else its path)."""
    description: str | None = None
    cases: tuple[ListedCase, ...] = ()
    read: int = 0
    """Cases read: those listed, those among the first ``SHOWN`` that cannot
    be run, and those after them up to ``COUNTED``."""
    complete: bool = True
    """The file was read to its end, so ``read`` is every case it has."""
    problems: tuple[Issue, ...] = ()
    more_problems: int = 0
    """Problems found beyond the ``MAX_PROBLEMS`` listed."""
    unavailable: str | None = None
    """Why this store's eval files cannot be listed."""

    @property
    def more(self) -> int:
        """Cases read after the first ``SHOWN`` (more still when not ``complete``)."""
        return max(0, self.read - SHOWN)


class EvalCaseReader:
    """Lists an agent's eval cases at a release, from a git store."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._listed: LRUCache[tuple[str, str], EvalCases] = LRUCache(maxsize=_KEPT)

    def of_agent(self, release: Release, usecase: str, name: str) -> EvalCases:
        """The eval cases of ``usecase/name`` in ``release``'s commit."""
        root = evals_root(self._store.root)
        relative = eval_path(f"{usecase}/{name}")
        path = f"{root}/{relative}"
        if not isinstance(self._store, GitStore):
            return EvalCases(
                path,
                unavailable="Eval cases are listed for the releases of a git repository; this server shows a"
                " working tree (prompt-registry lint checks its eval files).",
            )
        try:
            tree = self._store.tree(release, root=root)
            try:
                blob = tree.object_id(relative)
            except KeyError:
                return EvalCases(path)
            with self._lock:
                listed = self._listed.get((path, blob))
            if listed is None:
                listed = _listing(tree, relative, path, blob)
                with self._lock:
                    self._listed[(path, blob)] = listed
            return listed
        except StoreError as exc:
            # The page is still worth showing; the section says the file could not be read.
            log.warning("cannot read %s at %s: %s", path, release.tag, exc.detail)
            problem = Issue(message=f"cannot be read from the repository: {exc.detail}", file=path)
            return EvalCases(path, found=True, problems=(problem,))


def _listing(tree: GitTree, relative: str, path: str, blob: str) -> EvalCases:
    """Read the file: its header, the first ``SHOWN`` cases listed, the rest up to ``COUNTED`` counted."""
    agent = relative.removesuffix(".yml")
    cases: list[ListedCase] = []
    problems: list[Issue] = []
    read = 0
    with tree.open(relative) as stream:
        dataset = EvalFile(stream, source=path, agent=agent)
        problems.extend(dataset.header.issues)
        # One more than counted tells whether the file goes on.
        for entry in dataset.entries(limit=COUNTED + 1):
            read += 1
            if isinstance(entry, InvalidCase):
                problems.extend(entry.issues)
            elif read <= SHOWN:
                cases.append(_listed(entry))
        complete = read <= COUNTED
        problems.extend(dataset.problems)
    ordered = sorted(problems, key=lambda issue: (issue.line or 0, issue.column or 0))
    return EvalCases(
        path,
        found=True,
        blob=blob,
        agent=dataset.header.agent,
        description=dataset.header.description,
        cases=tuple(cases),
        read=min(read, COUNTED),
        complete=complete,
        problems=tuple(ordered[:MAX_PROBLEMS]),
        more_problems=max(0, len(ordered) - MAX_PROBLEMS),
    )


def _listed(case: EvalCase) -> ListedCase:
    position = case.position()
    return ListedCase(
        id=case.id,
        line=position.line if position is not None else None,
        description=case.description,
        tags=case.tags,
        inputs=_compact(case.inputs),
        history=len(case.history),
        repeat=case.repeat,
        expect=tuple(_expectation(assertion) for assertion in case.expect),
    )


def _expectation(assertion: Assertion) -> Expectation:
    judge = assertion.agent if isinstance(assertion, Judge) else None
    return Expectation(assertion.kind, assertion.describe(), judge)


def _compact(inputs: Mapping[str, Any]) -> str:
    text = json.dumps(dict(inputs), ensure_ascii=False, separators=(", ", ": "), default=str)
    return shorten(text, INPUTS_SHOWN)
