"""Synthetic prompt libraries for the benchmarks, as real git repositories.

``small_library`` is the bundled ``library/`` committed three times with a
release tag on each (v1.0.0, v1.1.0, v1.2.0), so ``^1.0`` resolves to v1.2.0.

``large_library`` is ``usecases`` x ``per_usecase`` generated agents (5,000
by default) with ``tags`` releases (100 by default); each release after the
first edits ``changed_per_tag`` agents, the way a real library moves: most
files are the same blob in every tag. It is written with ``git fast-import``,
which builds 100 commits of 5,000 files in a second or two.

Run by hand to keep a copy:  .venv/bin/python bench/make_library.py DIR
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

AGENTS_ROOT = "ai_gateway/agents"
BUNDLED_LIBRARY = Path(__file__).resolve().parent.parent / "library"
_IDENTITY = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
}


def _git(repo: Path, *args: str, stdin: bytes | None = None) -> None:
    import os

    subprocess.run(
        ["git", "-C", str(repo), *args],
        input=stdin,
        check=True,
        capture_output=True,
        env={**os.environ, **_IDENTITY},
    )


def small_library(repo: Path) -> Path:
    """The bundled library at three release tags; returns ``repo``."""
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    shutil.copytree(BUNDLED_LIBRARY / "ai_gateway", repo / "ai_gateway")
    for minor in range(3):
        marker = repo / "RELEASE"
        marker.write_text(f"1.{minor}.0\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"release 1.{minor}.0")
        _git(repo, "tag", "-a", f"v1.{minor}.0", "-m", f"v1.{minor}.0")
    return repo


def agent_path(usecase: int, name: int) -> str:
    return f"{AGENTS_ROOT}/usecase_{usecase:03d}/agent_{name:03d}.yml"


def agent_text(usecase: int, name: int, revision: int) -> str:
    """A valid definition of ordinary size (about 1.3 KB), different per revision."""
    return f"""\
name: Synthetic agent {usecase}/{name} (revision {revision})
description: Generated for the serving benchmark; revision {revision}.
model:
  name: bench-model-{revision % 3}
  params:
    temperature: 0.{revision % 10}
    max_tokens: {1000 + revision}
inputs:
  type: object
  required: [question]
  additionalProperties: false
  properties:
    question:
      type: string
      maxLength: 4000
    context:
      type: array
      items: {{type: string}}
      maxItems: 20
prompt_templates:
  system: |
    You are assistant {usecase}.{name}, revision {revision}. Answer the question
    in plain language, cite the context item you relied on by number, and say
    so when the context does not contain the answer. Keep the answer under two
    hundred words unless the question asks for a list or for code.
    {{% if context is defined and context %}}
    Context:
    {{% for item in context %}}
    [{{{{ loop.index }}}}] {{{{ item }}}}
    {{% endfor %}}
    {{% endif %}}
  user: |
    {{{{ question }}}}
"""


def large_library(
    repo: Path, *, usecases: int = 50, per_usecase: int = 100, tags: int = 100, changed_per_tag: int = 50
) -> Path:
    """``usecases * per_usecase`` agents at ``tags`` release tags v1.0.0 ... v1.<tags-1>.0."""
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    stream: list[bytes] = []

    def data(text: str) -> None:
        payload = text.encode()
        stream.append(b"data %d\n" % len(payload) + payload + b"\n")

    total = usecases * per_usecase
    for release in range(tags):
        stream.append(b"commit refs/heads/main\n")
        stream.append(b"mark :%d\n" % (release + 1))
        stream.append(b"committer bench <bench@example.invalid> %d +0000\n" % (1_700_000_000 + release * 3600))
        data(f"release 1.{release}.0\n")
        if release == 0:
            edited = [(u, n) for u in range(usecases) for n in range(per_usecase)]
        else:
            start = (release * changed_per_tag) % total
            edited = [divmod((start + i) % total, per_usecase) for i in range(changed_per_tag)]
        for usecase, name in edited:
            stream.append(f"M 100644 inline {agent_path(usecase, name)}\n".encode())
            data(agent_text(usecase, name, release))
        stream.append(b"\n")
        stream.append(f"tag v1.{release}.0\n".encode())
        stream.append(b"from :%d\n" % (release + 1))
        stream.append(b"tagger bench <bench@example.invalid> %d +0000\n" % (1_700_000_000 + release * 3600))
        data(f"v1.{release}.0\n")
    _git(repo, "fast-import", "--quiet", stdin=b"".join(stream))
    _git(repo, "checkout", "-q", "main")
    return repo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--small", action="store_true", help="the bundled library at three tags instead")
    args = parser.parse_args()
    (small_library if args.small else large_library)(args.directory)
    print(args.directory)


if __name__ == "__main__":
    main()
