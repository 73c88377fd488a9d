"""``Retry-After`` as RFC 9110 (section 10.2.3) defines it, read in one place
for every HTTP caller: the registry client's retries and the executor's model
calls.

    Retry-After   = HTTP-date / delay-seconds
    delay-seconds = 1*DIGIT

Anything else (``1.5``, ``-1``, ``soon``, digits of another script) is no
Retry-After at all: the caller falls back to its own backoff. A date in the
past asks for no wait; a number or date too far off to mean anything is
capped at ``MAX_RETRY_AFTER``. What a caller honours of it is its own policy.
"""

from __future__ import annotations

import email.utils
import re
import time
from datetime import timezone

MAX_RETRY_AFTER = 1e9
"""The longest wait a ``Retry-After`` is read as (about 31 years)."""
_MAX_DIGITS = 9
_MAX_DATE_CHARS = 64
"""An HTTP-date has at most 33 characters (rfc850-date); a longer value is not one."""
_DELAY_SECONDS = re.compile(r"[0-9]+")
"""ASCII digits only: ``str.isdigit`` also takes "²" and "٣"."""


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """The seconds ``value`` asks to wait, from 0 to ``MAX_RETRY_AFTER``, or
    None when it is absent or not a Retry-After value. ``now`` is when the
    answer came, as a Unix time (default: the current time)."""
    if value is None:
        return None
    text = value.strip(" \t")
    if _DELAY_SECONDS.fullmatch(text):
        # Measured as text: int() refuses thousands of digits, and needs none of them.
        return float(int(text)) if len(text) <= _MAX_DIGITS else MAX_RETRY_AFTER
    if not text or len(text) > _MAX_DATE_CHARS or not text[0].isalpha():
        return None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # asctime-date has no zone: HTTP dates are in GMT
        when = when.replace(tzinfo=timezone.utc)
    seconds = when.timestamp() - (time.time() if now is None else now)
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)
