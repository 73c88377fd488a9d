"""A real ``prompt-registry serve`` process for tests: started on a free port,
stopped by its PID (SIGTERM, then SIGKILL), restartable on the same port."""

from __future__ import annotations

import contextlib
import http.client
import io
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import psutil

from tests.support.ports import free_port

CLI = str(Path(sys.executable).parent / "prompt-registry")
REPOSITORY = Path(__file__).resolve().parents[2]


def clean_environment() -> dict[str, str]:
    """The test process's environment without any REGISTRY_* setting."""
    return {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}


_Process = TypeVar("_Process", bound="RegistryProcess")


class RegistryProcess:
    """``prompt-registry serve *args`` (or ``command``, listening on ``port``)."""

    def __init__(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        command: list[str] | None = None,
        port: int | None = None,
        cwd: Path = REPOSITORY,
    ) -> None:
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self._command = command or [CLI, "serve", "--port", str(self.port), "--workers", "1", *args]
        self._env = env or clean_environment()
        self._cwd = cwd
        self._process: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._chunks: list[bytes] = []
        self.output = ""
        """What the server printed, once it has stopped."""

    def start(self: _Process) -> _Process:
        self._process = subprocess.Popen(
            self._command, env=self._env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=self._cwd
        )
        # Drained as it comes: a server whose pipe is full (an access log
        # line per request) blocks on its next write.
        self._chunks = []
        self._reader = threading.Thread(target=self._drain, args=(self._process,), daemon=True)
        self._reader.start()
        # A server starts in a few seconds; a machine loaded by a whole test
        # run (imports of DBOS, the A2A SDK and uvicorn in every worker) may take longer.
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(self.base + "/healthz", timeout=1).close()
                return self
            except OSError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise AssertionError(f"server did not start: {self.output}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            if self._reader is not None:
                self._reader.join(timeout=10)
            self.output += b"".join(self._chunks).decode(errors="replace")
            if process.stdout:
                process.stdout.close()

    def master(self) -> psutil.Process:
        """The process started (for ``serve`` and ``agents serve``, gunicorn's
        master). Found by PID, not by walking this process's children: a
        zombie left by another test in the same worker would stop that walk."""
        assert self._process is not None, "the server is not running"
        return psutil.Process(self._process.pid)

    def _drain(self, process: subprocess.Popen[bytes]) -> None:
        stdout = process.stdout
        assert isinstance(stdout, io.BufferedReader)
        for chunk in iter(lambda: stdout.read1(65536), b""):
            self._chunks.append(chunk)

    def __enter__(self: _Process) -> _Process:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def live_workers(master: psutil.Process) -> list[psutil.Process]:
    """A gunicorn master's worker processes that are alive (not zombies)."""
    workers = []
    for worker in master.children():
        try:
            if worker.status() != psutil.STATUS_ZOMBIE:
                workers.append(worker)
        except psutil.NoSuchProcess:
            pass
    return workers


def established_connections(worker: psutil.Process, port: int) -> int:
    """Clients' connections to ``port`` that ``worker`` holds open."""
    try:
        held = worker.net_connections(kind="tcp")
    except psutil.NoSuchProcess:
        return 0
    return sum(1 for c in held if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == port)


@contextlib.contextmanager
def keep_alive_load(port: int, path: str, *, clients: int) -> Iterator[list[int]]:
    """``clients`` threads asking for ``path`` over kept-alive connections,
    reconnecting whenever a connection is closed or lost; yields the count of
    answers so far, one slot per client (bounded by the block)."""
    answered = [0] * clients
    stop = threading.Event()

    def run(slot: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        while not stop.is_set():
            try:
                connection.request("GET", path)
                response = connection.getresponse()
                response.read()
                answered[slot] += 1
            except (OSError, http.client.HTTPException):
                connection.close()
                time.sleep(0.01)
        connection.close()

    threads = [threading.Thread(target=run, args=(slot,)) for slot in range(clients)]
    for thread in threads:
        thread.start()
    try:
        yield answered
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
