"""The retry loop every adapter runs its calls through (``RetryPolicy.run``):
error answers the adapter reads as such are retried up to ``max_retries``
times, anything else goes to the adapter's ``fail`` at once, with the number
of retries made; each attempt gets its own deadline. The adapters' own
mapping of their SDK's exceptions is tested against real servers in
tests/integration (test_openai_stream.py, test_anthropic_chat.py,
test_litellm_chat.py)."""

from __future__ import annotations

import asyncio
from typing import NoReturn

import pytest

from registry.errors import ModelError
from registry.providers.transport import Refused, RetryPolicy

QUICK = RetryPolicy(max_retries=2, backoff=0.0, max_backoff=0.0)


class Answered(Exception):
    """An error answer, as an SDK would raise it."""

    def __init__(self, status: int) -> None:
        super().__init__(f"answered {status}")
        self.status = status


def _refused(exc: Exception) -> Refused | None:
    return Refused(exc.status, {}) if isinstance(exc, Answered) else None


def _fail(exc: Exception, retries: int) -> NoReturn:
    raise ModelError(f"{exc} after {retries} retries", reason="status") from exc


class Sender:
    """Answers each call with the next of ``outcomes``: an exception is raised."""

    def __init__(self, *outcomes: str | Exception) -> None:
        self._outcomes = list(outcomes)
        self.deadlines: list[float] = []

    async def __call__(self, deadline: float) -> str:
        self.deadlines.append(deadline)
        outcome = self._outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def _run(send: Sender, *, timeout: float = 5.0, begun: float | None = None) -> tuple[str, float]:
    async def run() -> tuple[str, float]:
        return await QUICK.run(send, timeout=timeout, refused=_refused, fail=_fail, begun=begun)

    return asyncio.run(run())


def test_error_answers_the_policy_retries_are_retried_until_one_answers() -> None:
    send = Sender(Answered(503), Answered(429), "the reply")
    answer, deadline = _run(send)
    assert answer == "the reply"
    assert len(send.deadlines) == 3
    assert deadline == send.deadlines[-1]


def test_the_last_retry_failing_goes_to_fail_with_the_retries_made() -> None:
    send = Sender(Answered(503), Answered(503), Answered(503), "never asked for")
    with pytest.raises(ModelError, match=r"^answered 503 after 2 retries$") as caught:
        _run(send)
    assert isinstance(caught.value.__cause__, Answered)
    assert len(send.deadlines) == 3


@pytest.mark.parametrize("failure", [Answered(400), ValueError("not an answer")], ids=["400", "other"])
def test_a_failure_the_policy_does_not_retry_goes_to_fail_at_once(failure: Exception) -> None:
    send = Sender(failure, "never asked for")
    with pytest.raises(ModelError, match=r"after 0 retries$"):
        _run(send)
    assert len(send.deadlines) == 1


def test_the_first_deadline_counts_from_begun_and_each_retry_from_its_start() -> None:
    send = Sender(Answered(503), "the reply")
    _run(send, timeout=5.0, begun=-100.0)
    first, second = send.deadlines
    assert first == -95.0
    assert second > first + 5.0


def test_an_attempt_past_its_deadline_goes_to_fail_as_a_timeout() -> None:
    async def never(deadline: float) -> str:
        await asyncio.sleep(60)
        return "never"

    async def run() -> tuple[str, float]:
        return await QUICK.run(never, timeout=0.05, refused=_refused, fail=_fail)

    with pytest.raises(ModelError, match=r"after 0 retries$") as caught:
        asyncio.run(run())
    assert isinstance(caught.value.__cause__, TimeoutError)


@pytest.mark.parametrize(
    ("reason", "status", "transient"),
    [
        ("timeout", None, True),
        ("connection", None, True),
        ("status", None, True),  # a stream's error event, with no status
        ("status", 408, True),
        ("status", 409, True),
        ("status", 425, True),
        ("status", 429, True),
        ("status", 500, True),
        ("status", 503, True),
        ("status", 529, True),
        ("status", 400, False),
        ("status", 401, False),
        ("status", 403, False),
        ("status", 404, False),
        ("status", 422, False),
        ("malformed", None, False),
        ("too-large", None, False),
        ("unbound", None, False),
        ("no-reply", None, False),
        ("not-recorded", None, False),
    ],
)
def test_a_model_error_is_transient_when_the_same_call_may_succeed_later(
    reason: str, status: int | None, transient: bool
) -> None:
    """What a background task retries (docs/agent-protocol.md, "Background tasks")."""
    assert ModelError("the call failed", reason=reason, http_status=status).transient is transient
