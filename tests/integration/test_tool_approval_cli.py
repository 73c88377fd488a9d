"""``prompt-registry run`` (the installed CLI in a subprocess), which has no
one to ask, never makes a call that needs a person's approval."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import LibraryRepo
from tests.support.cli import run as run_cli
from tests.support.refunds_agent import LOOKUP, NEEDS_APPROVAL, REFUND, REFUNDS


def test_prompt_registry_run_never_makes_a_call_that_needs_approval(repo: LibraryRepo, tmp_path: Path) -> None:
    repo.release("v1.0.0", {"shop/refunds.yml": REFUNDS})
    work = tmp_path / "work"
    work.mkdir()
    (work / "shop_tools.py").write_text(
        "from pathlib import Path\n"
        "def refund(order):\n"
        "    Path('refunded').write_text(order)\n"
        "    return 'refunded'\n"
        "TOOLS = {'refund': refund, 'lookup': lambda order: 'paid twice'}\n",
        encoding="utf-8",
    )
    (work / "script.yml").write_text(
        json.dumps([{"content": LOOKUP}, {"when": "paid twice", "content": REFUND}, {"content": "Final Answer: ok"}]),
        encoding="utf-8",
    )
    result = run_cli(
        "run", "shop/refunds", "--repo", str(repo.path), "--input", "question=refund A-1",
        "--model", "scripted:script.yml", "--tools", "shop_tools:TOOLS", "--format", "json", cwd=work,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    answer = json.loads(result.stdout)
    assert (answer["outcome"], answer["output"], answer["error"]) == ("blocked", None, NEEDS_APPROVAL)
    assert not (work / "refunded").exists()
