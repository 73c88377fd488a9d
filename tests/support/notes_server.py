"""A real HTTP server standing in for a forge's API, where the CI templates
of ``docs/ci/`` post the evaluation's note (GitLab's
``POST /api/v4/projects/:id/merge_requests/:iid/notes``).

Started as its own process on a free port and stopped by PID
(``ScriptedServerProcess``). Each ``POST`` takes the next reply of the
script, ``{"status": 201}`` by default (``{"status": 401}``: a token it
refuses), and is logged as one JSON line: the path, the ``PRIVATE-TOKEN``
header and the form fields of its body.

    python -m tests.support.notes_server --port 8000 --script replies.json --log requests.jsonl
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Any

from tests.support.scripted_process import Script, ScriptedHandler, ScriptedServerProcess, script_arguments, serve


class NotesHandler(ScriptedHandler):
    log_path: Path

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        form = urllib.parse.parse_qs(self.rfile.read(length).decode("utf-8"), keep_blank_values=True)
        entry = {"path": self.path, "token": self.headers.get("PRIVATE-TOKEN"), "body": form}
        with self.log_path.open("a", encoding="utf-8") as log:
            log.write(json.dumps(entry) + "\n")
        reply = self.script.next_reply("") or {}
        status = int(reply.get("status", 201))
        self._send(status, json.dumps({"id": 1} if status < 400 else {"message": "401 Unauthorized"}).encode())


def notes_server(directory: Path, replies: list[dict[str, Any]] | None = None) -> ScriptedServerProcess:
    """The server, not started yet (``with notes_server(...) as server``)."""
    return ScriptedServerProcess(
        "tests.support.notes_server",
        replies if replies is not None else [{"status": 201, "repeat": True}],
        directory,
        script="notes-script.json",
        log="notes.jsonl",
        what="the notes server",
    )


def main() -> None:
    args = script_arguments(__doc__.split("\n")[0]).parse_args()
    handler = type("Handler", (NotesHandler,), {"script": Script.from_file(args.script), "log_path": args.log})
    serve(args.port, handler)


if __name__ == "__main__":
    main()
