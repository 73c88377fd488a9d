"""Reading a server-sent event stream as a client does, line by line: the
events (``id``, ``event``, ``data``) and the comments (heartbeats) in the
order they came (``parse``), and a client that follows one stream in a
thread of its own (``Subscriber``)."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx

WAIT_SECONDS = 60
"""How long a client waits for what should come (a bound, not a measure)."""


@dataclass(frozen=True)
class Message:
    """One event of the stream."""

    id: str | None
    event: str | None
    data: str

    def json(self) -> Any:
        return json.loads(self.data)


@dataclass(frozen=True)
class Comment:
    """A comment line (``: text``): a heartbeat."""

    text: str


def parse(lines: Iterable[str]) -> Iterator[Message | Comment]:
    """The events and comments of ``lines`` (the stream split at its line ends)."""
    fields: dict[str, list[str]] = {}
    for line in lines:
        if not line:
            if fields:
                yield Message(_last(fields, "id"), _last(fields, "event"), "\n".join(fields.get("data", [])))
            fields = {}
        elif line.startswith(":"):
            yield Comment(line[1:].strip())
        else:
            name, _, value = line.partition(":")
            fields.setdefault(name, []).append(value[1:] if value.startswith(" ") else value)


def _last(fields: dict[str, list[str]], name: str) -> str | None:
    values = fields.get(name)
    return values[-1] if values else None


class Subscriber:
    """A client reading one stream in a thread of its own (httpx, streaming):
    what it read is taken with ``next``, ``until`` and ``rest`` as it comes.
    ``close`` ends the reading at the next line that comes (a heartbeat, at the latest)."""

    def __init__(self, url: str, *, headers: dict[str, str] | None = None) -> None:
        self.status: int | None = None
        self.body = ""
        """The answer's body, when it was not a stream (an error)."""
        self.error: httpx.HTTPError | None = None
        """Why the stream ended, when the connection broke (a server stopping)."""
        self._read: queue.Queue[Message | Comment | None] = queue.Queue()
        self._connected = threading.Event()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._follow, args=(url, headers or {}), daemon=True)
        self._thread.start()
        assert self._connected.wait(WAIT_SECONDS), f"no answer from {url}"

    def _follow(self, url: str, headers: dict[str, str]) -> None:
        try:
            with httpx.stream("GET", url, headers=headers, timeout=httpx.Timeout(10, read=WAIT_SECONDS)) as response:
                self.status = response.status_code
                if not response.headers.get("content-type", "").startswith("text/event-stream"):
                    self.body = response.read().decode()
                    return
                self._connected.set()
                for item in parse(response.iter_lines()):
                    if self._closing.is_set():
                        return
                    self._read.put(item)
        except httpx.HTTPError as exc:
            self.error = exc
        finally:
            self._connected.set()
            self._read.put(None)

    def close(self) -> None:
        self._closing.set()
        self._thread.join(WAIT_SECONDS)
        assert not self._thread.is_alive(), "the stream brought nothing more to end on"

    def next(self) -> Message | Comment | None:
        """What came next; None once the stream has ended."""
        return self._read.get(timeout=WAIT_SECONDS)

    def until(self, wanted: Callable[[Message], bool]) -> list[Message]:
        """The events up to the first that is ``wanted``, that one included."""
        got: list[Message] = []
        while (item := self.next()) is not None:
            if isinstance(item, Message):
                got.append(item)
                if wanted(item):
                    return got
        raise AssertionError(f"the stream ended without the event wanted, after {[m.event for m in got]}")

    def rest(self) -> list[Message]:
        """The events until the stream ends."""
        got: list[Message] = []
        while (item := self.next()) is not None:
            if isinstance(item, Message):
                got.append(item)
        self._thread.join(WAIT_SECONDS)
        return got
