"""The one exception hierarchy of prompt-registry.

Every error the registry raises on purpose is a ``RegistryError``. Each class
carries the problem ``slug`` and HTTP ``status`` it is answered with; the HTTP
layer maps them to RFC 9457 problem responses in one place
(``registry.web.problems``) and the client maps the same slugs back to the same
classes.

    RegistryError
    ├── InvalidRequest        invalid-request       400  (also ValueError)
    ├── PayloadTooLarge       payload-too-large     413
    ├── RequestTimeout        request-timeout       408  (a body not sent within the deadline)
    ├── NotFound              not-found             404  (also LookupError)
    │   ├── ReleaseNotFound   release-not-found
    │   ├── AgentNotFound     agent-not-found
    │   ├── TaskNotFound      task-not-found        (the Agent Protocol service: also another owner's)
    │   ├── StepNotFound      step-not-found
    │   └── ArtifactNotFound  artifact-not-found
    ├── InvalidDefinition     invalid-definition    422  errors: [Issue]
    ├── InvalidInputs         invalid-inputs        422  errors: [Issue]
    ├── RenderError           render-error          422
    ├── NotAPrompt            not-a-prompt          422  steps: [{call, agent}] (a composite has no prompt)
    ├── Unauthorized          unauthorized          401  (no or a wrong bearer token or webhook secret)
    ├── InvalidState          invalid-state         409  (a task, step or action that its state does not let
    │                                                     change so: entity, state, allowed)
    ├── NotReady              not-ready             503  (no successful sync yet)
    ├── StoreError            store-unavailable     503  (the repository cannot be read)
    ├── RegistryUnavailable   registry-unavailable  503  (client: no answer, nothing cached or bundled)
    ├── InvalidBundle         invalid-bundle        422  (a bundle file that fails its integrity check)
    ├── ModelError            model-error           502  (the executor's model endpoint failed, after retries)
    ├── AgentServiceError     agent-service-error   its  (the UI: the Agent Protocol service answered an error,
    │                                                     or could not be reached (502))
    └── ConfigurationError    configuration-error   500  (a setting or argument the registry cannot use;
                                                         also ValueError) errors: [Issue], for a file

The last four are never answered over HTTP by the registry: the client
raises ``RegistryUnavailable`` and ``InvalidBundle``, the executor
``ModelError`` (a run turns it into the outcome ``failed``), the server's
startup and the command line ``ConfigurationError``. ``ERRORS_BY_SLUG``, the
slugs the client maps back to classes, leaves them out.

``InvalidDefinition``, ``InvalidInputs`` and ``RenderError`` are about one
agent at one release: once the client knows which, their message names them
(``missing required input 'ticket' (support/triage at v1.0.1)``), since a
gateway's log line is often all anyone sees. Their ``detail`` names the first
problem in words (``summarize``), never just a count.

Foreign errors (GitPython, YAML, jsonschema, Jinja) are translated where they
enter and re-raised ``from`` the original, so nothing foreign crosses a module
boundary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from registry.models import Issue, location, plural


class RegistryError(Exception):
    """Base class of every error the registry raises on purpose."""

    slug = "internal-error"
    title = "Internal error"
    status = 500

    def __init__(self, detail: str, **extensions: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extensions = extensions

    def problem_fields(self) -> dict[str, Any]:
        """Extension members added to the problem body (JSON-compatible)."""
        return dict(self.extensions)

    def response_headers(self) -> dict[str, str]:
        """HTTP headers the problem response carries besides its body."""
        return {}


class InvalidRequest(RegistryError, ValueError):
    """The request is malformed: bad names, a bad release, bad JSON."""

    slug = "invalid-request"
    title = "Invalid request"
    status = 400


class PayloadTooLarge(RegistryError):
    """The request body is larger than the registry accepts."""

    slug = "payload-too-large"
    title = "Payload too large"
    status = 413


class RequestTimeout(RegistryError):
    """The client did not send its request body within the deadline."""

    slug = "request-timeout"
    title = "Request timeout"
    status = 408


class NotFound(RegistryError, LookupError):
    """Something named by the request does not exist."""

    slug = "not-found"
    title = "Not found"
    status = 404


class ReleaseNotFound(NotFound):
    """No release matches the requested one."""

    slug = "release-not-found"
    title = "Release not found"


class AgentNotFound(NotFound):
    """The release has no definition at ``<usecase>/<name>``."""

    slug = "agent-not-found"
    title = "Agent not found"


class TaskNotFound(NotFound):
    """No task with this id for this caller: a task of another owner is
    not found either (its existence is not confirmed)."""

    slug = "task-not-found"
    title = "Task not found"


class StepNotFound(NotFound):
    slug = "step-not-found"
    title = "Step not found"


class ArtifactNotFound(NotFound):
    slug = "artifact-not-found"
    title = "Artifact not found"


class InvalidState(RegistryError):
    """A request the entity's state does not allow (docs/agent-protocol.md
    tables every state change); ``state`` is the current one, ``allowed``
    what could happen from it."""

    slug = "invalid-state"
    title = "Not allowed in this state"
    status = 409

    def __init__(self, detail: str, *, entity: str, state: str, allowed: list[str]) -> None:
        super().__init__(detail, entity=entity, state=state, allowed=allowed)
        self.state = state


class _AgentError(RegistryError):
    """An error about one agent at one release; its message names them once
    known: ``<detail> (<usecase>/<name> at <tag>)``. ``detail`` leaves them
    out: a problem answer is about what its request names already."""

    def __init__(self, detail: str, *, agent: str | None = None, release: str | None = None, **extensions: Any) -> None:
        super().__init__(detail, **extensions)
        self.agent = agent
        self.release = release

    def __str__(self) -> str:
        if self.agent is None:
            return self.detail
        where = self.agent if self.release is None else f"{self.agent} at {self.release}"
        return f"{self.detail} ({where})"

    def problem_fields(self) -> dict[str, Any]:
        located = {"agent": self.agent, "release": self.release} if self.agent is not None else {}
        return {**super().problem_fields(), **located}

    def locate(self, agent: str, release: str | None) -> None:
        """Name the agent (``usecase/name``) and the release the error is
        about, unless it names them already (whoever raised it knew better)."""
        if self.agent is None:
            self.agent, self.release = agent, release


class _IssueListError(_AgentError):
    """An error that carries every issue found, each with where it is."""

    def __init__(self, detail: str, errors: list[Issue], **extensions: Any) -> None:
        super().__init__(detail, **extensions)
        self.errors = errors

    def problem_fields(self) -> dict[str, Any]:
        return {**super().problem_fields(), "errors": [e.as_dict() for e in self.errors]}


class InvalidDefinition(_IssueListError):
    """The definition file exists but is invalid."""

    slug = "invalid-definition"
    title = "Invalid definition"
    status = 422


class InvalidInputs(_IssueListError):
    """The inputs given for a render do not fit the definition."""

    slug = "invalid-inputs"
    title = "Invalid inputs"
    status = 422


class RenderError(_AgentError):
    """Rendering failed: a template error, a sandbox violation, a limit."""

    slug = "render-error"
    title = "Render error"
    status = 422


class Unauthorized(RegistryError):
    """The request lacks valid credentials (a bearer token, a webhook secret)."""

    slug = "unauthorized"
    title = "Unauthorized"
    status = 401

    def __init__(self, detail: str, *, bearer: bool = False) -> None:
        super().__init__(detail)
        self.bearer = bearer

    def response_headers(self) -> dict[str, str]:
        # RFC 6750: a 401 for a bearer-protected resource names the scheme.
        return {"WWW-Authenticate": 'Bearer realm="prompt-registry"'} if self.bearer else {}


class NotReady(RegistryError):
    """The registry cannot serve yet: no successful sync from its remote."""

    slug = "not-ready"
    title = "Not ready"
    status = 503


class StoreError(RegistryError):
    """The repository could not be read."""

    slug = "store-unavailable"
    title = "Store unavailable"
    status = 503


class RegistryUnavailable(RegistryError):
    """The client got no usable answer from the registry (unreachable, timed
    out, failing or answering garbage) and had nothing cached or bundled for
    the request. Never an empty or default prompt instead."""

    slug = "registry-unavailable"
    title = "Registry unavailable"
    status = 503


class InvalidBundle(RegistryError):
    """A bundle file that cannot be used: unreadable, of an unknown format, or
    whose content does not match its digests."""

    slug = "invalid-bundle"
    title = "Invalid bundle"
    status = 422


class NotAPrompt(_AgentError):
    """A render asked of a composite agent: it runs other agents, so it has
    no prompt of its own. ``steps`` lists what it calls, each a ``call``
    (``step 'draft'``, ``the classifier``...) and the ``agent`` it runs."""

    slug = "not-a-prompt"
    title = "Not a prompt"
    status = 422


class ModelError(RegistryError):
    """The model endpoint gave no usable reply: an error status (after the
    retries 429 and 5xx get), a timeout, a connection failure, a body that
    is not a chat completion, or a reply over the size cap. ``reason`` says
    which, in a word the trace keeps (``status``, ``timeout``,
    ``connection``, ``malformed``, ``too-large``, ``no-reply``; a replay's
    ``not-recorded``: a request its file does not hold)."""

    slug = "model-error"
    title = "Model error"
    status = 502

    def __init__(self, detail: str, *, reason: str, http_status: int | None = None) -> None:
        super().__init__(detail, reason=reason, http_status=http_status)
        self.reason = reason
        self.http_status = http_status

    @property
    def transient(self) -> bool:
        """Whether the same call may well succeed later: a timeout, a broken
        connection, or an error status that says "not now" (408, 409, 425,
        429, 5xx, or a stream's error with no status). Not a 4xx that says
        the request is wrong, a reply that is not a completion, a reply over
        the cap, an unbound provider, or a script or recording with nothing
        left to give: those fail the same way every time."""
        if self.reason in _TRANSIENT_REASONS:
            return True
        if self.reason != "status":
            return False
        return self.http_status is None or self.http_status >= 500 or self.http_status in _TRANSIENT_STATUSES


_TRANSIENT_REASONS = frozenset({"timeout", "connection"})
_TRANSIENT_STATUSES = frozenset({408, 409, 425, 429})


class AgentServiceError(RegistryError):
    """The Agent Protocol service the UI shows tasks of answered a problem
    (with that status), or could not be reached (502)."""

    slug = "agent-service-error"
    title = "Agent Protocol service error"
    status = 502

    def __init__(self, detail: str, *, status: int = 502) -> None:
        super().__init__(detail)
        self.status = status


ERRORS_BY_SLUG: dict[str, type[RegistryError]] = {
    cls.slug: cls
    for cls in (
        InvalidRequest,
        PayloadTooLarge,
        RequestTimeout,
        NotFound,
        ReleaseNotFound,
        AgentNotFound,
        InvalidDefinition,
        InvalidInputs,
        RenderError,
        NotAPrompt,
        Unauthorized,
        NotReady,
        StoreError,
    )
}


class ConfigurationError(RegistryError, ValueError):
    """A setting has a value the registry cannot use (raised at startup).
    A file of settings (a models file, a script of replies) gives every
    problem it has as ``errors``, each with where it is; ``detail`` names
    the first."""

    slug = "configuration-error"
    title = "Configuration error"

    def __init__(self, detail: str, *, errors: Sequence[Issue] = (), **extensions: Any) -> None:
        super().__init__(detail, **extensions)
        self.errors = list(errors)


def summarize(issues: Sequence[Issue]) -> str:
    """The first of ``issues`` (at least one) in words, where it is, and how
    many more there are: ``chat/a.yml:4:1: unknown key 'modle', and 2 more problems``."""
    first = issues[0]
    where = _where(first)
    text = f"{where}: {first.message}" if where else first.message
    more = len(issues) - 1
    if more:
        text += f", and {plural(more, 'more problem')}"
    return text


def _where(issue: Issue) -> str:
    if issue.line is not None:
        if issue.file is None:
            return f"line {issue.line}"
        return location(issue.file, issue.line, issue.column)
    # Without a line, the JSON path says where, unless the message names the
    # key already ("missing required input 'ticket'" at /ticket).
    last = issue.path.rsplit("/", 1)[-1].replace("~1", "/").replace("~0", "~")
    path = issue.path if issue.path and repr(last) not in issue.message else ""
    if issue.file is None:
        return path
    return f"{issue.file}#{path}" if path else issue.file
