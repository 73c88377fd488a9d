"""Every tool the example library's agents declare that its eval cases
call, in one mapping: what ``prompt-registry eval --example`` binds when it
is given no ``--tools`` (docs/evals.md, "The example library's evals").

    prompt-registry run assistant/react_text --example --model URL \\
      --tools library.tools.example:TOOLS --input pipeline_id=1234 --input question="Why?"
"""

from __future__ import annotations

from . import ci_pipeline, duo_chat, issue_tracker

TOOLS = {**ci_pipeline.TOOLS, **duo_chat.TOOLS, **issue_tracker.TOOLS}
