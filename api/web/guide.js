// Tachograph operator page: what a newcomer needs next. Loaded before app.js (both
// deferred, so in order); app.js calls these where a view is empty, where a queued task
// cannot run, and where a row names a session. Plain functions, no state but the
// deployment's executors as GET /api/health last reported them.
"use strict";

/** A command to copy: shown as text (never markup), with a Copy button. */
function guideCommand(text) {
  const code = document.createElement("code");
  code.textContent = text;
  const pre = document.createElement("pre");
  pre.className = "command";
  pre.append(code);
  const copy = document.createElement("button");
  copy.type = "button";
  copy.className = "copy";
  copy.textContent = "Copy";
  copy.setAttribute("aria-label", `Copy: ${text}`);
  copy.addEventListener("click", () => {
    const done = () => (copy.textContent = "Copied");
    // The clipboard needs a secure context and permission; else select it for Ctrl+C.
    const select = () => {
      const range = document.createRange();
      range.selectNodeContents(code);
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      copy.textContent = "Selected: press Ctrl+C";
    };
    if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(text).then(done, select);
    else select();
  });
  const wrap = document.createElement("div");
  wrap.className = "command-row";
  wrap.append(pre, copy);
  return wrap;
}

function guideStep(text, command) {
  const li = document.createElement("li");
  const p = document.createElement("p");
  p.textContent = text;
  li.append(p);
  if (command) li.append(guideCommand(command));
  return li;
}

function guideSteps(steps) {
  const ol = document.createElement("ol");
  ol.className = "guide-steps";
  ol.append(...steps);
  return ol;
}

function guideWorkspace() {
  const chosen = document.querySelector("#tasks-workspace");
  return (chosen && chosen.value) || "default";
}

/** Connect an agent: a token bound to its workspace, then the hooks in its project. */
function connectAgentSteps(workspace = guideWorkspace()) {
  return guideSteps([
    guideStep(
      `Issue the agent a token of its own, bound to the workspace it works in (${workspace}); the command prints the secret once:`,
      `.venv/bin/tachograph keys issue --role agent --workspace ${workspace}`,
    ),
    guideStep(
      "Where the agent runs, export that secret:",
      "export TACHOGRAPH_AGENT_TOKEN=<the secret printed above>",
    ),
    guideStep(
      "Install Tachograph's hooks into the agent's project (Claude Code; codex, gemini and copilot work the same way):",
      `.venv/bin/tachograph hook install claude /path/to/project --url ${location.origin}`,
    ),
    guideStep("Start the agent there: its session appears under Sessions as it works, named by its first prompt."),
  ]);
}

/** Fill a guide box: a heading line, then steps (replacing what was there). */
function fillGuide(el, lead, steps) {
  const p = document.createElement("p");
  p.className = "guide-lead";
  p.textContent = lead;
  el.replaceChildren(p, ...(steps ? [steps] : []));
}

// ---------------------------------------------------------------- empty views

/** The board with no task at all: how tasks come to be. */
function showBoardGuide(cardCount) {
  const el = document.querySelector("#board-guide");
  if (!el) return;
  el.hidden = cardCount > 0;
  if (el.hidden || el.dataset.filled === guideWorkspace()) return;
  el.dataset.filled = guideWorkspace();
  fillGuide(
    el,
    "No tasks yet. Queue one with the form above (an executor runs it as an agent), or connect an agent you run yourself and watch its sessions:",
    connectAgentSteps(),
  );
}

function showSessionsGuide(empty) {
  const el = document.querySelector("#sessions-empty");
  el.hidden = !empty;
  if (!empty || el.dataset.filled) return;
  el.dataset.filled = "true";
  fillGuide(el, "No sessions yet. A session is an agent's run, recorded from its hooks. To connect one:", connectAgentSteps());
}

function showActivityGuide(body) {
  const row = document.createElement("tr");
  const cell = document.createElement("td");
  cell.colSpan = 6;
  cell.className = "guide";
  fillGuide(cell, "No recorded tool call matches. Tool calls are recorded from connected agents' hooks; to connect one:", connectAgentSteps());
  row.append(cell);
  body.replaceChildren(row);
}

const APPROVAL_RULES_EXAMPLE =
  'TACHOGRAPH_APPROVALS=\'{"version": 1, "rules": [{"id": "risky-git", "tool": "Bash", "match": "git push", "timeoutS": 60}]}\'';

function showApprovalsGuide(empty) {
  const el = document.querySelector("#approvals-pending-empty");
  el.hidden = !empty;
  if (!empty || el.dataset.filled) return;
  el.dataset.filled = "true";
  fillGuide(
    el,
    "Nothing is waiting for a decision. A connected agent's tool call waits here when an approval rule matches it (or a hook handler answers ask). Rules are set where tachograph serve runs, for example:",
    guideSteps([
      guideStep("Hold every git push for up to 60 s (denied if nobody decides):", APPROVAL_RULES_EXAMPLE),
      guideStep("Restart tachograph serve with it, then reinstall the hooks so they wait as long:", `.venv/bin/tachograph hook install claude /path/to/project --url ${location.origin}`),
    ]),
  );
}

/** Evolution off: what turning it on does, and how, beside the pipeline's zeros. */
function showEvolutionGuide(on) {
  const el = document.querySelector("#evolution-guide");
  if (!el) return;
  el.hidden = Boolean(on);
  if (on || el.dataset.filled) return;
  el.dataset.filled = "true";
  fillGuide(
    el,
    "Evolution is off, so nothing is learned and the counts below stay at zero. Turned on, each finished agent turn and failed task attempt becomes a signal; the reflector (TACHOGRAPH_REFLECTOR, built-in rules unless set) turns signals into lessons, and every agent is told its lessons at its session start and with each prompt. Each lesson is a revision you can open and revert here. Turn it on with the Evolution switch above (admin key), or:",
    guideSteps([
      guideStep(
        "With an admin key:",
        `curl -X PATCH -H "x-tachograph-key: $TACHOGRAPH_API_KEY" -H "content-type: application/json" -d '{"evolution": true}' ${location.origin}/api/settings/autonomy`,
      ),
    ]),
  );
}

// ---------------------------------------------------------------- executors

// What GET /api/health said of the processes that run tasks: null until read (or unknown).
const executors = { canRun: null, slots: 0, readAt: 0, pending: null };
const EXECUTORS_FRESH_MS = 30000;

/** Whether queued tasks can run anywhere in the deployment (read at most every 30 s). */
function readExecutors() {
  if (executors.pending) return executors.pending;
  if (executors.readAt && Date.now() - executors.readAt < EXECUTORS_FRESH_MS) return Promise.resolve(executors);
  executors.pending = api("/api/health")
    .then(
      (health) => {
        const live = health.executors;
        executors.canRun = health.executor !== "none" || (live ? live.live > 0 : null);
        executors.slots = live ? live.slots : 0;
      },
      () => {
        executors.canRun = null; // unknown: say nothing rather than something wrong
      },
    )
    .then(() => {
      executors.readAt = Date.now();
      executors.pending = null;
      return executors;
    });
  return executors.pending;
}

const NO_EXECUTOR =
  "No executor is configured: queued tasks will not run. An executor runs each task as an agent; set TACHOGRAPH_TASK_COMMAND where tachograph serve (or a tachograph worker) runs, for example:";
const EXECUTOR_EXAMPLE =
  'TACHOGRAPH_TASK_COMMAND=\'["claude", "-p", "{prompt}", "--output-format", "stream-json"]\'';

/** The board's note (beside the Queued column) when nothing in the deployment runs tasks. */
function showExecutorNote() {
  return readExecutors().then(({ canRun }) => {
    const el = document.querySelector("#executor-note");
    el.hidden = canRun !== false;
    if (el.hidden || el.dataset.filled) return;
    el.dataset.filled = "true";
    fillGuide(el, NO_EXECUTOR, guideSteps([guideStep("Then restart it:", EXECUTOR_EXAMPLE)]));
  });
}

/** A queued task's detail: it will not run, and why. */
function showTaskExecutorNote(task) {
  const el = document.querySelector("#task-executor-note");
  if (task.status !== "queued") {
    el.hidden = true;
    return Promise.resolve();
  }
  return readExecutors().then(({ canRun }) => {
    el.hidden = canRun !== false;
    if (el.hidden || el.dataset.filled) return;
    el.dataset.filled = "true";
    fillGuide(el, `This task will not run. ${NO_EXECUTOR}`, guideSteps([guideStep("Then restart it:", EXECUTOR_EXAMPLE)]));
  });
}

// ---------------------------------------------------------------- new task

/** The board's "New task" form: POST /api/tasks; the card then arrives on the live stream. */
function wireNewTask() {
  const form = document.querySelector("#new-task");
  const done = document.querySelector("#new-task-done");
  const error = document.querySelector("#new-task-error");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const prompt = form.elements.prompt.value.trim();
    const workspaceId = form.elements.workspaceId.value || "default";
    done.replaceChildren();
    showMessage(error, "");
    if (!prompt) {
      showMessage(error, "Write the prompt the agent should work on.");
      form.elements.prompt.focus();
      return;
    }
    const body = { workspaceId, prompt, maxAttempts: Number(form.elements.maxAttempts.value) || 3 };
    const model = form.elements.model.value.trim();
    if (model) body.model = model;
    const submit = form.querySelector("button[type=submit]");
    submit.disabled = true;
    try {
      const task = await api("/api/tasks", { method: "POST", body });
      form.elements.prompt.value = "";
      const open = document.createElement("a");
      open.href = `#tasks/${task.id}`;
      open.textContent = `task ${shortId(task.id)}`;
      done.append("Queued ", open, ` in ${task.workspaceId}.`);
    } catch (failure) {
      showMessage(error, `Refused: ${describe(failure)}`);
    } finally {
      refreshEnabled(submit);
      form.elements.prompt.focus();
    }
  });
}

/** The form's workspaces follow the board's (and default to the one filtered on). */
function syncNewTaskWorkspaces() {
  const from = document.querySelector("#tasks-workspace");
  const to = document.querySelector("#new-task-workspace");
  const chosen = to.value;
  const options = [...from.options].filter((o) => o.value).map((o) => new Option(o.value, o.value));
  if (!options.length) options.push(new Option("default", "default"));
  to.replaceChildren(...options);
  to.value = [...to.options].some((o) => o.value === chosen) ? chosen : from.value || to.options[0].value;
}

// ---------------------------------------------------------------- sessions by title

/** A session as people know it: its title, else its short id. */
function sessionName(sessionId, title) {
  return title || `Session ${shortId(sessionId)}`;
}

/** What carried a learned delivery: the event whose answer it was, or a task's prompt. */
function deliveredVia(item) {
  if (item.taskId) return "in the task's prompt";
  if (item.event === "SessionStart") return "at session start";
  if (item.event === "UserPromptSubmit") return "with the prompt";
  return item.event ? `with ${item.event}` : "";
}
