// prompt-registry UI: a task page that follows its task as it runs.
// It reads the task's events (server-sent, relayed by /ui/tasks/<id>/events)
// into the "As it happens" list, keeps the state badge current, and, when a
// step ends, fetches the page again and puts its task part in place of this
// one (the steps, the answer, the decision an action waits for). Text only:
// nothing from an event is ever parsed as HTML. Without this script the page
// is the same, as of when it was loaded.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const body = document.getElementById("task-body");
  const log = document.getElementById("live-log");
  const section = document.getElementById("live");
  if (!body || !body.dataset.taskEvents || !log || !section || !window.EventSource) return;
  const source = new EventSource(body.dataset.taskEvents);
  const FINISHED = ["completed", "failed", "cancelled"];
  const texts = new Map(); // a step's answer text, as it streams
  let refreshing = false;

  function line(label, text) {
    section.hidden = false;
    const item = document.createElement("li");
    const name = document.createElement("strong");
    name.textContent = label;
    item.append(name, " ", text);
    log.append(item);
    return item;
  }

  function shorten(text, most) {
    return text.length > most ? text.slice(0, most) + "…" : text;
  }

  // The page again, its task part in place of this one's: once per burst of events.
  function refresh() {
    if (refreshing) return;
    refreshing = true;
    setTimeout(async () => {
      try {
        const answer = await fetch(body.dataset.taskPage, { credentials: "same-origin" });
        if (!answer.ok) return;
        const page = new DOMParser().parseFromString(await answer.text(), "text/html");
        const fresh = page.getElementById("task-body");
        const here = document.getElementById("task-body");
        if (fresh && here) here.replaceWith(document.importNode(fresh, true));
      } finally {
        refreshing = false;
      }
    }, 100);
  }

  // Whether the page shows the step as ended so already (an entry of its past).
  function shown(step) {
    for (const item of document.querySelectorAll("[data-step-id]")) {
      if (item.dataset.stepId === step.step_id) return item.dataset.stepState === step.status;
    }
    return false;
  }

  function on(kind, handle) {
    source.addEventListener(kind, (message) => handle(JSON.parse(message.data)));
  }

  on("state", (data) => {
    line("state", data.status + (data.reason ? ": " + data.reason : ""));
    const badge = document.querySelector("[data-task-state]");
    if (badge) {
      badge.textContent = data.status;
      badge.className = "badge state-" + data.status;
    }
    // A cancelled task has no outcome: its last entry is this one.
    if (data.status === "cancelled") source.close();
    if (FINISHED.includes(data.status)) refresh();
  });
  on("step", (data) => {
    line("step " + data.number, data.status + (data.worker ? " on " + data.worker : ""));
    if (data.status !== "running" && !shown(data)) refresh();
  });
  on("text", (data) => {
    let text = texts.get(data.step_id);
    if (!text) {
      text = document.createElement("pre");
      text.tabIndex = 0;
      line("answer", "").append(text);
      texts.set(data.step_id, text);
    }
    text.textContent += data.delta;
  });
  on("tool_call", (data) => line("tool call", data.tool + " " + JSON.stringify(data.arguments)));
  on("tool_result", (data) => line("tool result", data.tool + " (" + data.status + "): " + shorten(data.output, 300)));
  on("action", (data) => line("action " + data.status, data.tool + " " + JSON.stringify(data.arguments)));
  on("artifact", (data) => line("artifact", data.file_name + " (" + data.size + " bytes)"));
  on("outcome", (data) => {
    line("outcome", data.outcome + (data.error ? ": " + data.error : ""));
    source.close();
    refresh();
  });
});
