"""How long a test's scripted peer holds what the code under test must not
wait for. The project measures speed in bench/ and asserts no durations:
a test shows that something was not waited for by making it take longer
than any test runs, so that the only way to pass is not to wait."""

from __future__ import annotations

LATE = 60.0
"""Seconds before a reply, an exit or an answer that the code under test
must give up on first (its own bounds are a few seconds at most). Long
enough that a passing test cannot have waited for it, even on a loaded
machine; short enough that code which does wait gets it within a minute and
fails the test on what it got (a reply instead of a timeout), rather than
hanging the run."""

RUN_LIMIT = 2.0
"""Seconds a test gives a whole run (``limits.timeout``, ``run_timeout``)
that must end on its limit while a model call is under way. The limit starts
before the release is read and the prompt rendered, so it must outlast them
on a loaded machine (0.3 s did not, once, in CI: the limit passed before the
call began), yet stay far below ``LATE``."""
