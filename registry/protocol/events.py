"""The kinds of entry in a task's event log, and what each one's data holds.

A task's log (``task_events``, numbered 1, 2, 3... per task) is what live
subscribers receive: the Agent Protocol's SSE extension and A2A's streams
both read it, and the UI's task page follows it. Whoever changes a task
appends the entry in the same breath (``TaskStore.append_events``), or in
the very transaction of the change (``TaskStore.create_task``,
``begin_step``, ``finish_step``, ``set_task_status``); readers resume after
the last number they saw (``Last-Event-ID``).

Every kind, with the members of its ``data`` (JSON):

``state``
    the task's state changed: ``status`` (the internal state, as
    ``registry.protocol.states`` names it), ``reason`` (optional text).
``step``
    a step started or ended: ``step_id``, ``number``, ``status``
    (``running``, ``completed``, ``failed``), ``worker`` (the worker
    running it: its DBOS executor id, ``host-pid-random``), ``output`` and ``error`` once ended.
``text``
    model text as it streams: ``step_id``, ``agent``, ``delta``.
``tool_call``
    a tool is called: ``step_id``, ``agent``, ``tool``, ``call_id``, ``arguments``.
``tool_result``
    its result: ``step_id``, ``agent``, ``tool``, ``call_id``, ``status``
    (``ok``, ``error``, ``timeout``, ``rejected``...), ``output``,
    ``error`` (the status, when it is not ``ok``).
``action``
    an action awaits a decision, or was decided: the action as the
    protocol shows it (``outputs.action_json``).
``artifact``
    a file was stored: ``artifact_id``, ``file_name``, ``agent_created``, ``size``, ``step_id``.
``outcome``
    the run is over: ``outcome``, ``output``, ``error`` (optional). The last
    entry of a task, with a ``state`` entry for its final state.
"""

from __future__ import annotations

STATE = "state"
STEP = "step"
TEXT = "text"
TOOL_CALL = "tool_call"
TOOL_RESULT = "tool_result"
ACTION = "action"
ARTIFACT = "artifact"
OUTCOME = "outcome"

KINDS = (STATE, STEP, TEXT, TOOL_CALL, TOOL_RESULT, ACTION, ARTIFACT, OUTCOME)
