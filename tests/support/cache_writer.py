"""One of several processes filling the same reply cache at once
(tests/integration/test_chatcache_processes.py).

Each round opens a new ``CachingChatModel`` over ``--directory`` and asks
one request ``--asks`` times in a row: the n-th asking is the cache's n-th
entry of that request, so that the processes go through the same entries
in the same order, each reading what the other has just written, or is
writing, and writing what the other writes. Every round asks another
request, and starts when every process (``--processes``) is ready to, so
that they run neck and neck. A last round asks the first round's request
again, and reads back what was stored. The model behind it is the
scripted one, whose every reply is ``--size`` times the process's
``--name`` (one letter): a reply read half written would show. Prints a
JSON summary: replies from the cache and from the model, those that were
not whole, and the cache's warnings (an entry it could not read or write).

    python -m tests.support.cache_writer --directory DIR --name a --processes 2 --rounds 4 --asks 50
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
from pathlib import Path

from registry.executor.scripted import ScriptedModel
from registry.providers.chat import ChatReply, ChatRequest
from registry.providers.chatcache import CachingChatModel


class Counted(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def is_whole(reply: ChatReply, size: int) -> bool:
    """Whether ``reply`` is one of the writers' replies, whole."""
    letter = reply.content[:1]
    return letter.isalpha() and reply.content == letter * size


async def fill(directory: Path, name: str, processes: int, rounds: int, asks: int, size: int) -> dict[str, int]:
    summary = {"cache": 0, "model": 0, "not_whole": 0}
    for step, number in enumerate([*range(rounds), 0]):
        _wait_for_everyone(directory.parent / "ready", step, name, processes)
        inner = ScriptedModel.from_replies([{"content": name * size, "repeat": True}], source=name)
        model = CachingChatModel(inner, directory)
        request = ChatRequest(model="test-model", messages=({"role": "user", "content": f"question {number}"},))
        for _ in range(asks):
            reply = await model.complete(request)
            summary["cache" if reply.origin == "cache" else "model"] += 1
            summary["not_whole"] += not is_whole(reply, size)
        await model.aclose()
    return summary


def _wait_for_everyone(place: Path, step: int, name: str, processes: int) -> None:
    """Return once ``processes`` processes have come to ``step``."""
    place.mkdir(exist_ok=True)
    (place / f"{step}.{name}").touch()
    deadline = time.monotonic() + 60
    while len(list(place.glob(f"{step}.*"))) < processes:
        if time.monotonic() > deadline:
            raise SystemExit(f"the other processes did not come to {step}")
        time.sleep(0.001)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--directory", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--asks", type=int, default=50)
    parser.add_argument("--size", type=int, default=1_000_000)
    args = parser.parse_args()
    warnings = Counted()
    logging.getLogger("registry.providers.chatcache").addHandler(warnings)
    summary = asyncio.run(fill(Path(args.directory), args.name, args.processes, args.rounds, args.asks, args.size))
    print(json.dumps({**summary, "warnings": warnings.messages}))


if __name__ == "__main__":
    main()
