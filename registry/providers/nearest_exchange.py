"""Why a replay has no reply for a request: the recorded request of the
same case nearest to it, and how the two differ, in words a reader can
act on (``the messages differ at message 3 (user): recorded '...',
asked '...'``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from registry.models import close_matches, did_you_mean, shorten
from registry.providers.exchanges import Exchange, keyed_request

_SNIPPET = 40
_SCALAR_PARTS = ("model", "provider", "tool_choice", "response_format")


def not_recorded(
    source: str, case: str | None, agent: str | None, asked: Mapping[str, Any], key: str, exchanges: Sequence[Exchange]
) -> str:
    """One line saying that ``source`` holds no reply to the request whose
    keyed parts are ``asked`` (of ``key``), for ``case``, and why."""
    who = f"case {case!r}" if case is not None else "a call outside any eval case"
    head = f"{source} has no recorded reply for {who} (agent {agent or 'unnamed'})"
    same_case = [exchange for exchange in exchanges if exchange.case == case]
    if not same_case:
        return head + ": " + _no_such_case(case, exchanges, key)
    same_agent = [exchange for exchange in same_case if exchange.agent == agent]
    found = nearest(same_agent or same_case, asked)
    if found is None:  # only an identical request could be nearest with no difference
        return head
    exchange, differences = found
    text = f"{head}: {differences[0]}"
    if len(differences) > 1:
        text += f"; {' and '.join(_part(d) for d in differences[1:])} differ too"
    return f"{text} (the nearest recorded request is at {exchange.where})"


def nearest(candidates: Sequence[Exchange], asked: Mapping[str, Any]) -> tuple[Exchange, list[str]] | None:
    """The candidate whose request differs from ``asked`` in the fewest parts
    (then in the latest message), and those differences; None without any."""
    best: tuple[tuple[int, int], Exchange, list[str]] | None = None
    for exchange in candidates:
        recorded = keyed_request(exchange.request)
        found = differences(recorded, asked)
        if not found:
            continue
        score = (len(found), -_same_messages(recorded.get("messages", []), asked.get("messages", [])))
        if best is None or score < best[0]:
            best = (score, exchange, found)
    return (best[1], best[2]) if best is not None else None


def differences(recorded: Mapping[str, Any], asked: Mapping[str, Any]) -> list[str]:
    """How ``asked`` differs from ``recorded`` (keyed parts of two
    requests), one sentence per part, the messages first."""
    found: list[str] = []
    messages = _messages_difference(recorded.get("messages", []), asked.get("messages", []))
    if messages is not None:
        found.append(messages)
    for part in _SCALAR_PARTS:
        if recorded.get(part) != asked.get(part):
            found.append(f"the {part} differs: recorded {_shown(recorded.get(part))}, asked {_shown(asked.get(part))}")
    tools = _tools_difference(recorded.get("tools", []), asked.get("tools", []))
    if tools is not None:
        found.append(tools)
    params = _params_difference(recorded.get("params", {}), asked.get("params", {}))
    if params is not None:
        found.append(params)
    return found


def _messages_difference(recorded: list[Any], asked: list[Any]) -> str | None:
    same = _same_messages(recorded, asked)
    if same == len(recorded) == len(asked):
        return None
    if same == min(len(recorded), len(asked)):
        return f"the messages differ in number: {len(recorded)} recorded, {len(asked)} asked, the first {same} the same"
    then, now = recorded[same], asked[same]
    where = f"the messages differ at message {same + 1}"
    if then.get("role") != now.get("role"):
        return f"{where}: recorded a {_shown(then.get('role'))} message, asked a {_shown(now.get('role'))} one"
    where += f" ({now.get('role')})"
    if then.get("content") != now.get("content"):
        before, after = _text(then.get("content")), _text(now.get("content"))
        start = _first_difference(before, after)
        # Where they part, with a little of what comes before for context.
        start = max(0, start - 10)
        return f"{where}: recorded {_excerpt(before, start)}, asked {_excerpt(after, start)}"
    keys = sorted(key for key in set(then) | set(now) if then.get(key) != now.get(key))
    return f"{where}: its {', '.join(keys)} differ"


def _tools_difference(recorded: list[Any], asked: list[Any]) -> str | None:
    if recorded == asked:
        return None
    before, after = _tool_names(recorded), _tool_names(asked)
    added = [name for name in after if name not in before]
    removed = [name for name in before if name not in after]
    if added or removed:
        changes = [f"{name!r} added" for name in added] + [f"{name!r} gone" for name in removed]
        return f"the tools differ: {', '.join(changes)}"
    changed = [name for name, tool in zip(before, recorded, strict=True) if tool not in asked]
    if changed:
        return f"the tools differ: {', '.join(repr(name) for name in changed)} changed"
    return "the tools differ in order"


def _params_difference(recorded: Mapping[str, Any], asked: Mapping[str, Any]) -> str | None:
    keys = sorted(key for key in set(recorded) | set(asked) if recorded.get(key) != asked.get(key))
    if not keys:
        return None
    shown = [f"{key} (recorded {_shown(recorded.get(key))}, asked {_shown(asked.get(key))})" for key in keys[:3]]
    more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
    return f"the params differ: {', '.join(shown)}{more}"


def _no_such_case(case: str | None, exchanges: Sequence[Exchange], key: str) -> str:
    cases = sorted({exchange.case for exchange in exchanges if exchange.case is not None})
    elsewhere = sorted({str(e.case) for e in exchanges if e.key == key and e.case != case})
    if elsewhere:
        return f"it records no exchange of this case, and this very request for case {elsewhere[0]!r}"
    if case is not None:
        hint = did_you_mean(close_matches(case, cases))
        if hint:
            return f"it records no exchange of this case; {hint}"
    listed = ", ".join(shorten(name, 40) for name in cases[:5]) + (", ..." if len(cases) > 5 else "")
    return f"it records no exchange of this case (its cases: {listed or 'none'})"


def _same_messages(recorded: list[Any], asked: list[Any]) -> int:
    """How many messages, from the first, the two lists have the same."""
    same = 0
    for then, now in zip(recorded, asked, strict=False):
        if then != now:
            break
        same += 1
    return same


def _tool_names(tools: list[Any]) -> list[str]:
    return [str((tool.get("function") or {}).get("name", "?")) for tool in tools]


def _first_difference(before: str, after: str) -> int:
    for index, (a, b) in enumerate(zip(before, after, strict=False)):
        if a != b:
            return index
    return min(len(before), len(after))


def _excerpt(text: str, start: int) -> str:
    piece = text[start : start + _SNIPPET]
    if not piece:
        return "nothing more"
    return ("..." if start else "") + repr(piece) + ("..." if start + _SNIPPET < len(text) else "")


def _text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, sort_keys=True)


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    return shorten(json.dumps(value, sort_keys=True) if not isinstance(value, str) else repr(value), 60)


def _part(sentence: str) -> str:
    """``the tools`` of ``the tools differ: ...``: the part a difference is about."""
    return sentence.split(" differ", 1)[0]
