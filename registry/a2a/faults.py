"""The service's errors as A2A's, translated in one place.

=======================================  ===================================
``registry.errors``                      ``a2a.utils.errors``
=======================================  ===================================
``NotFound`` (a task, or another         ``TaskNotFoundError``
owner's; a push configuration)
``InvalidState``                         ``TaskNotCancelableError`` for a
                                         cancel, else
                                         ``UnsupportedOperationError``
``InvalidInputs``, ``InvalidRequest``    ``InvalidParamsError``, each issue a
                                         field violation
``PayloadTooLarge``                      ``InvalidRequestError``
anything else (the store or the          ``InternalError``, its one-line
registry away)                           message
=======================================  ===================================
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any, TypeVar

from a2a.utils.errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from registry.errors import InvalidInputs, InvalidRequest, InvalidState, NotFound, PayloadTooLarge, RegistryError

T = TypeVar("T")


def translated(error: RegistryError, *, cancelling: bool = False) -> A2AError:
    """The A2A error a service error is answered with."""
    if isinstance(error, NotFound):
        return TaskNotFoundError(message=error.detail)
    if isinstance(error, InvalidState):
        return TaskNotCancelableError(message=error.detail) if cancelling else UnsupportedOperationError(error.detail)
    if isinstance(error, InvalidInputs):
        violations = [{"field": issue.path or "message", "message": issue.message} for issue in error.errors]
        return InvalidParamsError(message=error.detail, data={"errors": violations} if violations else None)
    if isinstance(error, InvalidRequest):
        path = error.extensions.get("path")
        data = {"errors": [{"field": str(path), "message": error.detail}]} if path else None
        return InvalidParamsError(message=error.detail, data=data)
    if isinstance(error, PayloadTooLarge):
        return InvalidRequestError(message=error.detail)
    return InternalError(message=error.detail)


async def call(function: Callable[..., T], *args: Any, cancelling: bool = False, **kwargs: Any) -> T:
    """``function(*args, **kwargs)`` in a worker thread (the service's calls
    wait on the database and the registry), its errors translated."""
    try:
        return await asyncio.to_thread(functools.partial(function, *args, **kwargs))
    except RegistryError as exc:
        raise translated(exc, cancelling=cancelling) from exc
