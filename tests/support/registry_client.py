"""What the client's tests share: a retry policy quick enough for tests, and
inputs that chat/with_rules of the released repository accepts."""

from __future__ import annotations

from registry.client import RetryPolicy

QUICK_RETRIES = RetryPolicy(attempts=3, backoff=0.01, max_backoff=0.05)
RULES_INPUTS = {"question": "Why?", "rules": ["Cite sources", "Be kind"]}
