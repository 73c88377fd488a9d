"""The render limits and the budget one render spends against them.

``RenderLimits`` are part of the rendering contract, as ``RENDER_SEMANTICS``
is: client and server use the same, so that they fail alike. A ``Budget`` is
what one render has spent (loop iterations and calls, characters of output,
the clock) and refuses to spend more; the render in progress finds its own
in ``current_budget``. ``pausing`` lets a server slice a long render.

The budget reads the clock through this module's ``time``, for the
deadline, for pauses and for every loop item (tests replace it to make a
render run long).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jinja2.exceptions import SecurityError

from registry.rendering.jinja_internals import TemplateModule

if TYPE_CHECKING:
    from registry.rendering.modules import GuardedTemplate

# Changing anything that alters rendered bytes must change this string: it is
# folded into every digest, so equal digests keep meaning equal output.
RENDER_SEMANTICS = "prompt-registry/render/v3"
# v2: ~ keeps Markup under autoescape, as in Jinja.
# v3: placeholders after Jinja ({question}) are filled from the inputs and listed.


@dataclass(frozen=True)
class RenderLimits:
    """Per-render bounds. Part of the rendering contract: client and server
    use the same defaults so that they fail alike."""

    max_output_bytes: int = 1024 * 1024
    max_iterations: int = 100_000
    max_seconds: float = 2.0
    """For validating the inputs and rendering them, together."""
    max_input_values: int = 10_000
    """Values the inputs may hold (every array, object, string, number,
    boolean and null): validating them costs time in proportion."""
    max_input_chars: int = 1024 * 1024
    """Characters of text (strings and keys) the inputs may hold: all that a
    render request of the default 1 MiB can carry."""

    @property
    def max_value_chars(self) -> int:
        """The largest string or list any single operation may produce."""
        return self.max_output_bytes

    @property
    def max_work_chars(self) -> int:
        """All output produced while rendering, buffered or not."""
        return 4 * self.max_output_bytes


Pause = Callable[[float], None]
"""Called now and then during a long render with the render's deadline (a
``time.monotonic()`` value); see ``pausing``."""

_pause: ContextVar[tuple[Pause, float] | None] = ContextVar("registry_render_pause", default=None)


@contextmanager
def pausing(pause: Pause, *, every: float) -> Iterator[None]:
    """Renders started in this context call ``pause`` once they have run
    ``every`` seconds, and again every ``every`` seconds after it.

    A server whose requests share a thread (greenlets) uses it to let other
    requests go between the slices of a long render; what ``pause`` does is
    the server's business. The check rides on the clock reads the render
    guard makes anyway, so a render that never runs long pays nothing.
    """
    token = _pause.set((pause, every))
    try:
        yield
    finally:
        _pause.reset(token)


class Budget:
    """What one render has spent, against its ``RenderLimits``."""

    __slots__ = (
        "limits",
        "iterations",
        "chars",
        "deadline",
        "checkpoint",
        "pause",
        "max_iterations",
        "max_chars",
        "modules",
    )

    # Output does not read the clock: without loops, calls, filters,
    # includes or large operators (which all read it) a template prints at
    # most its own text.

    def __init__(self, limits: RenderLimits, deadline: float | None = None) -> None:
        self.limits = limits
        self.iterations = 0
        self.chars = 0
        now = time.monotonic()
        self.deadline = now + limits.max_seconds if deadline is None else deadline
        self.pause = _pause.get()
        # The next time the clock matters: the deadline, or the next pause before it.
        self.checkpoint = self.deadline if self.pause is None else min(self.deadline, now + self.pause[1])
        self.max_iterations = limits.max_iterations
        self.max_chars = limits.max_work_chars
        self.modules: dict[GuardedTemplate, TemplateModule] = {}  # imported partials, for this render only

    def spend_iteration(self) -> None:
        """One loop iteration or call, and a look at the clock."""
        self.iterations += 1
        if self.iterations > self.max_iterations:
            raise SecurityError(f"rendering took more than {self.max_iterations} loop iterations and calls")
        self.check_time()

    def charge(self, chars: int, iterations: int) -> None:
        """Spend at once what building a kept module spent."""
        self.chars += chars
        self.iterations += iterations
        if self.chars > self.max_chars:
            raise SecurityError(f"rendering produced more than {self.max_chars} characters")
        if self.iterations > self.max_iterations:
            raise SecurityError(f"rendering took more than {self.max_iterations} loop iterations and calls")

    def counted(self, piece: str) -> str:
        """``piece``, once counted: generated code yields top-level output
        through this, and buffers append through it."""
        self.chars += len(piece)
        if self.chars > self.max_chars:
            raise SecurityError(f"rendering produced more than {self.max_chars} characters")
        return piece

    def check_time(self) -> None:
        """Refuse a render past its deadline; pause it when a pause is due."""
        # Counting bounds how much a template does, not how slowly: a loop of
        # expensive filters stays within every count. The clock bounds the rest.
        now = time.monotonic()
        if now <= self.checkpoint:
            return
        if now > self.deadline:
            raise SecurityError(f"rendering took longer than {self.limits.max_seconds} seconds")
        assert self.pause is not None  # the checkpoint is before the deadline only to pause
        pause, every = self.pause
        pause(self.deadline)
        self.checkpoint = min(self.deadline, time.monotonic() + every)


current_budget: ContextVar[Budget | None] = ContextVar("registry_render_budget", default=None)
"""The budget of the render in progress: set by whoever starts one."""


def active_budget() -> Budget:
    """The render's budget, or default bounds of its own."""
    # Outside render_messages (Jinja folding constants at compile time) each
    # guarded call gets default bounds of its own.
    return current_budget.get() or Budget(RenderLimits())


def counted(iterable: Iterable[Any]) -> Iterable[Any]:
    """``iterable``'s items, each spending one iteration of the budget."""
    budget = active_budget()
    for item in iterable:
        # budget.spend_iteration(), inlined: this runs for every item of every loop.
        if budget.iterations >= budget.max_iterations or time.monotonic() > budget.checkpoint:
            budget.spend_iteration()  # raises naming the bound reached, or pauses
        else:
            budget.iterations += 1
        yield item
