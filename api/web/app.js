// Tachograph operator page: plain JavaScript, no build step.
// Every datum comes from /api/*; the API key (when the server asks for one) is kept in
// sessionStorage and sent as x-tachograph-key. Data is rendered with DOM nodes and
// textContent only, never as HTML. GET /api/whoami tells the key's role; every control that
// needs more (marked data-needs="operator" or "admin") is disabled with the reason shown.
"use strict";

const KEY_NAME = "tachograph-key";
const BOARD_INTERVAL_MS = 2000;
const AUTONOMY_INTERVAL_MS = 5000;
const TASK_COLUMNS = [
  ["queued", "Queued"],
  ["running", "Running"],
  ["cancelling", "Cancelling"],
  ["completed", "Completed"],
  ["failed", "Failed"],
  ["cancelled", "Cancelled"],
  ["dead-letter", "Dead letter"],
];
const TERMINAL = new Set(["completed", "failed", "cancelled", "dead-letter"]);
const RESOLVABLE = new Set(["failed", "cancelled", "dead-letter"]);
const CANCELLABLE = new Set(["queued", "running"]);
// Each role can do everything the roles before it can.
const ROLE_RANK = { agent: 0, reader: 1, operator: 2, admin: 3 };

// ---------------------------------------------------------------- small DOM helpers

const $ = (selector, root = document) => root.querySelector(selector);

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") el.className = value;
    else if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

/** Set text only when it changed, so refreshes touch nothing that stayed the same. */
function setText(el, text) {
  const value = text === null || text === undefined ? "" : String(text);
  if (el.textContent !== value) el.textContent = value;
}

function setAttr(el, name, value) {
  if (value === null || value === undefined || value === false) {
    if (el.hasAttribute(name)) el.removeAttribute(name);
  } else if (el.getAttribute(name) !== String(value)) {
    el.setAttribute(name, String(value));
  }
}

/** Make `parent`'s children exactly `elements`, in order, moving nodes rather than rebuilding. */
function syncChildren(parent, elements) {
  elements.forEach((el, i) => {
    if (parent.children[i] !== el) parent.insertBefore(el, parent.children[i] || null);
  });
  while (parent.children.length > elements.length) parent.lastElementChild.remove();
}

function showMessage(el, text) {
  setText(el, text || "");
  if (el.hasAttribute("role") && el.getAttribute("role") === "alert") el.hidden = !text;
}

/** `sha256:<hex>` → its first 8 hex digits (enough to tell revisions apart by eye). */
function shortDigest(digest) {
  return digest ? String(digest).replace(/^sha256:/, "").slice(0, 8) : "";
}

function shortId(id) {
  return id ? String(id).slice(0, 8) : "";
}

function firstLine(text, max = 120) {
  const line = String(text || "").split("\n").find((l) => l.trim()) || "";
  return line.length > max ? line.slice(0, max - 1) + "…" : line;
}

/** Timestamps are shown in UTC, as the API and the logs carry them. */
function fmtTime(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return d.toISOString().slice(0, 19).replace("T", " ") + " UTC";
}

/** Time of day with milliseconds, for events within one turn (the date is in its heading). */
function fmtClock(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso || "") : d.toISOString().slice(11, 23);
}

function timeEl(iso) {
  return iso ? h("time", { datetime: iso }, fmtTime(iso)) : h("span", { class: "muted" }, "—");
}

function badge(status) {
  return h("span", { class: `badge s-${status}` }, status || "—");
}

// A tool call's status, in words where the code alone would mislead (projections/call_endings.py).
const CALL_STATUS_WORDS = {
  ran_undecided: "ran while awaiting approval",
  abandoned: "abandoned: no decision reached the agent",
};

function callStatusBadge(status) {
  return h("span", { class: `badge s-${status}`, "data-status": status || "" }, CALL_STATUS_WORDS[status] || status || "—");
}

function setBadge(el, status) {
  setText(el, status || "");
  setAttr(el, "class", `badge s-${status}`);
}

function json(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

function streamLink(id, label = "Events") {
  return h("a", { href: `#stream/${id}`, "aria-label": `${label} of ${id}` }, label);
}

function fields(dl, entries) {
  dl.replaceChildren(
    ...entries
      .filter(([, value]) => value !== undefined)
      .flatMap(([name, value]) => [
        h("dt", null, name),
        h("dd", null, value === null || value === "" ? h("span", { class: "muted" }, "—") : value),
      ]),
  );
}

// ---------------------------------------------------------------- API access

class ApiError extends Error {
  constructor(status, code, message, body) {
    super(message);
    this.status = status;
    this.code = code;
    this.body = body;
  }
  /** What the page shows: the API's own sentence, with its code. */
  describe() {
    if (this.status === 403 && this.body && this.body.role === "agent") return cannotRead("agent");
    return this.code ? `${this.message} (${this.code})` : this.message;
  }
}

const auth = { asked: false, declined: false, prompt: null };

function currentKey() {
  return sessionStorage.getItem(KEY_NAME) || "";
}

async function api(path, options) {
  return (await request(path, options)).data;
}

/** One API call (asking for the key on 401); answers `{data, key}`, `key` being the one sent. */
async function request(path, { method = "GET", body } = {}) {
  for (;;) {
    const headers = { accept: "application/json" };
    const key = currentKey();
    if (key) headers["x-tachograph-key"] = key;
    if (body !== undefined) headers["content-type"] = "application/json";
    let response;
    try {
      response = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: "no-store",
      });
    } catch {
      throw new ApiError(0, "network_error", "The server did not answer; is tachograph serve running?");
    }
    if (response.status === 204) return { data: null, key };
    let data = null;
    try {
      data = await response.json();
    } catch {
      data = null;
    }
    if (response.status === 401) {
      auth.asked = true;
      if (key) sessionStorage.removeItem(KEY_NAME);
      forgetIdentity();
      updateKeyControls();
      // The server says why in one sentence: missing, malformed, unknown, expired or revoked.
      const why = data && data.message ? ` ${data.message}` : " Enter the right one.";
      await askForKey(key ? `The server refused that key.${why}` : "");
      continue;
    }
    if (!response.ok) {
      const code = data && data.error ? data.error : `http_${response.status}`;
      const message = data && data.message ? data.message : `The server answered ${response.status}.`;
      const error = new ApiError(response.status, code, message, data);
      error.key = key;
      // A 403 naming another role than the page knows: the key's role changed server-side.
      if (response.status === 403 && data && data.role && data.role !== identity.role && path !== WHOAMI) {
        loadIdentity();
      }
      throw error;
    }
    updateKeyControls();
    return { data, key };
  }
}

function askForKey(message) {
  if (auth.declined) {
    return Promise.reject(
      new ApiError(401, "unauthorized", "This server needs an API key: use “Enter API key” above."),
    );
  }
  const dialog = $("#key-dialog");
  showMessage($("#key-dialog-error"), message);
  if (!auth.prompt) {
    auth.prompt = new Promise((resolve, reject) => {
      const input = $("#key-input");
      const form = $("#key-form");
      const finish = () => {
        form.removeEventListener("submit", onSubmit);
        $("#key-dismiss").removeEventListener("click", onDismiss);
        dialog.removeEventListener("cancel", onCancel);
        auth.prompt = null;
        if (dialog.open) dialog.close();
      };
      const onSubmit = (event) => {
        event.preventDefault();
        const value = input.value.trim();
        if (!value) return;
        sessionStorage.setItem(KEY_NAME, value);
        input.value = "";
        finish();
        updateKeyControls();
        keyChanged();
        resolve();
      };
      const onDismiss = () => {
        auth.declined = true;
        finish();
        updateKeyControls();
        reject(new ApiError(401, "unauthorized", "This server needs an API key: use “Enter API key” above."));
      };
      const onCancel = (event) => {
        event.preventDefault();
        onDismiss();
      };
      form.addEventListener("submit", onSubmit);
      $("#key-dismiss").addEventListener("click", onDismiss);
      dialog.addEventListener("cancel", onCancel);
      input.value = "";
      dialog.showModal();
      input.focus();
    });
  }
  return auth.prompt;
}

function updateKeyControls() {
  const key = sessionStorage.getItem(KEY_NAME);
  $("#forget-key").hidden = !key;
  $("#enter-key").hidden = Boolean(key) || !auth.asked;
  const open = identity.state === "known" && !identity.authRequired && !key;
  setText($("#key-state"), key ? "API key in use" : auth.asked ? "No API key" : open ? "No API key needed" : "");
}

// ---------------------------------------------------------------- the key's role

const WHOAMI = "/api/whoami";

/**
 * What GET /api/whoami said about the key in use. `state`: "unknown" (not asked yet, no key
 * accepted, or a server without roles: nothing is disabled, the server still decides),
 * "known" (`role` is reader, operator or admin) or "cannot-read" (an agent token: 403).
 */
const identity = {
  state: "unknown",
  role: null,
  label: null,
  authRequired: true,
  expiresAt: null,
  pending: null,
  recheck: false,
};

function cannotRead(role) {
  return role === "agent"
    ? "This key is an agent token: it can send hook events and signals, but it cannot read " +
        "anything this page shows. Forget it and enter a reader, operator or admin key."
    : `This key has the ${role} role, which cannot read what this page shows. ` +
        "Forget it and enter a reader, operator or admin key.";
}

/** Ask the server who the key in use is; concurrent callers share one request. */
function loadIdentity() {
  if (identity.pending) return identity.pending;
  identity.pending = (async () => {
    let used;
    try {
      const { data, key } = await request(WHOAMI);
      used = key;
      Object.assign(identity, {
        state: ROLE_RANK[data.role] === undefined ? "unknown" : "known",
        role: data.role,
        label: data.label ?? null,
        authRequired: data.authRequired !== false,
        expiresAt: data.expiresAt ?? null,
      });
    } catch (error) {
      used = error.key;
      if (error.status === 403) {
        Object.assign(identity, {
          state: "cannot-read",
          role: (error.body && error.body.role) || "agent",
          label: null,
          expiresAt: null,
        });
      } else {
        // No key accepted yet, or a server that predates roles (404): the server decides.
        Object.assign(identity, { state: "unknown", role: null, label: null, expiresAt: null });
      }
    } finally {
      identity.pending = null;
      renderIdentity();
      applyRole();
      updateKeyControls();
    }
    // The key changed while the question was on its way: ask again for the new one.
    if (identity.recheck) {
      identity.recheck = false;
      if (used !== undefined && used !== currentKey()) await loadIdentity();
    }
  })();
  return identity.pending;
}

/** A key was entered or forgotten: the role shown must follow. */
function keyChanged() {
  if (identity.pending) identity.recheck = true;
  else loadIdentity();
  liveRestart();
}

function forgetIdentity() {
  Object.assign(identity, { state: "unknown", role: null, label: null, expiresAt: null });
  renderIdentity();
  applyRole();
}

function renderIdentity() {
  const chip = $("#key-role");
  const banner = $("#role-banner");
  if (identity.state === "known") {
    const label = identity.label ? ` · ${identity.label}` : "";
    chip.replaceChildren(
      h("span", { class: "visually-hidden" }, "Role of the key in use: "),
      `${identity.role}${label}`,
    );
    const expires = identity.expiresAt ? `; it expires ${fmtTime(identity.expiresAt)}` : "";
    const who = identity.authRequired
      ? `The key in use${identity.label ? ` (${identity.label})` : ""} has the ${identity.role} role${expires}.`
      : `This server needs no API key: everyone has the ${identity.role} role.`;
    setAttr(chip, "title", who);
    setAttr(chip, "class", `role-chip r-${identity.role}`);
    chip.hidden = false;
  } else if (identity.state === "cannot-read") {
    chip.replaceChildren(
      h("span", { class: "visually-hidden" }, "Role of the key in use: "),
      identity.role === "agent" ? "agent token" : identity.role,
    );
    setAttr(chip, "title", cannotRead(identity.role));
    setAttr(chip, "class", "role-chip r-agent");
    chip.hidden = false;
  } else {
    chip.replaceChildren();
    chip.hidden = true;
  }
  const blocked = identity.state === "cannot-read";
  setText(banner, blocked ? cannotRead(identity.role) : "");
  banner.hidden = !blocked;
}

/** The role of the key in use when it is below `needs`, else null (unknown roles block nothing). */
function roleShort(needs) {
  if (!needs || identity.state === "unknown") return null;
  const have = identity.role;
  return (ROLE_RANK[have] ?? -1) >= ROLE_RANK[needs] ? null : have;
}

/** Why the key in use cannot do `does`, as one sentence; null when it can. */
function whyNot(needs, does) {
  const have = roleShort(needs);
  if (!have) return null;
  return have === "agent"
    ? `Your key is an agent token; ${does} needs ${needs}.`
    : `Your key has the ${have} role; ${does} needs ${needs}.`;
}

/**
 * Enable a gated control when both its own state (`data-wanted`, e.g. a task that can be
 * cancelled) and the key's role allow it; a control the role forbids says why in its tooltip.
 */
function refreshEnabled(el) {
  const why = whyNot(el.dataset.needs, el.dataset.does);
  el.disabled = el.dataset.wanted === "false" || Boolean(why);
  setAttr(el, "title", why);
  setAttr(el, "data-role-blocked", why ? "true" : null);
  const label = el.closest("label");
  if (label) setAttr(label, "title", why);
}

function setEnabled(el, wanted) {
  el.dataset.wanted = String(Boolean(wanted));
  refreshEnabled(el);
}

/** A control created by the page that needs `needs` to be used. */
function gated(el, needs, does) {
  el.dataset.needs = needs;
  el.dataset.does = does;
  refreshEnabled(el);
  return el;
}

/** Apply the key's role to every gated control and explanation line under `root`. */
function applyRole(root = document) {
  for (const el of root.querySelectorAll("[data-needs]")) refreshEnabled(el);
  for (const note of document.querySelectorAll("[data-role-note]")) {
    const why = whyNot(note.dataset.roleNote, note.dataset.does);
    setText(note, why || "");
    note.hidden = !why;
  }
}

// ---------------------------------------------------------------- confirmations

/** A modal yes/no question; resolves true only when the operator confirms. */
function confirmAction(title, body, confirmLabel) {
  const dialog = $("#confirm-dialog");
  setText($("#confirm-title"), title);
  setText($("#confirm-body"), body);
  setText($("#confirm-yes"), confirmLabel);
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "confirm"), { once: true });
    dialog.showModal();
    $("#confirm-no").focus();
  });
}

function modalOpen() {
  return $("#confirm-dialog").open || $("#key-dialog").open;
}

/** Run an operator command from `button`: confirmation, busy state, outcome messages. */
async function command(button, { title, body, label, run, errorEl, doneEl, done }) {
  showMessage(errorEl, "");
  setText(doneEl, "");
  if (!(await confirmAction(title, body, label))) {
    button.focus();
    return false;
  }
  button.disabled = true;
  button.setAttribute("aria-busy", "true");
  try {
    const result = await run();
    setText(doneEl, done(result));
    return true;
  } catch (error) {
    showMessage(errorEl, `Refused: ${describe(error)}`);
    return false;
  } finally {
    refreshEnabled(button);
    button.removeAttribute("aria-busy");
  }
}

function describe(error) {
  return error instanceof ApiError ? error.describe() : String(error && error.message ? error.message : error);
}

// ---------------------------------------------------------------- views and polling

const views = {};
let viewToken = 0;
let currentRoute = null;

/** Run `fn` now and every `ms` while the view that started it is shown (paused in the background). */
function every(ms, fn, errorEl) {
  const token = viewToken;
  const tick = async () => {
    if (token !== viewToken) return;
    if (!document.hidden && !modalOpen()) {
      try {
        await fn();
        if (errorEl) showMessage(errorEl, "");
      } catch (error) {
        if (token === viewToken && errorEl) showMessage(errorEl, describe(error));
      }
    }
    if (token === viewToken) setTimeout(tick, ms);
  };
  tick();
}

async function guarded(errorEl, fn) {
  try {
    await fn();
    showMessage(errorEl, "");
  } catch (error) {
    showMessage(errorEl, describe(error));
  }
}

function safeDecode(text) {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

function parseRoute() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean);
  const [name, arg] = parts;
  if (name === "tasks" && arg) return { view: "task", arg };
  if (name === "sessions" && arg) {
    // `#sessions/{id}/turns/{turnKey}` opens the session at one turn (a signal's, a delivery's).
    const turn = parts[2] === "turns" && parts[3] ? safeDecode(parts[3]) : null;
    return { view: "session", arg, turn };
  }
  if (name === "revisions" && arg) return { view: "revision", arg };
  if (name === "stream" && arg) return { view: "stream", arg };
  if (name && name.startsWith("activity")) return { view: "activity", arg: location.hash.split("?")[1] || "" };
  if (["tasks", "sessions", "approvals", "autonomy", "policy", "audit"].includes(name)) return { view: name };
  return { view: "tasks" };
}

/** Show the view the URL names; `moved` (a navigation) puts focus on its heading. */
function route(moved = false) {
  const next = parseRoute();
  viewToken += 1;
  currentRoute = next;
  $("#loading").hidden = true;
  for (const section of document.querySelectorAll("main > .view")) {
    section.hidden = section.id !== `view-${next.view}`;
  }
  const navName = { task: "tasks", session: "sessions", revision: "autonomy", stream: null }[next.view] ?? next.view;
  for (const link of document.querySelectorAll("[data-nav]")) {
    setAttr(link, "aria-current", link.dataset.nav === navName ? "page" : null);
  }
  const section = $(`#view-${next.view}`);
  if (moved) {
    const heading = $("h2", section);
    if (heading) heading.focus({ preventScroll: true });
    window.scrollTo(0, 0);
  }
  document.title = `${$("h2", section).textContent} · Tachograph`;
  views[next.view](next.arg, next);
}

async function loadWorkspaces() {
  const data = await api("/api/workspaces");
  for (const select of document.querySelectorAll("[data-workspace-filter]")) {
    const chosen = select.value;
    const options = [h("option", { value: "" }, "All workspaces")];
    for (const ws of data.items) options.push(h("option", { value: ws.id }, ws.id));
    select.replaceChildren(...options);
    select.value = data.items.some((ws) => ws.id === chosen) ? chosen : "";
  }
}

/** Refresh the workspace filters when a list view is entered (not on every poll). */
function ensureWorkspaces(errorEl) {
  return loadWorkspaces().catch((error) => showMessage(errorEl, describe(error)));
}

// ---------------------------------------------------------------- task board

const board = { columns: new Map(), cards: new Map(), capped: false };

function buildBoard() {
  const root = $("#board");
  for (const [status, label] of TASK_COLUMNS) {
    const count = h("span", { class: "count" }, "0");
    const list = h("ul", { class: "cards", "aria-labelledby": `col-${status}` });
    const column = h(
      "section",
      { class: `column c-${status}`, "data-status": status },
      h("h3", { id: `col-${status}` }, label, " ", count),
      list,
    );
    board.columns.set(status, { list, count });
    root.append(column);
  }
}

function card(task) {
  const title = h("span", { class: "card-title" });
  const meta = h("span", { class: "card-meta" });
  const foot = h("span", { class: "card-foot" });
  const link = h("a", { class: "card-link", href: `#tasks/${task.id}` }, title, meta, foot);
  const el = h("li", { class: "card", "data-task-id": task.id, "data-created": task.createdAt }, link);
  el.parts = { title, meta, foot, link };
  return el;
}

/** Put `el` into `list` where the board's order (newest created first) wants it. */
function placeByAge(list, el) {
  const created = el.dataset.created;
  const before = [...list.children].find((other) => other !== el && other.dataset.created < created);
  if (el.parentElement !== list || el.nextElementSibling !== (before || null)) list.insertBefore(el, before || null);
}

function updateCard(el, task) {
  const { title, meta, foot } = el.parts;
  setText(title, firstLine(task.prompt) || "(empty prompt)");
  const bits = [];
  if (task.kind === "remediation") bits.push("remediation");
  if (task.source && task.source !== "user") bits.push(task.source);
  bits.push(`attempt ${task.attemptCount}/${task.maxAttempts}`);
  if (task.lastErrorClass) bits.push(`error: ${task.lastErrorClass}`);
  if (task.interrupted) bits.push("interrupted");
  setText(meta, bits.join(" · "));
  // The card shows the time of day; the full UTC timestamp is its tooltip.
  setText(foot, `${task.workspaceId} · ${shortId(task.id)} · ${fmtTime(task.updatedAt).slice(11)}`);
  setAttr(foot, "title", `updated ${fmtTime(task.updatedAt)}`);
  setAttr(el, "data-status", task.status);
}

function renderBoard(items) {
  const byStatus = new Map(TASK_COLUMNS.map(([status]) => [status, []]));
  const seen = new Set();
  for (const task of items) {
    let el = board.cards.get(task.id);
    if (!el) {
      el = card(task);
      board.cards.set(task.id, el);
    }
    updateCard(el, task);
    seen.add(task.id);
    (byStatus.get(task.status) || byStatus.get("queued")).push(el);
  }
  for (const [id, el] of board.cards) {
    if (!seen.has(id)) {
      el.remove();
      board.cards.delete(id);
    }
  }
  for (const [status, { list }] of board.columns) syncChildren(list, byStatus.get(status));
  countCards();
}

function countCards() {
  for (const { list, count } of board.columns.values()) setText(count, list.children.length);
  showBoardGuide(board.cards.size);
}

/** One task row from the live stream: its card moves to its column (the same node), or goes. */
function applyTask(task) {
  let el = board.cards.get(task.id);
  const workspace = $("#tasks-workspace").value;
  if (task.deleted || (workspace && task.workspaceId !== workspace)) {
    if (el) {
      el.remove();
      board.cards.delete(task.id);
    }
  } else {
    if (!el) {
      el = card(task);
      board.cards.set(task.id, el);
    }
    updateCard(el, task);
    placeByAge((board.columns.get(task.status) || board.columns.get("queued")).list, el);
  }
  countCards();
  stampBoard();
}

function stampBoard() {
  const capped = board.capped ? " · newest 200 shown" : "";
  setText($("#board-updated"), `Updated ${fmtTime(new Date().toISOString())}${capped}${liveNote()}`);
}

async function loadBoard(minPosition) {
  const query = new URLSearchParams({ limit: "200" });
  const workspace = $("#tasks-workspace").value;
  if (workspace) query.set("workspaceId", workspace);
  if (minPosition) query.set("minPosition", String(minPosition));
  const data = await api(`/api/tasks?${query}`);
  renderBoard(data.items);
  board.capped = data.items.length >= 200;
  stampBoard();
}

views.tasks = () => {
  ensureWorkspaces($("#board-error")).then(syncNewTaskWorkspaces);
  showExecutorNote();
  liveView(loadBoard, $("#board-error"));
};

// ---------------------------------------------------------------- one task

const taskView = {
  id: null,
  task: null,
  signature: null,
  openAttempts: new Map(),
  workflow: null,
  workflowSignature: null,
};

function link(href, text) {
  return h("a", { href }, text);
}

function renderTask(task) {
  taskView.task = task;
  showTaskExecutorNote(task);
  setText($("#task-title"), `Task ${shortId(task.id)}`);
  setBadge($("#task-status"), task.status);
  document.title = `Task ${shortId(task.id)} · Tachograph`;
  fields($("#task-fields"), [
    ["ID", h("code", null, task.id)],
    ["Status", badge(task.status)],
    ["Kind", task.kind],
    ["Source", task.source],
    ["Workspace", task.workspaceId],
    ["Model", task.model],
    ["Attempts", `${task.attemptCount} of ${task.maxAttempts}`],
    ["Next attempt", task.nextAttemptAt ? timeEl(task.nextAttemptAt) : null],
    ["Created", timeEl(task.createdAt)],
    ["Started", task.startedAt ? timeEl(task.startedAt) : null],
    ["Finished", task.finishedAt ? timeEl(task.finishedAt) : null],
    ["Dead-lettered", task.deadLetteredAt ? timeEl(task.deadLetteredAt) : undefined],
    ["Interrupted", task.interrupted ? "yes: the process could not be reaped" : undefined],
    ["Schedule", task.scheduleId ? h("code", null, task.scheduleId) : undefined],
    ["Parent task", task.parentTaskId ? link(`#tasks/${task.parentTaskId}`, shortId(task.parentTaskId)) : null],
    [
      "Remediation task",
      task.remediationTaskId ? link(`#tasks/${task.remediationTaskId}`, shortId(task.remediationTaskId)) : null,
    ],
    ["Session", task.sessionId ? link(`#sessions/${task.sessionId}`, shortId(task.sessionId)) : null],
    ["Event stream", streamLink(task.id)],
  ]);
  setText($("#task-prompt"), task.prompt);
  const result = [];
  if (task.outcome) result.push(h("h3", null, "Outcome"), h("pre", { class: "text" }, task.outcome));
  if (task.resolution) {
    result.push(h("h3", null, "Resolution"), h("pre", { class: "text" }, task.resolution));
  }
  if (task.lastError || task.lastErrorClass) {
    result.push(
      h("h3", null, "Last error"),
      h("p", { class: "error-box" }, h("strong", null, task.lastErrorClass || "error"), ": ", task.lastError || ""),
    );
  }
  $("#task-result").replaceChildren(...result);
  setEnabled($("#task-cancel"), CANCELLABLE.has(task.status));
  setEnabled($("#task-resolve"), RESOLVABLE.has(task.status));
  setEnabled($("#task-summary"), RESOLVABLE.has(task.status));
  setEnabled($("#task-delete"), TERMINAL.has(task.status));
  renderActivity(task.activity || []);
}

function renderActivity(records) {
  setText($("#task-activity-count"), `(${records.length} records, latest 256 kept)`);
  const attempts = new Map();
  for (const record of records) {
    if (!attempts.has(record.attempt)) attempts.set(record.attempt, []);
    attempts.get(record.attempt).push(record);
  }
  const latest = Math.max(0, ...attempts.keys());
  const groups = [];
  for (const [attempt, list] of attempts) {
    const open = taskView.openAttempts.has(attempt) ? taskView.openAttempts.get(attempt) : attempt === latest;
    const errors = list.filter((r) => r.kind === "error").length;
    const details = h(
      "details",
      { class: "attempt", open, "data-attempt": attempt },
      h(
        "summary",
        null,
        `Attempt ${attempt} · ${list.length} record${list.length === 1 ? "" : "s"}`,
        errors ? ` · ${errors} error${errors === 1 ? "" : "s"}` : "",
      ),
      h("ol", { class: "records" }, list.map(activityItem)),
    );
    details.addEventListener("toggle", () => taskView.openAttempts.set(attempt, details.open));
    groups.push(details);
  }
  if (!groups.length) groups.push(h("p", { class: "muted" }, "No activity recorded."));
  $("#task-activity").replaceChildren(...groups);
}

function activityItem(record) {
  const parts = [timeEl(record.at), " ", badge(record.kind)];
  if (record.agent) parts.push(" ", h("span", { class: "muted" }, record.agent));
  if (record.tool) parts.push(" ", h("code", null, record.tool));
  const body = [];
  // Short one-line texts stay on the record's line; longer ones get a scrollable block.
  if (record.text && record.text.length <= 160 && !record.text.includes("\n")) {
    parts.push(" ", h("span", { class: "record-text" }, record.text));
  } else if (record.text) {
    body.push(h("pre", { class: "text" }, record.text));
  }
  if (record.args !== null && record.args !== undefined) {
    body.push(h("pre", { class: "text args", "aria-label": "tool arguments" }, json(record.args)));
  }
  if (record.result !== null && record.result !== undefined) {
    body.push(h("pre", { class: "text", "aria-label": "tool result" }, json(record.result)));
  }
  if (record.error) body.push(h("pre", { class: "text error-box" }, json(record.error)));
  return h("li", { class: `record k-${record.kind}` }, h("div", { class: "record-head" }, parts), body);
}

views.task = (id) => {
  if (taskView.id !== id) {
    taskView.openAttempts = new Map();
    $("#task-summary").value = "";
    setText($("#task-action-done"), "");
    setText($("#workflow-action-done"), "");
    // Never show the previous task's workflow while this one's is on its way.
    taskView.workflow = null;
    $("#task-workflow").hidden = true;
    setAttr($("#task-workflow"), "data-checked", null);
  }
  showMessage($("#task-action-error"), "");
  showMessage($("#workflow-action-error"), "");
  taskView.id = id;
  taskView.signature = null;
  taskView.workflowSignature = null;
  taskView.deleting = null;
  every(
    BOARD_INTERVAL_MS,
    async () => {
      if (taskView.deleting === id) return;
      const task = await api(`/api/tasks/${encodeURIComponent(id)}`);
      const signature = JSON.stringify(task);
      const changed = signature !== taskView.signature;
      if (changed) {
        taskView.signature = signature;
        renderTask(task);
      }
      // Every phase also notes itself in the task's activity, so a task without a
      // workflow is asked again only when it changed; one with a workflow on every tick
      // (another operator may discard its change).
      if (changed || taskView.workflow) await loadWorkflow(id, task.hasWorkflow);
    },
    $("#task-error"),
  );
};

async function reloadTask() {
  const id = taskView.id;
  const task = await api(`/api/tasks/${encodeURIComponent(id)}`);
  taskView.signature = JSON.stringify(task);
  renderTask(task);
  await loadWorkflow(id, task.hasWorkflow);
}

// ---------------------------------------------------------------- one task: self-update workflow

const PHASES = ["prepare", "implement", "inspect", "review", "commit"];
const FILE_STATUS = { A: "added", M: "modified", D: "deleted" };

/** GET the task's workflow, asked only when the task says it has one (`hasWorkflow`), so a
 * plain task's view requests nothing that answers 404; a 404 still means none. */
async function loadWorkflow(id, exists = true) {
  let flow = null;
  try {
    if (exists) flow = await api(`/api/tasks/${encodeURIComponent(id)}/workflow`);
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 404)) throw error;
  }
  if (taskView.id !== id) return;
  taskView.workflow = flow;
  renderWorkflow(flow);
}

function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

function shortSha(sha) {
  return sha ? String(sha).slice(0, 12) : "";
}

function lastLine(text, max = 160) {
  const lines = String(text || "").split("\n").filter((l) => l.trim());
  const line = lines.length ? lines[lines.length - 1] : "";
  return line.length > max ? line.slice(0, max - 1) + "…" : line;
}

/** The newest recorded phase called `name` (of `attempt`, when given). */
function newestPhase(flow, name, attempt) {
  for (let i = flow.phases.length - 1; i >= 0; i -= 1) {
    const p = flow.phases[i];
    if (p.phase === name && (attempt === undefined || p.attempt === attempt)) return p;
  }
  return null;
}

/** One word for where the cycle stands, from its newest phase. */
function workflowState(flow, live) {
  const last = flow.phases[flow.phases.length - 1];
  if (flow.discardedAt) return "discarded";
  if (flow.ref) return "imported";
  if (!last) return live ? "running" : "no phases";
  if (last.status === "ok" && last.phase !== "commit") return live ? "running" : "stopped";
  return { noop: "no-op", failed: "failed", rejected: "rejected" }[last.status] || last.status;
}

/** `sha256:<64 hex>` anywhere in `text` → its first 8 hex digits and an ellipsis. */
function shortenDigests(text) {
  return String(text || "").replace(/sha256:([0-9a-f]{8})[0-9a-f]{56}/g, "sha256:$1…");
}

/** What a phase's evidence says, in one line (the patch and verdict are shown in full below). */
function phaseNote(p) {
  const e = p.evidence || {};
  const bad = p.status === "failed" || p.status === "rejected";
  // `exit` is a phrase ("exit code 0", "killed by SIGKILL"); a bare number reads as a code.
  const exit = e.exit === null || e.exit === undefined ? "" : typeof e.exit === "number" ? `exit code ${e.exit}` : e.exit;
  const parts = [];
  if (p.phase === "prepare") {
    if (e.head) parts.push(`${e.branch || "detached HEAD"} at ${shortSha(e.head)}`);
    if (e.reason) parts.push(e.reason);
  } else if (p.phase === "implement") {
    parts.push(exit, e.summary ? firstLine(e.summary, 140) : "");
  } else if (p.phase === "inspect") {
    if (p.status === "noop") parts.push("no change", e.summary ? firstLine(e.summary, 140) : "");
    else {
      const files = Array.isArray(e.files) ? e.files.length : 0;
      parts.push(plural(files, "file"), plural(e.bytes ?? 0, "byte"), plural(e.commits ?? 0, "commit"));
      if (e.digest) parts.push(shortenDigests(e.digest));
      if (e.problem) parts.push(e.problem);
    }
  } else if (p.phase === "review") {
    parts.push(exit, shortenDigests(lastLine(e.verdict, 140)));
  } else if (p.phase === "commit") {
    parts.push(e.commit ? `imported ${shortSha(e.commit)}` : "", e.reason ? shortenDigests(e.reason) : "");
  }
  const text = parts.filter(Boolean).join(" · ");
  return text ? h("span", { class: `phase-note ${bad ? "error" : "muted"}` }, text) : null;
}

function phaseStep(name, p, waiting) {
  if (p) {
    return h(
      "li",
      { class: "phase", "data-phase": name, "data-status": p.status },
      h("span", { class: "phase-name" }, name),
      " ",
      badge(p.status),
      " ",
      h("time", { datetime: p.at, title: fmtTime(p.at), class: "muted" }, fmtClock(p.at)),
      " ",
      phaseNote(p),
    );
  }
  const state = waiting ? "pending" : "not-reached";
  return h(
    "li",
    { class: "phase", "data-phase": name, "data-status": state },
    h("span", { class: "phase-name" }, name),
    " ",
    h("span", { class: `badge s-${state}` }, waiting ? "pending" : "not reached"),
  );
}

function renderPhases(flow, live) {
  const attempts = new Map();
  for (const p of flow.phases) {
    if (!attempts.has(p.attempt)) attempts.set(p.attempt, []);
    attempts.get(p.attempt).push(p);
  }
  const latest = Math.max(0, ...attempts.keys());
  const items = [];
  for (const [attempt, list] of attempts) {
    const byPhase = new Map(list.map((p) => [p.phase, p]));
    // A phase that did not end "ok", or the commit, ends the attempt's cycle.
    const ended = list.some((p) => p.status !== "ok" || p.phase === "commit");
    const waiting = live && attempt === latest && !ended;
    const extra = list.filter((p) => !PHASES.includes(p.phase));
    items.push(
      h(
        "li",
        { class: "wf-attempt", "data-attempt": attempt },
        h("h4", null, `Attempt ${attempt}`),
        h(
          "ol",
          { class: "phases" },
          PHASES.map((name) => phaseStep(name, byPhase.get(name), waiting)),
          extra.map((p) => phaseStep(p.phase, p, false)),
        ),
      ),
    );
  }
  if (!items.length) items.push(h("li", { class: "muted" }, live ? "No phase recorded yet." : "No phase recorded."));
  $("#workflow-attempts").replaceChildren(...items);
}

/**
 * A unified diff as DOM text only: one block per file (its path as a heading, then its
 * header lines), hunk headers, added, removed and context lines, each styled by kind.
 */
function renderDiff(patch) {
  const blocks = [];
  const files = [];
  let file = null;
  let inHeader = false;
  const open = (gitLine) => {
    let path = null;
    if (gitLine) {
      const rest = gitLine.slice("diff --git ".length);
      // --no-renames: both sides name one path, `a/P b/P`.
      const half = (rest.length - 1) / 2;
      if (Number.isInteger(half) && rest.startsWith("a/") && rest.slice(half + 1) === `b/${rest.slice(2, half)}`) {
        path = rest.slice(2, half);
      } else {
        path = rest;
      }
    }
    const lines = h("div", { class: "diff-lines" });
    const head = h("h5", { class: "diff-file-head" }, path === null ? "(preamble)" : h("code", null, path));
    file = { head, lines, status: null, added: 0, removed: 0 };
    files.push(file);
    blocks.push(h("section", { class: "diff-file", "data-path": path ?? "" }, head, lines));
    return file;
  };
  const add = (kind, line) => file.lines.append(h("div", { class: `dl dl-${kind}` }, line));
  const lines = String(patch || "").split("\n");
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  for (const line of lines) {
    if (line.startsWith("diff --git ")) {
      open(line);
      inHeader = true;
      add("meta", line);
      continue;
    }
    if (!file) open(null);
    if (line.startsWith("@@")) {
      inHeader = false;
      add("hunk", line);
    } else if (inHeader) {
      // `--- a/P` and `+++ b/P` are header lines only before the first hunk: inside one,
      // a removed line may well start with "--".
      if (line.startsWith("new file mode")) file.status = "added";
      else if (line.startsWith("deleted file mode")) file.status = "deleted";
      add("meta", line);
    } else if (line.startsWith("+")) {
      file.added += 1;
      add("add", line);
    } else if (line.startsWith("-")) {
      file.removed += 1;
      add("del", line);
    } else if (line.startsWith("\\")) add("meta", line);
    else add("ctx", line);
  }
  for (const f of files) {
    if (f.status) f.head.append(" ", h("span", { class: "badge" }, f.status));
    f.head.append(" ", h("span", { class: "muted diff-counts" }, `+${f.added} −${f.removed}`));
  }
  if (!blocks.length) blocks.push(h("p", { class: "muted" }, "(empty patch)"));
  $("#workflow-diff").replaceChildren(...blocks);
}

function renderWorkflow(flow) {
  const section = $("#task-workflow");
  const task = taskView.task;
  const live = Boolean(task) && !TERMINAL.has(task.status);
  const signature = JSON.stringify([flow, live]);
  if (signature !== taskView.workflowSignature) {
    taskView.workflowSignature = signature;
    if (!flow) {
      section.hidden = true;
    } else {
      section.hidden = false;
      fillWorkflow(flow, live);
    }
  }
  // Tests (and anyone curious) can tell the answer for this task has arrived.
  setAttr(section, "data-checked", taskView.id);
}

function fillWorkflow(flow, live) {
  setBadge($("#workflow-state"), workflowState(flow, live));
  renderPhases(flow, live);

  const inspected = [...flow.phases]
    .reverse()
    .find((p) => p.phase === "inspect" && p.evidence && typeof p.evidence.patch === "string");
  const reviewed = inspected ? newestPhase(flow, "review", inspected.attempt) : null;
  const prepared = newestPhase(flow, "prepare");
  const digest = (inspected && inspected.evidence.digest) || (reviewed && reviewed.evidence.digest) || null;
  const refValue = flow.ref
    ? [h("code", null, flow.ref), flow.discardedAt ? h("span", { class: "muted" }, " (deleted from the repository)") : null]
    : h("span", { class: "muted" }, live ? "nothing imported yet" : "nothing imported");
  fields($("#workflow-fields"), [
    ["Imported ref", refValue],
    ["Commit", flow.commit ? h("code", { class: "digest" }, flow.commit) : null],
    ["Digest", digest ? h("code", { class: "digest" }, digest) : null],
    [
      "Base",
      prepared && prepared.evidence.head
        ? [prepared.evidence.branch || "detached HEAD", " at ", h("code", null, shortSha(prepared.evidence.head))]
        : null,
    ],
    ["Discarded", flow.discardedAt ? [timeEl(flow.discardedAt), flow.discardedBy ? ` by ${flow.discardedBy}` : ""] : undefined],
  ]);

  const button = $("#workflow-discard");
  button.hidden = !flow.ref;
  setEnabled(button, Boolean(flow.ref) && !flow.discardedAt);
  let help;
  if (!flow.ref) help = live ? "Nothing imported yet." : "Nothing was imported, so there is nothing to discard.";
  else if (flow.discardedAt) {
    help = `Discarded ${fmtTime(flow.discardedAt)}${flow.discardedBy ? ` by ${flow.discardedBy}` : ""}: the ref is gone from the repository.`;
  } else help = "Deletes the ref from the repository; the evidence stays in the log.";
  setText($("#workflow-discard-help"), help);

  renderReviewForm(flow, live);

  $("#workflow-change").hidden = !inspected;
  if (!inspected) return;
  const files = Array.isArray(inspected.evidence.files) ? inspected.evidence.files : [];
  setText($("#workflow-files-count"), `(${files.length})`);
  $("#workflow-files").replaceChildren(
    ...files.map(([status, path]) =>
      h(
        "li",
        { "data-file-status": status },
        h("span", { class: `badge f-${status}` }, FILE_STATUS[status] || status),
        " ",
        h("code", null, path),
      ),
    ),
  );
  const verdict = $("#workflow-verdict");
  if (reviewed && reviewed.evidence.verdict) {
    setAttr(verdict, "class", "text");
    setText(verdict, reviewed.evidence.verdict);
  } else {
    setAttr(verdict, "class", "text muted");
    setText(verdict, reviewed ? "(the reviewer said nothing)" : live ? "Not reviewed yet." : "Not reviewed.");
  }
  renderDiff(inspected.evidence.patch);
}

/** The inspected patch the current attempt waits for a person to review, if any. */
function awaitingReview(flow, live) {
  if (!live || !flow.phases.length) return null;
  const attempt = flow.phases[flow.phases.length - 1].attempt;
  const inspected = newestPhase(flow, "inspect", attempt);
  if (!inspected || inspected.status !== "ok" || inspected.evidence.reviewBy !== "operator") return null;
  return newestPhase(flow, "review", attempt) ? null : inspected;
}

function renderReviewForm(flow, live) {
  const waiting = awaitingReview(flow, live);
  const form = $("#workflow-review");
  form.hidden = !waiting;
  if (!waiting) return;
  $("#workflow-review-help").replaceChildren(
    `Attempt ${waiting.attempt} waits for your verdict on the patch below, digest `,
    h("code", { class: "digest" }, waiting.evidence.digest),
    ". Approving sends that digest; the commit phase checks it against the clone again before importing.",
  );
}

async function sendReview(button, approve) {
  const id = taskView.id;
  const flow = taskView.workflow;
  const waiting = flow ? awaitingReview(flow, Boolean(taskView.task) && !TERMINAL.has(taskView.task.status)) : null;
  if (!waiting) return;
  const digest = waiting.evidence.digest;
  const reason = $("#workflow-review-reason").value.trim();
  const ok = await command(button, {
    title: approve ? "Approve this change?" : "Reject this change?",
    body: approve
      ? `The patch with digest ${digest} is imported as refs/tachograph/self-update/${id} if the clone still has it.`
      : `Nothing of attempt ${waiting.attempt} is imported; the task completes saying so.`,
    label: approve ? "Approve" : "Reject",
    run: () =>
      api(`/api/tasks/${id}/review`, {
        method: "POST",
        body: reason ? { digest, approve, reason } : { digest, approve },
      }),
    errorEl: $("#workflow-action-error"),
    doneEl: $("#workflow-action-done"),
    done: () => (approve ? `Approved ${digest}.` : "Rejected: nothing is imported."),
  });
  if (ok) $("#workflow-review-reason").value = "";
  if (taskView.id === id) await guarded($("#task-error"), () => loadWorkflow(id));
  $("#workflow-title").focus();
}

function wireTaskActions() {
  const errorEl = $("#task-action-error");
  const doneEl = $("#task-action-done");
  $("#task-cancel").addEventListener("click", async (event) => {
    const id = taskView.id;
    await command(event.currentTarget, {
      title: "Cancel this task?",
      body: `Task ${shortId(id)} (${firstLine(taskView.task.prompt, 80)}) will be cancelled; a running agent is stopped.`,
      label: "Cancel task",
      run: () => api(`/api/tasks/${id}/cancel`, { method: "POST" }),
      errorEl,
      doneEl,
      done: (task) => `Task ${shortId(id)} is ${task.status}.`,
    });
    await guarded($("#task-error"), reloadTask);
  });
  $("#task-resolve").addEventListener("click", async (event) => {
    const id = taskView.id;
    const summary = $("#task-summary").value.trim();
    if (!summary) {
      showMessage(errorEl, "Write a resolution summary first: it is recorded with the task.");
      $("#task-summary").focus();
      return;
    }
    const ok = await command(event.currentTarget, {
      title: "Resolve this task?",
      body: `Task ${shortId(id)} becomes completed with your summary: “${firstLine(summary, 200)}”.`,
      label: "Resolve task",
      run: () => api(`/api/tasks/${id}/resolve`, { method: "POST", body: { summary } }),
      errorEl,
      doneEl,
      done: () => `Task ${shortId(id)} resolved.`,
    });
    if (ok) $("#task-summary").value = "";
    await guarded($("#task-error"), reloadTask);
  });
  $("#task-delete").addEventListener("click", async (event) => {
    const id = taskView.id;
    const ok = await command(event.currentTarget, {
      title: "Delete this task?",
      body: `Task ${shortId(id)} disappears from the board and detail views; its events stay in the log.`,
      label: "Delete task",
      run: () => {
        taskView.deleting = id; // no poll of a task being deleted: it would answer 404
        return api(`/api/tasks/${id}`, { method: "DELETE" });
      },
      errorEl,
      doneEl,
      done: () => `Task ${shortId(id)} deleted.`,
    });
    if (ok) {
      setText($("#board-done"), `Task ${shortId(id)} deleted.`);
      location.hash = "#tasks";
    } else {
      taskView.deleting = null;
      await guarded($("#task-error"), reloadTask);
    }
  });
}

function wireWorkflow() {
  $("#workflow-approve").addEventListener("click", (event) => sendReview(event.currentTarget, true));
  $("#workflow-reject").addEventListener("click", (event) => sendReview(event.currentTarget, false));
  $("#workflow-discard").addEventListener("click", async (event) => {
    const button = event.currentTarget;
    const id = taskView.id;
    const flow = taskView.workflow;
    if (!flow || !flow.ref) return;
    let answered = null;
    const ok = await command(button, {
      title: "Discard this imported change?",
      body:
        `${flow.ref} (commit ${shortSha(flow.commit)}) is deleted from the repository of workspace ` +
        `${flow.workspaceId}. The phases and their evidence stay in the log.`,
      label: "Discard change",
      run: () => api(`/api/tasks/${id}/discard`, { method: "POST" }),
      errorEl: $("#workflow-action-error"),
      doneEl: $("#workflow-action-done"),
      done: (result) => {
        answered = result;
        return `Discarded: ${flow.ref} is gone from the repository.`;
      },
    });
    if (taskView.id !== id) return;
    if (ok && answered) {
      taskView.workflow = answered;
      renderWorkflow(answered);
    } else {
      await guarded($("#task-error"), () => loadWorkflow(id));
    }
    // A discarded change cannot be discarded again: focus goes to the workflow's heading.
    if (button.disabled || button.hidden) $("#workflow-title").focus();
    else button.focus();
  });
}

// ---------------------------------------------------------------- sessions

const sessionRows = new Map();

function sessionRow() {
  const cells = {
    title: h("a"),
    status: h("span", { class: "badge" }),
    agent: h("td", { class: "nowrap" }),
    workspace: h("td"),
    summary: h("td", { class: "summary" }),
    last: h("td", { class: "when" }),
    cost: h("td", { class: "cost nowrap" }),
    events: h("a"),
  };
  const row = h(
    "tr",
    null,
    h("td", null, cells.title),
    h("td", null, cells.status),
    cells.agent,
    cells.workspace,
    cells.summary,
    cells.last,
    cells.cost,
    h("td", null, cells.events),
  );
  row.cells_ = cells;
  return row;
}

function updateSessionRow(row, s) {
  const c = row.cells_;
  setText(c.title, s.title || `Session ${shortId(s.id)}`);
  setAttr(c.title, "href", `#sessions/${s.id}`);
  setBadge(c.status, s.status);
  setText(c.agent, s.agent || "—");
  setText(c.workspace, s.workspaceId);
  setText(c.summary, firstLine(s.summary, 160));
  setAttr(c.summary, "title", s.summary || null);
  setText(c.last, s.lastSignalAt ? fmtTime(s.lastSignalAt) : "never");
  if (s.usage) {
    setText(c.cost, s.usage.requests ? usd(s.usage.costUsd) : "—");
    setAttr(c.cost, "title", s.usage.requests ? usageText(s.usage) : "No model requests reported");
  }
  setText(c.events, "Events");
  setAttr(c.events, "href", `#stream/${s.id}`);
  setAttr(c.events, "aria-label", `Events of session ${s.title || shortId(s.id)}`);
  setAttr(row, "data-session-id", s.id);
  setAttr(row, "data-created", s.createdAt);
}

function sessionRowFor(s) {
  let row = sessionRows.get(s.id);
  if (!row) {
    row = sessionRow();
    sessionRows.set(s.id, row);
  }
  updateSessionRow(row, s);
  return row;
}

function stampSessions() {
  showSessionsGuide(sessionRows.size === 0);
  setText($("#sessions-updated"), `Updated ${fmtTime(new Date().toISOString())}${liveNote()}`);
}

async function loadSessions(minPosition) {
  const query = new URLSearchParams({ archived: String($("#sessions-archived").checked) });
  const workspace = $("#sessions-workspace").value;
  if (workspace) query.set("workspaceId", workspace);
  if (minPosition) query.set("minPosition", String(minPosition));
  const data = await api(`/api/sessions?${query}`);
  const rows = data.items.map(sessionRowFor);
  const keep = new Set(data.items.map((s) => s.id));
  for (const id of [...sessionRows.keys()]) if (!keep.has(id)) sessionRows.delete(id);
  syncChildren($("#sessions-rows"), rows);
  stampSessions();
  loadCostChart().catch(() => {
    $("#cost-chart").hidden = true; // the chart is extra: the list stands without it
  });
}

// ---------------------------------------------------------------- usage and cost

/** Dollars as the agents reported them: cents for sums, more digits for small ones. */
function usd(value) {
  const amount = Number(value) || 0;
  if (amount === 0) return "$0";
  return amount >= 1 ? `$${amount.toFixed(2)}` : `$${amount.toPrecision(2)}`;
}

function usageText(u) {
  const cache = u.cacheReadTokens || u.cacheCreationTokens
    ? `, cache ${u.cacheReadTokens} read / ${u.cacheCreationTokens} written`
    : "";
  return `${plural(u.requests, "model request")}: ${u.inputTokens} in, ${u.outputTokens} out${cache}, ${usd(u.costUsd)}`;
}

const SVG = "http://www.w3.org/2000/svg";
const CHART_COLOURS = ["#2f6fb3", "#c2571a", "#2d8a4e", "#8a3fa0", "#a68a00", "#4a4a4a"];

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs || {})) el.setAttribute(name, String(value));
  for (const child of children) el.append(child);
  return el;
}

/** Cost over time per workspace (GET /api/usage/daily): one line per workspace, plain SVG. */
async function loadCostChart() {
  const data = await api("/api/usage/daily");
  const items = data.items || [];
  const figure = $("#cost-chart");
  figure.hidden = items.length === 0;
  if (!items.length) return;
  const days = [...new Set(items.map((i) => i.day))].sort();
  const workspaces = [...new Set(items.map((i) => i.workspace))].sort();
  const top = Math.max(...items.map((i) => i.costUsd), 0.000001);
  const width = 640, height = 200, left = 56, bottom = 24, right = 12, topPad = 10;
  const x = (day) =>
    days.length === 1 ? (left + width - right) / 2 : left + (days.indexOf(day) * (width - left - right)) / (days.length - 1);
  const y = (cost) => topPad + (1 - cost / top) * (height - topPad - bottom);
  const plot = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "Cost per day by workspace" });
  plot.append(
    svg("line", { x1: left, y1: y(0), x2: width - right, y2: y(0), class: "axis" }),
    svg("text", { x: left - 6, y: y(top) + 4, "text-anchor": "end", class: "tick" }, usd(top)),
    svg("text", { x: left - 6, y: y(0) + 4, "text-anchor": "end", class: "tick" }, "$0"),
    svg("text", { x: x(days[0]), y: height - 6, "text-anchor": "start", class: "tick" }, days[0]),
  );
  if (days.length > 1) {
    plot.append(svg("text", { x: x(days.at(-1)), y: height - 6, "text-anchor": "end", class: "tick" }, days.at(-1)));
  }
  const legend = [];
  workspaces.forEach((workspace, n) => {
    const colour = CHART_COLOURS[n % CHART_COLOURS.length];
    const points = items.filter((i) => i.workspace === workspace);
    const path = points.map((i) => `${x(i.day).toFixed(1)},${y(i.costUsd).toFixed(1)}`).join(" ");
    const series = svg("g", { "data-workspace": workspace, stroke: colour, fill: colour });
    if (points.length > 1) series.append(svg("polyline", { points: path, fill: "none", "stroke-width": 2 }));
    for (const i of points) {
      series.append(
        svg("circle", { cx: x(i.day).toFixed(1), cy: y(i.costUsd).toFixed(1), r: 4, "data-day": i.day, "data-cost": i.costUsd },
          svg("title", null, `${workspace} ${i.day}: ${usageText(i)}`)),
      );
    }
    plot.append(series);
    const total = points.reduce((sum, i) => sum + i.costUsd, 0);
    legend.push(h("li", { "data-workspace": workspace }, svg("svg", { class: "swatch", viewBox: "0 0 10 10", "aria-hidden": "true" }, svg("rect", { width: 10, height: 10, rx: 2, fill: colour })), ` ${workspace}: ${usd(total)}`));
  });
  $("#cost-chart-plot").replaceChildren(plot);
  $("#cost-chart-legend").replaceChildren(...legend);
}

/** One session row from the live stream, updated in place (or added, or dropped from the list). */
function applySession(s) {
  const workspace = $("#sessions-workspace").value;
  const listed =
    !s.deleted &&
    Boolean(s.archivedAt) === $("#sessions-archived").checked &&
    (!workspace || s.workspaceId === workspace);
  if (listed) {
    placeByAge($("#sessions-rows"), sessionRowFor(s));
  } else if (sessionRows.has(s.id)) {
    sessionRows.get(s.id).remove();
    sessionRows.delete(s.id);
  }
  stampSessions();
}

views.sessions = () => {
  ensureWorkspaces($("#sessions-error"));
  liveView(loadSessions, $("#sessions-error"));
};

function refreshSessions() {
  if (currentRoute && currentRoute.view === "sessions") route();
}

function rerun() {
  route();
}

// ---------------------------------------------------------------- one session: hook timeline

const sessionView = { id: null, openTurns: new Map(), openCalls: new Map(), focusTurn: null };

async function loadSession(id) {
  const [session, hooks] = await Promise.all([
    api(`/api/sessions/${encodeURIComponent(id)}`),
    api(`/api/sessions/${encodeURIComponent(id)}/hooks?groupBy=turn`),
  ]);
  if (sessionView.id !== id) return;
  renderSessionHead(session);
  renderTimeline(hooks.turns || []);
  const calls = await api(`/api/sessions/${encodeURIComponent(id)}/timeline?limit=50`);
  if (sessionView.id !== id) return;
  renderCalls(calls.items || []);
  showFocusedTurn();
}

/** A link to one turn of a session (the session view opens it and scrolls to it). */
function turnHref(sessionId, turnKey) {
  return turnKey
    ? `#sessions/${sessionId}/turns/${encodeURIComponent(turnKey)}`
    : `#sessions/${sessionId}`;
}

/** Once per navigation to `#sessions/{id}/turns/{key}`: open that turn and bring it into view. */
function showFocusedTurn() {
  const key = sessionView.focusTurn;
  if (!key) return;
  sessionView.focusTurn = null;
  const turn = $(`#calls details.turn[data-turn="${CSS.escape(key)}"]`);
  if (!turn) {
    $("#calls").prepend(
      h("p", { class: "muted", role: "status" }, `Turn ${key} is not among the newest turns shown.`),
    );
    return;
  }
  for (const other of document.querySelectorAll("#calls details.turn.focused")) other.classList.remove("focused");
  turn.open = true;
  sessionView.openCalls.set(key, true);
  turn.classList.add("focused");
  turn.scrollIntoView({ block: "start" });
  $("summary", turn).focus({ preventScroll: true });
}

/** What a turn was given of its agent's learned content: one line per target carried. */
function deliveredToTurn(items) {
  if (!items || !items.length) return null;
  return h(
    "div",
    { class: "delivered" },
    h("p", null, h("strong", null, "Learned content delivered")),
    h(
      "ul",
      null,
      items.map((item) =>
        h(
          "li",
          { "data-delivered-target": item.targetId },
          h("span", { class: "badge" }, item.kind),
          " ",
          h("code", null, item.key),
          " · ",
          item.revisionId
            ? revisionLink(item.revisionId)
            : h("span", { class: "muted" }, "a person's edit"),
          " ",
          h("span", { class: "muted digest" }, shortDigest(item.contentDigest)),
          " ",
          h("span", { class: "delivered-via" }, deliveredVia(item)),
          " ",
          timeEl(item.at),
        ),
      ),
    ),
  );
}

/** The session's title, status and fields: from its GET, or a row the live stream sent. */
function renderSessionHead(session) {
  const title = session.title || `Session ${shortId(session.id)}`;
  setText($("#session-title"), title);
  document.title = `${title} · Tachograph`;
  setBadge($("#session-status"), session.status);
  fields($("#session-fields"), [
    ["ID", h("code", null, session.id)],
    ["Status", badge(session.status)],
    ["Workspace", session.workspaceId],
    ["Agent", session.agent],
    ["Agent session", session.agentSessionId ? h("code", null, session.agentSessionId) : null],
    ["Title", session.titleLocked ? `${session.title} (set by an operator)` : session.title],
    ["Summary", session.summary ? h("span", { class: "pre-line" }, session.summary) : null],
    ["Created", timeEl(session.createdAt)],
    ["First signal", session.firstSignalAt ? timeEl(session.firstSignalAt) : null],
    ["Last signal", session.lastSignalAt ? timeEl(session.lastSignalAt) : null],
    ["Cost", session.usage && session.usage.requests ? h("span", { "data-field": "cost" }, `${usd(session.usage.costUsd)} (${usageText(session.usage)})`) : null],
    ["Archived", session.archivedAt ? timeEl(session.archivedAt) : undefined],
    ["Event stream", streamLink(session.id)],
  ]);
}

const DECIDED_VERBS = { pass: "allowed", deny: "denied", modify: "modified", continue: "continued", ask: "held" };

/** Who decided a call or a row (its `decidedBy`): "allowed by key:alice (approval rule
 * risky-git): release day", "denied by handler guard", "allowed by default". */
function decidedByText(row) {
  const by = row.decidedBy;
  if (!by) return row.handlerId ? `by ${row.handlerId}` : "";
  const verb = DECIDED_VERBS[row.decision] || row.decision || "decided";
  if (by.kind === "operator") {
    const scope = by.forSession ? " for the session" : "";
    const rule = by.id ? ` (approval rule ${by.id})` : "";
    const why = by.reason ? `: ${by.reason}` : "";
    return `${verb}${scope} by ${by.operator || "an operator"}${rule}${why}`;
  }
  if (by.kind === "approval") return `${verb} by approval rule ${by.id}, no operator decided`;
  if (by.kind === "policy") return `${verb} by policy rule ${by.id}`;
  if (by.kind === "handler") return `${verb} by handler ${by.id}`;
  return `${verb} by default: no rule or handler objected`;
}

function decidedByNote(row) {
  const text = decidedByText(row);
  if (!text) return null;
  const kind = row.decidedBy ? row.decidedBy.kind : "";
  return h("span", { class: "muted decided-by", "data-decided-by": kind }, ` ${text}`);
}

function callRow(call) {
  const rewritten = call.rewrittenInput !== null && call.rewrittenInput !== undefined;
  const classes = ["call", call.status === "denied" ? "denied" : "", rewritten ? "rewritten" : ""];
  return h(
    "li",
    { class: classes.filter(Boolean).join(" "), "data-call": call.toolCallId || "" },
    h("span", { class: "tool" }, call.tool || "?"),
    " ",
    h("code", { class: "what" }, call.summary || "(no input recorded)"),
    " ",
    badge(call.decision || "no decision"),
    decidedByNote(call),
    shadowNote(call),
    " ",
    callStatusBadge(call.status),
    call.durationMs !== null && call.durationMs !== undefined ? ` ${call.durationMs} ms` : "",
    call.bytes !== null && call.bytes !== undefined ? ` · ${call.bytes} B` : "",
    call.reason ? h("div", { class: "reason" }, call.reason) : null,
    call.error ? h("div", { class: "reason" }, `Error: ${firstLine(call.error, 200)}`) : null,
    rewritten
      ? h(
          "div",
          { class: "rewrite" },
          "Rewritten from ",
          h("code", null, json(call.originalInput)),
          " to ",
          h("code", null, json(call.rewrittenInput)),
        )
      : null,
  );
}

/** A turn's model requests as the runtime reported them (docs/usage.md). */
function modelRequests(requests) {
  if (!requests || !requests.length) return null;
  return h(
    "ul",
    { class: "model-requests" },
    requests.map((r) =>
      h("li", { "data-model-request": "" },
        timeEl(r.at), " ", h("code", null, r.model || "model"),
        ` ${r.inputTokens} in, ${r.outputTokens} out`,
        r.cacheReadTokens || r.cacheCreationTokens ? `, cache ${r.cacheReadTokens} read / ${r.cacheCreationTokens} written` : "",
        r.durationMs != null ? `, ${r.durationMs} ms` : "",
        ` · ${usd(r.costUsd)}`),
    ),
  );
}

function renderCalls(turns) {
  const items = turns.map((turn, index) => {
    const key = turn.turnId || `@${turn.position}`;
    const prompt = turn.prompt && turn.prompt.text ? firstLine(turn.prompt.text, 100) : "(no prompt)";
    const summary = h(
      "summary",
      null,
      h("span", { class: "turn-name" }, `Turn ${turns.length - index}`),
      " · ",
      timeEl(turn.at),
      " · ",
      h("span", { class: "prompt" }, prompt),
      ` · ${plural(turn.toolCalls, "tool call")} `,
      turn.denials ? h("span", { class: "badge s-deny" }, plural(turn.denials, "denial")) : null,
      turn.failure ? h("span", { class: "badge s-failed" }, "failed") : null,
      turn.learned && turn.learned.length
        ? h("span", { class: "badge s-learned" }, `${turn.learned.length} learned`)
        : null,
      turn.usage && turn.usage.requests
        ? h("span", { class: "turn-cost", title: usageText(turn.usage) }, ` · ${plural(turn.usage.requests, "model request")} · ${usd(turn.usage.costUsd)}`)
        : null,
    );
    const calls = h("ol", { class: "calls" }, turn.calls.map(callRow));
    const agents = turn.subagents.map((agent) =>
      h(
        "div",
        { class: "subagent", "data-subagent": agent.subagentId || "" },
        h("p", null, "Subagent ", h("strong", null, agent.agentType || "agent"), " ",
          h("code", { class: "muted" }, agent.subagentId || ""),
          agent.prompt ? `: ${firstLine(agent.prompt, 100)}` : ""),
        h("ol", { class: "calls" }, agent.calls.map(callRow)),
        agent.summary ? h("p", { class: "muted" }, firstLine(agent.summary, 200)) : null,
      ),
    );
    const ending = [
      turn.stop && turn.stop.summary ? h("p", { class: "stop" }, "Stop: ", firstLine(turn.stop.summary, 300)) : null,
      turn.failure ? h("p", { class: "error" }, `Failed: ${turn.failure.error || "unknown"}`) : null,
    ];
    const open = sessionView.openCalls.get(key) ?? index === 0;
    const details = h(
      "details",
      { class: "turn", open, "data-turn": key },
      summary,
      deliveredToTurn(turn.learned),
      modelRequests(turn.modelRequests),
      calls,
      ...agents,
      ...ending,
    );
    details.addEventListener("toggle", () => sessionView.openCalls.set(key, details.open));
    return details;
  });
  if (!items.length) items.push(h("p", { class: "muted" }, "No recorded activity for this session."));
  $("#calls").replaceChildren(...items);
}

/** The session's export, fetched with the key (a plain link could not send it). */
async function downloadExport() {
  const id = sessionView.id;
  const key = currentKey();
  const response = await fetch(`/api/sessions/${encodeURIComponent(id)}/export`, {
    headers: key ? { "x-tachograph-key": key } : {},
    cache: "no-store",
  });
  if (!response.ok) {
    let message = `The server answered ${response.status}.`;
    try {
      message = (await response.json()).message || message;
    } catch {
      // not JSON: keep the status
    }
    throw new ApiError(response.status, `http_${response.status}`, message);
  }
  const url = URL.createObjectURL(await response.blob());
  const anchor = h("a", { href: url, download: `session-${id}.ndjson` });
  document.body.append(anchor);
  anchor.click();
  anchor.remove();
  URL.revokeObjectURL(url);
}

function setAllCalls(open) {
  for (const details of document.querySelectorAll("#calls details.turn")) {
    details.open = open;
    sessionView.openCalls.set(details.dataset.turn, open);
  }
}

const OUTCOME_RANK = { deny: 3, continue: 2, modify: 1, pass: 0 };

function renderTimeline(turns) {
  let number = 0;
  const items = turns.map((turn) => {
    if (turn.turnId) number += 1;
    const key = turn.turnId || "(none)";
    const records = turn.records;
    const events = [...new Set(records.map((r) => r.event))];
    const failures = records.filter((r) => r.failure).length;
    const strongest = records.reduce(
      (best, r) => ((OUTCOME_RANK[r.outcome] ?? 0) > (OUTCOME_RANK[best] ?? 0) ? r.outcome : best),
      "pass",
    );
    const open = sessionView.openTurns.get(key) || false;
    const summary = h(
      "summary",
      null,
      h("span", { class: "turn-name" }, turn.turnId ? `Turn ${number}` : "Outside a turn"),
      " ",
      turn.turnId ? h("code", { class: "muted" }, shortId(turn.turnId)) : null,
      " · ",
      timeEl(records[0] && records[0].at),
      ` · ${records.length} record${records.length === 1 ? "" : "s"} · ${events.join(", ")} `,
      badge(strongest),
      " ",
      failures ? h("span", { class: "badge s-failed" }, `${failures} failure${failures === 1 ? "" : "s"}`) : null,
    );
    const table = h(
      "table",
      { class: "grid timeline-table" },
      h(
        "thead",
        null,
        h(
          "tr",
          null,
          ["At", "Event", "Handler", "Outcome", "Failure", "Reason", "Duration"].map((c) =>
            h("th", { scope: "col" }, c),
          ),
        ),
      ),
      h(
        "tbody",
        null,
        records.map((r) =>
          h(
            "tr",
            { "data-handler": r.handlerId || "" },
            h("td", { class: "when" }, h("time", { datetime: r.at, title: fmtTime(r.at) }, fmtClock(r.at))),
            h("td", null, r.event),
            h("td", null, r.handlerId ? h("code", null, r.handlerId) : h("span", { class: "muted" }, "no handler")),
            h("td", null, badge(r.outcome)),
            h("td", null, r.failure ? h("span", { class: "badge s-failed" }, r.failure) : "—"),
            h("td", { class: "reason" }, r.reason || ""),
            h("td", { class: "num" }, r.durationMs === null || r.durationMs === undefined ? "—" : `${r.durationMs} ms`),
          ),
        ),
      ),
    );
    const details = h("details", { class: "turn", open, "data-turn": key }, summary, table);
    details.addEventListener("toggle", () => sessionView.openTurns.set(key, details.open));
    return details;
  });
  if (!items.length) items.push(h("p", { class: "muted" }, "No hook records for this session."));
  $("#timeline").replaceChildren(...items);
}

views.session = (id, where) => {
  if (sessionView.id !== id) {
    sessionView.openTurns = new Map();
    sessionView.openCalls = new Map();
  }
  sessionView.id = id;
  sessionView.focusTurn = (where && where.turn) || null;
  guarded($("#session-error"), () => loadSession(id));
};

function setAllTurns(open) {
  for (const details of document.querySelectorAll("#timeline details.turn")) {
    details.open = open;
    sessionView.openTurns.set(details.dataset.turn, open);
  }
}

// ---------------------------------------------------------------- auditor search

const ACTIVITY_FILTERS = ["contains", "tool", "workspaceId", "sessionId", "outcome", "ruleId", "since", "until"];
const activityView = { next: null, query: "" };

function localToIso(value) {
  return value ? new Date(value).toISOString() : "";
}

function isoToLocal(value) {
  if (!value) return "";
  const d = new Date(value);
  if (Number.isNaN(d.getTime())) return "";
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

function activityRow(item) {
  return h(
    "tr",
    { "data-position": String(item.position), class: item.status === "denied" ? "denied" : "" },
    h("td", { class: "when" }, timeEl(item.at)),
    h("td", null, link(`#sessions/${item.sessionId}`, sessionName(item.sessionId, item.sessionTitle))),
    h("td", null, item.tool || "?"),
    h("td", null, h("code", null, item.summary || "")),
    h("td", null, badge(item.decision), decidedByNote(item), shadowNote(item)),
    h("td", null, callStatusBadge(item.status)),
  );
}

/** A shadow rule that would have decided the call (it changed nothing: docs/policy.md). */
function shadowNote(item) {
  const hit = item.policy;
  if (!hit || hit.mode !== "shadow") return null;
  return h("span", { class: "muted shadow-hit" }, ` shadow rule ${hit.ruleId} would have: ${hit.outcome}`);
}

async function loadActivity(query, append) {
  const params = new URLSearchParams(query);
  params.set("limit", "50");
  if (append && activityView.next) params.set("before", String(activityView.next));
  const page = await api(`/api/activity?${params}`);
  if (activityView.query !== query) return;
  activityView.next = page.next;
  const rows = page.items.map(activityRow);
  if (append) $("#activity-rows").append(...rows);
  else if (!rows.length) showActivityGuide($("#activity-rows"));
  else $("#activity-rows").replaceChildren(...rows);
  $("#activity-more").hidden = !page.next;
}

views.activity = (query) => {
  const params = new URLSearchParams(query);
  const form = $("#activity-form");
  for (const name of ACTIVITY_FILTERS) {
    const value = params.get(name) || "";
    form.elements[name].value = name === "since" || name === "until" ? isoToLocal(value) : value;
  }
  activityView.query = query;
  activityView.next = null;
  guarded($("#activity-error"), () => loadActivity(query, false));
};

function wireActivity() {
  $("#activity-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const form = event.target;
    const params = new URLSearchParams();
    for (const name of ACTIVITY_FILTERS) {
      const raw = form.elements[name].value.trim();
      const value = name === "since" || name === "until" ? localToIso(raw) : raw;
      if (value) params.set(name, value);
    }
    location.hash = `activity?${params}`;
  });
  $("#activity-more").addEventListener("click", () =>
    guarded($("#activity-error"), () => loadActivity(activityView.query, true)),
  );
}

// ---------------------------------------------------------------- autonomy

const SETTINGS = ["evolution", "skillCreation", "factRetention", "selfUpdate"];

async function loadSettings() {
  const settings = await api("/api/settings/autonomy");
  const form = $("#autonomy-settings");
  for (const name of SETTINGS) form.elements[name].checked = Boolean(settings[name]);
  form.dataset.loaded = "true";
  showEvolutionGuide(settings.evolution);
}

function wireSettings() {
  const form = $("#autonomy-settings");
  form.addEventListener("submit", (event) => event.preventDefault());
  for (const name of SETTINGS) {
    const box = form.elements[name];
    box.addEventListener("change", async () => {
      const wanted = box.checked;
      showMessage($("#settings-error"), "");
      setText($("#settings-done"), "");
      box.disabled = true;
      try {
        const settings = await api("/api/settings/autonomy", { method: "PATCH", body: { [name]: wanted } });
        box.checked = Boolean(settings[name]);
        setText($("#settings-done"), `${name} is now ${box.checked ? "on" : "off"}.`);
        showEvolutionGuide(settings.evolution);
      } catch (error) {
        box.checked = !wanted;
        showMessage($("#settings-error"), `Refused: ${describe(error)}`);
      } finally {
        refreshEnabled(box);
      }
    });
  }
}

const autonomyView = { signals: null, revisions: null, pipeline: null };

// How each part of a pipeline step reads, for one and for many.
const PIPELINE_WORDS = {
  outcome: ["outcome", "outcomes"],
  failure: ["failure", "failures"],
  none: ["nothing to learn", "nothing to learn"],
  overlay: ["overlay lesson", "overlay lessons"],
  skill: ["skill", "skills"],
  fact: ["fact", "facts"],
  sessions: ["session", "sessions"],
  taskAttempts: ["task attempt", "task attempts"],
  items: ["item carried", "items carried"],
};

/** One step of the pipeline: a headline count, its non-zero parts, and when it last happened. */
function pipelineStep(name, label, count, parts, latestAt) {
  return h(
    "li",
    { class: "pipeline-step", "data-step": name },
    h("span", { class: "step-label" }, label),
    h("span", { class: "step-count" }, String(count)),
    h(
      "ul",
      { class: "step-parts" },
      parts
        .filter(([, n]) => n)
        .map(([what, n]) => {
          const [one, many] = PIPELINE_WORDS[what] || [what, what];
          return h("li", { "data-part": what }, `${n} ${n === 1 ? one : many}`);
        }),
    ),
    h("span", { class: "muted step-latest" }, latestAt ? ["latest ", timeEl(latestAt)] : "none yet"),
  );
}

async function loadPipeline() {
  const p = await api("/api/autonomy/pipeline");
  const signature = JSON.stringify(p);
  if (signature === autonomyView.pipeline) return;
  autonomyView.pipeline = signature;
  const { signals, decisions, revisions, deliveries, reverts } = p;
  const entries = (counts) => Object.entries(counts);
  $("#pipeline-steps").replaceChildren(
    pipelineStep("signals", "Signals in", signals.total,
      [...entries(signals.byKind), ...entries(signals.byStatus)], signals.latestAt),
    pipelineStep("decisions", "Decisions made", decisions.total, entries(decisions.byStrategy), decisions.latestAt),
    pipelineStep("revisions", "Lessons learned", revisions.learned, [], revisions.latestAt),
    pipelineStep("deliveries", "Deliveries made", deliveries.count,
      [["sessions", deliveries.sessions], ["taskAttempts", deliveries.taskAttempts], ["items", deliveries.items]],
      deliveries.latestAt),
    pipelineStep("reverts", "Reverts", reverts.count, [], reverts.latestAt),
  );
  setText($("#pipeline-updated"), `Read ${fmtTime(new Date().toISOString())}`);
}

/** Swap a list's rows; a focused action button inside gets focus back on its replacement. */
function replaceKeepingFocus(container, nodes) {
  const active = document.activeElement;
  let selector = null;
  if (active && container.contains(active)) {
    if (active.dataset.revert) selector = `[data-revert="${active.dataset.revert}"]`;
    else if (active.dataset.action) {
      selector = `[data-action="${active.dataset.action}"][data-signal="${active.dataset.signal}"]`;
    }
  }
  container.replaceChildren(...nodes);
  const again = selector && container.querySelector(selector);
  if (again) again.focus();
}

async function loadSignals() {
  const status = $("#signals-status").value;
  const data = await api(`/api/autonomy/signals${status ? `?status=${encodeURIComponent(status)}` : ""}`);
  const signature = JSON.stringify([status, data.items]);
  if (signature === autonomyView.signals) return;
  autonomyView.signals = signature;
  const rows = data.items.map((s) => {
    const actions = [];
    if (s.status === "pending" || s.status === "dead-letter") {
      actions.push(
        gated(
          h("button", { type: "button", "data-action": "ignore", "data-signal": s.id }, "Ignore"),
          "operator",
          "ignoring signals",
        ),
      );
    }
    if (s.status === "dead-letter") {
      actions.push(
        gated(
          h("button", { type: "button", "data-action": "retry", "data-signal": s.id }, "Retry"),
          "operator",
          "retrying signals",
        ),
      );
    }
    const evidence = s.kind === "failure" ? [s.failureClass, s.failure].filter(Boolean).join(": ") : s.outcome;
    return h(
      "tr",
      { "data-signal-id": s.id },
      h("td", { class: "when" }, timeEl(s.createdAt || s.at)),
      h("td", { class: "nowrap" }, s.agentId),
      h("td", null, s.kind),
      h("td", { class: "summary" }, firstLine(s.goal, 120)),
      h("td", { class: "summary" }, firstLine(evidence, 160)),
      h(
        "td",
        null,
        badge(s.status),
        s.attempts ? h("span", { class: "muted" }, ` ${s.attempts} attempt${s.attempts === 1 ? "" : "s"}`) : null,
        s.strategy ? h("div", { class: "muted" }, `decision: ${s.strategy}`) : null,
        s.lastError ? h("div", { class: "error" }, firstLine(s.lastError, 160)) : null,
        s.reason ? h("div", { class: "muted" }, firstLine(s.reason, 160)) : null,
      ),
      h(
        "td",
        null,
        h(
          "div",
          { class: "row-actions" },
          actions,
          s.sessionId ? link(`#sessions/${s.sessionId}`, "Session") : null,
          streamLink(s.id),
          s.targetId ? streamLink(s.targetId, "Target events") : null,
        ),
      ),
    );
  });
  replaceKeepingFocus($("#signals-rows"), rows);
  $("#signals-empty").hidden = rows.length > 0;
}

function wireSignals() {
  $("#signals-rows").addEventListener("click", async (event) => {
    const button = event.target.closest("button[data-action]");
    if (!button) return;
    const id = button.dataset.signal;
    const action = button.dataset.action;
    const ok = await command(button, {
      title: action === "ignore" ? "Ignore this signal?" : "Retry this signal?",
      body:
        action === "ignore"
          ? `Signal ${shortId(id)} will never be reflected on.`
          : `Signal ${shortId(id)} goes back to pending and restarts from attempt 0.`,
      label: action === "ignore" ? "Ignore signal" : "Retry signal",
      run: () => api(`/api/autonomy/signals/${id}/${action}`, { method: "POST" }),
      errorEl: $("#signals-error"),
      doneEl: $("#signals-done"),
      done: () => `Signal ${shortId(id)} ${action === "ignore" ? "ignored" : "queued for retry"}.`,
    });
    if (ok) await reload(loadSignals, $("#autonomy-error"), `[data-signal-id="${id}"] button, #signals-refresh`);
  });
  $("#signals-refresh").addEventListener("click", () => guarded($("#autonomy-error"), loadSignals));
  $("#signals-status").addEventListener("change", () => guarded($("#autonomy-error"), loadSignals));
}

function targetKey(kind, agentId, key) {
  return `${kind}/${agentId}/${key}`;
}

async function loadRevisions() {
  const [revisions, targets] = await Promise.all([
    api("/api/autonomy/revisions"),
    api("/api/autonomy/targets").catch(() => ({ items: [] })),
  ]);
  const signature = JSON.stringify([revisions.items, targets.items]);
  if (signature === autonomyView.revisions) return;
  autonomyView.revisions = signature;
  const targetByKey = new Map(
    (targets.items || []).map((t) => [targetKey(t.kind || t.targetKind, t.agentId, t.key), t]),
  );
  const groups = new Map();
  for (const r of revisions.items) {
    const key = targetKey(r.targetKind, r.agentId, r.key);
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(r);
  }
  // The API lists revisions newest first; targets appear in the order they last changed.
  const sections = [];
  for (const [key, list] of groups) {
    const first = list[0];
    const target = targetByKey.get(key);
    const targetId = target ? target.id : null;
    const headingId = `target-${sections.length}`;
    sections.push(
      h(
        "section",
        { class: "target panel", "aria-labelledby": headingId, "data-target": key },
        h(
          "h4",
          { id: headingId },
          h("span", { class: "badge" }, first.targetKind),
          " ",
          first.agentId,
          " · ",
          h("code", null, first.key),
          target && target.evolutionManaged === false ? h("span", { class: "badge s-user" }, "user-owned") : null,
          targetId ? [" ", streamLink(targetId, "Events")] : null,
        ),
        h("ol", { class: "revisions" }, list.map((r) => revisionItem(r, target))),
      ),
    );
  }
  if (!sections.length) sections.push(h("p", { class: "muted" }, "No learned revisions yet."));
  replaceKeepingFocus($("#revisions"), sections);
}

function revisionItem(r, target) {
  const notes = [];
  if (target && target.latestRevisionId === r.id) notes.push(h("span", { class: "badge s-ok" }, "latest"));
  if (r.revertsRevisionId) notes.push(h("span", { class: "badge s-cancelled" }, `compensates ${shortId(r.revertsRevisionId)}`));
  if (r.revertedByRevisionId) notes.push(h("span", { class: "badge s-failed" }, `reverted by ${shortId(r.revertedByRevisionId)}`));
  return h(
    "li",
    { class: "revision", "data-revision-id": r.id },
    h(
      "div",
      { class: "record-head" },
      timeEl(r.at),
      " ",
      h("a", { href: `#revisions/${r.id}`, "aria-label": `Revision ${shortId(r.id)}: content, source and deliveries` },
        h("code", null, shortId(r.id))),
      " ",
      notes,
      " ",
      h("span", { class: "muted digest" }, `${shortDigest(r.previousContentDigest) || "∅"} → ${shortDigest(r.contentDigest) || "∅"}`),
      r.signalId ? [" ", h("span", { class: "muted" }, `signal ${shortId(r.signalId)}`)] : null,
      r.actor ? [" ", h("span", { class: "muted" }, `by ${r.actor}`)] : null,
      target ? [" ", streamLink(target.id, "Events")] : null,
      " ",
      gated(
        h("button", { type: "button", "data-revert": r.id, "aria-label": `Revert revision ${shortId(r.id)}` }, "Revert"),
        "operator",
        "reverting learned revisions",
      ),
    ),
    r.content === null || r.content === undefined || r.content === ""
      ? h("p", { class: "muted" }, "(no content)")
      : h("pre", { class: "text" }, json(r.content)),
  );
}

/** Re-read a list after a command, keeping the command's message, and put focus back. */
async function reload(load, errorEl, focusSelector) {
  try {
    await load();
  } catch (error) {
    showMessage(errorEl, describe(error));
  }
  const target = document.querySelector(focusSelector);
  if (target) target.focus();
}

function wireRevisions() {
  $("#revisions").addEventListener("click", async (event) => {
    const button = event.target.closest("button[data-revert]");
    if (!button) return;
    const id = button.dataset.revert;
    const ok = await command(button, {
      title: "Revert this revision?",
      body: `A compensating revision restores the content before ${shortId(id)}. Nothing is deleted.`,
      label: "Revert revision",
      run: () => api(`/api/autonomy/revisions/${id}/revert`, { method: "POST" }),
      errorEl: $("#revisions-error"),
      doneEl: $("#revisions-done"),
      done: (r) => `Revision ${shortId(id)} reverted${r && r.id ? ` by ${shortId(r.id)}` : ""}.`,
    });
    await reload(loadRevisions, $("#autonomy-error"), `button[data-revert="${id}"]`);
  });
  $("#revisions-refresh").addEventListener("click", () => guarded($("#autonomy-error"), loadRevisions));
}

views.autonomy = () => {
  // Command refusals stay in their own alerts; polling failures go to the view's alert.
  autonomyView.signals = null;
  autonomyView.revisions = null;
  autonomyView.pipeline = null;
  guarded($("#autonomy-error"), loadSettings);
  every(AUTONOMY_INTERVAL_MS, loadPipeline, $("#autonomy-error"));
  every(AUTONOMY_INTERVAL_MS, loadSignals, $("#autonomy-error"));
  every(AUTONOMY_INTERVAL_MS, loadRevisions, $("#autonomy-error"));
};

// The Policy view lives in policy.js.
views.policy = enterPolicy;

// ---------------------------------------------------------------- one revision

const DELIVERIES_PAGE = 50;
const revisionView = { id: null, revision: null, signature: null, before: null };

function deliveriesText(n) {
  return n === 1 ? "1 delivery" : `${n} deliveries`;
}

function revisionLink(id) {
  return h("a", { href: `#revisions/${id}`, "aria-label": `Revision ${shortId(id)}` }, h("code", null, shortId(id)));
}

/** The turn of a signal in its session's timeline: its turn id, else `@<position of its prompt>`
 * (a hook-derived trace id without a turn id is `<sessionId>:<that position>`). */
function signalTurnKey(signal) {
  if (signal.turnId) return signal.turnId;
  const prefix = `${signal.sessionId}:`;
  const trace = String(signal.traceId || "");
  if (signal.sessionId && trace.startsWith(prefix) && /^\d+$/.test(trace.slice(prefix.length))) {
    return `@${trace.slice(prefix.length)}`;
  }
  return null;
}

async function loadRevision(id) {
  const path = `/api/autonomy/revisions/${encodeURIComponent(id)}`;
  const revision = await api(path);
  const scope = revision.workspaceId ? `?workspaceId=${encodeURIComponent(revision.workspaceId)}` : "";
  const targetPath = `/api/autonomy/targets/${revision.targetKind}/${encodeURIComponent(revision.agentId)}/${revision.key}${scope}`;
  const [target, signal, deliveries] = await Promise.all([
    api(targetPath),
    revision.signalId ? api(`/api/autonomy/signals/${revision.signalId}`) : null,
    api(`${path}/deliveries?limit=${DELIVERIES_PAGE}`),
  ]);
  if (revisionView.id !== id) return;
  const signature = JSON.stringify([revision, target, signal, deliveries]);
  if (signature === revisionView.signature) return;
  revisionView.signature = signature;
  renderRevision(revision, target, signal);
  renderDeliveries(revision, deliveries, false);
}

function revisionState(r, target) {
  if (r.revertedByRevisionId) return "reverted";
  if (r.revertsRevisionId) return "compensation";
  return target && target.latestRevisionId === r.id ? "latest" : "superseded";
}

function renderRevision(r, target, signal) {
  revisionView.revision = r;
  const title = `Revision ${shortId(r.id)}`;
  setText($("#revision-title"), title);
  document.title = `${title} · Tachograph`;
  setBadge($("#revision-state"), revisionState(r, target));
  const superseded = r.supersedes;
  fields($("#revision-fields"), [
    ["ID", h("code", null, r.id)],
    ["Target", [h("span", { class: "badge" }, r.targetKind), " ", r.agentId, " · ", h("code", null, r.key)]],
    ["Recorded", timeEl(r.at)],
    ["By", r.actor],
    ["Digest", h("span", { class: "digest" }, `${shortDigest(r.previousContentDigest) || "∅"} → ${shortDigest(r.contentDigest) || "∅"}`)],
    ["Target now", target ? (target.evolutionManaged ? "evolution-managed" : h("span", { class: "badge s-user" }, "user-owned")) : null],
    [
      "Latest of the target",
      target && target.latestRevisionId && ![r.id, r.revertedByRevisionId].includes(target.latestRevisionId)
        ? revisionLink(target.latestRevisionId)
        : undefined,
    ],
    ["Compensates", r.revertsRevisionId ? revisionLink(r.revertsRevisionId) : undefined],
    ["Reverted by", r.revertedByRevisionId ? revisionLink(r.revertedByRevisionId) : undefined],
    [
      "Supersedes",
      superseded
        ? [
            `${deliveriesText(superseded.deliveries.count)} of `,
            revisionLink(superseded.revisionId),
            superseded.deliveries.latestAt ? [", the latest ", timeEl(superseded.deliveries.latestAt)] : "",
          ]
        : undefined,
    ],
    ["Events", target ? streamLink(target.id, "Target events") : null],
  ]);
  const content = $("#revision-content");
  setText(content, r.content === null || r.content === undefined || r.content === "" ? "(no content)" : json(r.content));
  content.classList.toggle("muted", !r.content);
  renderSourceSignal(r, signal);
  setEnabled($("#revision-revert"), true);
}

function renderSourceSignal(r, signal) {
  const dl = $("#revision-signal");
  if (!signal) {
    const why = r.revertsRevisionId
      ? `None: a compensation, made by ${r.actor || "an operator"}.`
      : "None recorded.";
    dl.replaceChildren(h("dt", null, "Signal"), h("dd", { class: "muted" }, why));
    return;
  }
  const turnKey = signalTurnKey(signal);
  const evidence = signal.kind === "failure"
    ? [signal.failureClass, signal.failure].filter(Boolean).join(": ")
    : signal.outcome;
  fields(dl, [
    ["Signal", [h("code", null, shortId(signal.id)), " ", streamLink(signal.id)]],
    ["Kind", signal.kind],
    ["Status", [badge(signal.status), signal.strategy ? ` decision: ${signal.strategy}` : ""]],
    ["Received", timeEl(signal.createdAt)],
    ["Agent", signal.agentId],
    ["Trace", h("code", null, signal.traceId)],
    [
      "Session",
      signal.sessionId
        ? h("a", { href: `#sessions/${signal.sessionId}`, "data-link": "signal-session" }, sessionName(signal.sessionId, signal.sessionTitle))
        : null,
    ],
    [
      "Turn",
      signal.sessionId && turnKey
        ? h("a", { href: turnHref(signal.sessionId, turnKey), "data-link": "signal-turn" }, `Turn ${turnKey}`)
        : null,
    ],
    ["Goal", h("span", { class: "pre-line" }, signal.goal)],
    [signal.kind === "failure" ? "Failure" : "Outcome", evidence ? h("span", { class: "pre-line" }, evidence) : null],
  ]);
}

function deliveryRow(revision, d) {
  const to = d.sessionId
    ? h("a", { href: `#sessions/${d.sessionId}`, "data-link": "delivery-session" }, sessionName(d.sessionId, d.sessionTitle))
    : d.taskId
      ? h("a", { href: `#tasks/${d.taskId}`, "data-link": "delivery-task" }, `Task ${shortId(d.taskId)}`)
      : h("span", { class: "muted" }, "—");
  const where = d.sessionId
    ? d.turnId
      ? h("a", { href: turnHref(d.sessionId, d.turnId), "data-link": "delivery-turn" }, `Turn ${d.turnId}`)
      : d.event ? "" : h("span", { class: "muted" }, "a turn without an id")
    : d.attempt !== null && d.attempt !== undefined
      ? `attempt ${d.attempt}`
      : "";
  const via = h("span", { class: "delivered-via" }, deliveredVia(d));
  const whole = d.contentDigest === revision.contentDigest;
  return h(
    "tr",
    { "data-delivery": d.dispatchId || `${d.taskId}:${d.attempt}`, "data-position": d.position },
    h("td", { class: "when" }, timeEl(d.at)),
    h("td", null, to),
    h("td", null, where, " ", via),
    h(
      "td",
      { class: "nowrap" },
      h("span", { class: "digest" }, shortDigest(d.contentDigest)),
      whole ? "" : h("span", { class: "muted" }, " (its newest part)"),
    ),
  );
}

function renderDeliveries(revision, page, append) {
  const body = $("#revision-deliveries");
  const rows = page.items.map((d) => deliveryRow(revision, d));
  if (append) body.append(...rows);
  else body.replaceChildren(...rows);
  const latest = page.latestAt ? `, the latest ${fmtTime(page.latestAt)}` : "";
  setText($("#revision-deliveries-summary"), page.count ? `${deliveriesText(page.count)}${latest}` : "none");
  $("#revision-deliveries-empty").hidden = body.children.length > 0;
  const last = page.items[page.items.length - 1];
  revisionView.before = page.items.length === DELIVERIES_PAGE && last ? last.position : null;
  $("#revision-deliveries-more").hidden = revisionView.before === null;
}

async function olderDeliveries() {
  const id = revisionView.id;
  const before = revisionView.before;
  if (!id || before === null) return;
  const page = await api(`/api/autonomy/revisions/${id}/deliveries?limit=${DELIVERIES_PAGE}&before=${before}`);
  if (revisionView.id === id) renderDeliveries(revisionView.revision, page, true);
}

function wireRevision() {
  $("#revision-actions").addEventListener("submit", (event) => event.preventDefault());
  $("#revision-revert").addEventListener("click", async () => {
    const button = $("#revision-revert");
    const id = revisionView.id;
    await command(button, {
      title: "Revert this revision?",
      body: `A compensating revision restores the content before ${shortId(id)}; the agent's next delivery no longer carries it. Nothing is deleted.`,
      label: "Revert revision",
      run: () => api(`/api/autonomy/revisions/${id}/revert`, { method: "POST" }),
      errorEl: $("#revision-action-error"),
      doneEl: $("#revision-action-done"),
      done: (r) => `Revision ${shortId(id)} reverted${r && r.id ? ` by ${shortId(r.id)}` : ""}.`,
    });
    // Refused or not, the revision may have changed (another operator's revert): read it again.
    if (revisionView.id === id) {
      revisionView.signature = null;
      await reload(() => loadRevision(id), $("#revision-error"), "#revision-revert");
    }
  });
  $("#revision-refresh").addEventListener("click", () => {
    revisionView.signature = null;
    guarded($("#revision-error"), () => loadRevision(revisionView.id));
  });
  $("#revision-deliveries-more").addEventListener("click", () => guarded($("#revision-error"), olderDeliveries));
}

views.revision = (id) => {
  if (revisionView.id !== id) {
    // Another revision: nothing of the one shown before may be mistaken for it.
    showMessage($("#revision-action-error"), "");
    setText($("#revision-action-done"), "");
    setBadge($("#revision-state"), "");
    for (const sel of ["#revision-fields", "#revision-signal", "#revision-deliveries"]) $(sel).replaceChildren();
    setText($("#revision-content"), "");
    setText($("#revision-deliveries-summary"), "");
    $("#revision-deliveries-more").hidden = true;
    setEnabled($("#revision-revert"), false);
  }
  revisionView.id = id;
  revisionView.signature = null;
  guarded($("#revision-error"), () => loadRevision(id));
};

// ---------------------------------------------------------------- audit

async function runVerify() {
  const out = $("#verify-result");
  const button = $("#verify-run");
  button.disabled = true;
  out.replaceChildren(h("p", { class: "muted" }, "Verifying the whole log…"));
  try {
    const report = await api("/api/log/verify");
    const lines = [];
    if (report.ok) {
      lines.push(h("p", { class: "ok verdict" }, "✔ Log verified: the hash chain is intact."));
    } else {
      const b = report.break || {};
      lines.push(
        h("p", { class: "error verdict" }, `✘ Log broken at position ${b.position}: ${b.kind}. ${b.message || ""}`),
      );
    }
    const dl = h("dl", { class: "fields" });
    const head = report.head || {};
    const checkpoints = report.checkpoints || {};
    fields(dl, [
      ["Events", String(report.events)],
      ["Head position", head.position === undefined ? null : String(head.position)],
      ["Head link", head.link ? h("code", { class: "digest" }, head.link) : null],
      [
        "Checkpoints",
        `${checkpoints.checked ?? 0} of ${checkpoints.total ?? 0} checked · ` +
          `${checkpoints.signed ?? 0} signed · ${checkpoints.unsigned ?? 0} unsigned`,
      ],
    ]);
    lines.push(dl);
    for (const warning of report.warnings || []) lines.push(h("p", { class: "warn" }, `Warning: ${warning}`));
    out.replaceChildren(...lines);
  } catch (error) {
    out.replaceChildren(h("p", { class: "error" }, describe(error)));
  } finally {
    button.disabled = false;
  }
}

async function loadCheckpoint() {
  const data = await api("/api/log/checkpoints?limit=1");
  const latest = data.items[0];
  const dl = h("dl", { class: "fields" });
  if (!latest) {
    $("#checkpoint").replaceChildren(
      h("p", { class: "muted" }, `No checkpoint yet: one is recorded every ${data.interval} events and at shutdown.`),
    );
    return;
  }
  fields(dl, [
    ["Sequence", String(latest.seq)],
    ["Position", String(latest.position)],
    ["Kind", latest.kind],
    ["Recorded", timeEl(latest.recordedAt)],
    ["Signature", badge(latest.signatureState)],
    ["Key", latest.keyId ? h("code", null, latest.keyId) : "unsigned"],
    ["Link", h("code", { class: "digest" }, latest.link)],
  ]);
  $("#checkpoint").replaceChildren(dl);
}

async function loadHealth() {
  const health = await api("/api/health");
  const rows = Object.entries(health.projections || {}).map(([name, p]) =>
    h("tr", null, h("td", null, name), h("td", { class: "num" }, String(p.position)), h("td", { class: "num" }, String(p.lag))),
  );
  $("#health").replaceChildren(
    h("p", null, badge(health.status), ` database ${health.database} · scheduler ${health.scheduler} · executor ${health.executor}`),
    h(
      "table",
      { class: "grid" },
      h("caption", { class: "visually-hidden" }, "Projection positions"),
      h("thead", null, h("tr", null, h("th", { scope: "col" }, "Projection"), h("th", { scope: "col" }, "Position"), h("th", { scope: "col" }, "Lag"))),
      h("tbody", null, rows),
    ),
  );
}

views.audit = () => {
  guarded($("#audit-error"), loadCheckpoint);
  guarded($("#audit-error"), loadHealth);
  runVerify();
};

// ---------------------------------------------------------------- a stream's events

views.stream = (id) => {
  setText($("#stream-title"), `Events of ${shortId(id)}`);
  $("#stream-rows").replaceChildren();
  guarded($("#stream-error"), async () => {
    const stream = await api(`/api/streams/${encodeURIComponent(id)}`);
    setText($("#stream-title"), `Events of ${stream.type} ${stream.aggregateId}`);
    document.title = `${stream.type} events · Tachograph`;
    $("#stream-rows").replaceChildren(
      ...stream.events.map((e) => {
        const compact = JSON.stringify(e.data);
        return h(
          "tr",
          null,
          h("td", { class: "num" }, String(e.position)),
          h("td", { class: "num" }, String(e.version)),
          h("td", null, h("code", null, e.type)),
          h("td", null, timeEl(e.at)),
          h(
            "td",
            { class: "data" },
            h("details", null, h("summary", null, firstLine(compact, 100)), h("pre", { class: "text" }, JSON.stringify(e.data, null, 2))),
          ),
        );
      }),
    );
  });
};

// ---------------------------------------------------------------- live updates

// The page follows GET /api/stream (Server-Sent Events) with fetch() and parses the events
// itself: EventSource cannot send the x-tachograph-key header, and a key in the URL would
// land in access logs and the browser history. On a reconnect it sends Last-Event-ID (the
// log position of the last message applied), so the server resumes with nothing missed.
const LIVE_RETRY_MS = [1000, 2000, 5000, 10000, 30000];
// Only while the stream is down do the list views poll, this slowly.
const FALLBACK_INTERVAL_MS = 30000;

const live = {
  up: false,
  lastId: null, // log position the stream has delivered up to: its last message's, else where it began
  after: null, // where the open stream started: lists read at least this far (minPosition)
  abort: null, // the open request's AbortController
  failures: 0,
  retryTimer: null,
  blocked: false, // refused (401, 403): wait until another key is entered
  view: null, // the shown view's list loader: {token, load, errorEl}
  loading: 0, // list loads in flight; messages wait for them, so a list never overwrites them
  held: [],
  // A fresh stream is on its way: the shown list is read once it opens (from where it
  // starts), not also before, so a page load reads each list once.
  connecting: false,
};

/** Open (or reopen) the stream; called at start, after a drop and when the key changes. */
function liveConnect() {
  if (live.abort) live.abort.abort();
  clearTimeout(live.retryTimer);
  const controller = new AbortController();
  live.abort = controller;
  live.connecting = live.lastId === null;
  followLive(controller)
    .catch(() => {})
    .finally(() => {
      if (live.abort !== controller) return; // replaced by a newer connection
      live.abort = null;
      setLive(false);
      // A fresh stream that never opened read no list: read it now (a refused key then
      // asks for another), and on every fallback tick while the stream is down.
      if (live.connecting) {
        live.connecting = false;
        reloadLiveView();
      }
      if (live.blocked) return;
      const wait = LIVE_RETRY_MS[Math.min(live.failures, LIVE_RETRY_MS.length - 1)];
      live.failures += 1;
      live.retryTimer = setTimeout(liveConnect, wait);
    });
}

function liveRestart() {
  live.blocked = false;
  live.failures = 0;
  liveConnect();
}

async function followLive(controller) {
  const headers = { accept: "text/event-stream" };
  const key = currentKey();
  if (key) headers["x-tachograph-key"] = key;
  if (live.lastId !== null) headers["last-event-id"] = String(live.lastId);
  const response = await fetch("/api/stream", { headers, cache: "no-store", signal: controller.signal });
  if (response.status === 401 || response.status === 403) {
    live.blocked = true; // the views' own requests ask for a key or say why it cannot read
    return;
  }
  if (response.status === 422 && live.lastId !== null) {
    live.lastId = null; // a position this log does not have (the store was replaced): start afresh
    approvals.rows.clear();
    approvals.deadlines.clear();
    return;
  }
  if (!response.ok || !response.body) return;
  const resumed = live.lastId !== null;
  live.after = Number(response.headers.get("x-tachograph-position")) || null;
  // A stream that drops before its first message resumes from where it began: nothing
  // after that position has been missed, so the lists need no second read.
  if (live.lastId === null) live.lastId = live.after;
  live.failures = 0;
  live.connecting = false;
  // A fresh stream starts at the log's head: the list is read from there on, and so are
  // the pending approvals the badge counts (the approvals view reads them itself). "Live"
  // shows once that list is in: until then the page is not yet current, and its messages
  // wait. A resumed stream missed nothing: live at once, no read.
  if (!resumed) {
    if (!currentRoute || currentRoute.view !== "approvals") reloadPendingApprovals();
    reloadLiveView().finally(() => {
      if (live.abort === controller) setLive(true);
    });
  } else {
    setLive(true);
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let rest = "";
  let message = { event: "message", data: [], id: null };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    const lines = (rest + value).split(/\r\n|\r|\n/);
    rest = lines.pop();
    for (const line of lines) {
      if (line === "") {
        if (message.data.length) liveMessage(message);
        message = { event: "message", data: [], id: null };
        continue;
      }
      if (line.startsWith(":")) continue; // keep-alive
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "event") message.event = text;
      else if (field === "data") message.data.push(text);
      else if (field === "id") message.id = text;
    }
  }
}

function liveMessage({ event, data, id }) {
  if (id !== null && id !== "") live.lastId = Number(id);
  let row;
  try {
    row = JSON.parse(data.join("\n"));
  } catch {
    return;
  }
  if (live.loading) live.held.push([event, row]);
  else deliver(event, row);
}

/** What each event changes on the page; rows are in the wire shape of the GET routes. */
function deliver(event, row) {
  const view = currentRoute && currentRoute.view;
  if (event === "task.updated" && view === "tasks") applyTask(row);
  else if (event === "session.updated" && view === "sessions") applySession(row);
  else if (event === "session.updated" && view === "session" && row.id === sessionView.id) {
    if (!row.deleted) renderSessionHead(row);
  } else if (event === "hook.denied" && view === "session" && row.sessionId === sessionView.id) {
    guarded($("#session-error"), () => loadSession(sessionView.id));
  } else if (event === "approval.requested" || event === "approval.decided") {
    applyApproval(event, row);
  }
}

/** A list view kept current by the stream: loaded now, again on a fresh stream, and every
 * FALLBACK_INTERVAL_MS while the stream is down (paused in the background). */
function liveView(load, errorEl) {
  const token = viewToken;
  live.view = { token, load, errorEl };
  if (!live.connecting) reloadLiveView();
  const tick = () => {
    if (token !== viewToken) return;
    if (!live.up && !document.hidden && !modalOpen()) reloadLiveView();
    setTimeout(tick, FALLBACK_INTERVAL_MS);
  };
  setTimeout(tick, FALLBACK_INTERVAL_MS);
}

async function reloadLiveView() {
  const shown = live.view;
  if (!shown || shown.token !== viewToken) return;
  try {
    await holdingMessages(() => shown.load(Math.max(live.after || 0, live.lastId || 0)));
    if (shown.token === viewToken) showMessage(shown.errorEl, "");
  } catch (error) {
    if (shown.token === viewToken) showMessage(shown.errorEl, describe(error));
  }
}

/** Run a list read with the stream's messages held until it is in. */
async function holdingMessages(read) {
  live.loading += 1;
  try {
    return await read();
  } finally {
    live.loading -= 1;
    // Messages that came while the list was on its way are newer than or as new as it.
    if (!live.loading) for (const [event, row] of live.held.splice(0)) deliver(event, row);
  }
}

function setLive(up) {
  live.up = up;
  const state = $("#live-state");
  setText(state, up ? "Live" : live.blocked ? "" : "Reconnecting…");
  setAttr(state, "class", up ? "live-state up" : "live-state down");
  setAttr(state, "title", up ? "Changes appear as they happen." : `Lists refresh every ${FALLBACK_INTERVAL_MS / 1000} s until the live stream is back.`);
  if (currentRoute && currentRoute.view === "tasks") stampBoard();
  if (currentRoute && currentRoute.view === "sessions") stampSessions();
  if (currentRoute && currentRoute.view === "approvals") stampApprovals();
}

function liveNote() {
  return live.up ? " · live" : "";
}

// ---------------------------------------------------------------- approvals

// Held tool calls (docs/approvals.md). Rows are learned from GET /api/approvals and from the
// stream's approval.requested / approval.decided messages, whichever view is shown, so the
// badge in the navigation always counts what is really pending.
const SETTLED_SHOWN = 50;
const PENDING_READ = 500;
const approvals = {
  rows: new Map(), // id → the newest row known, in the wire shape of GET /api/approvals
  deadlines: new Map(), // id → Date.now() at which its time runs out, from secondsLeft as read
  items: new Map(), // id → its item in the pending list (kept, so a typed reason survives)
  settledRows: new Map(), // id → its row in the settled table
  shownCount: null,
};

function approvalStatus(row, event) {
  if (row.status !== undefined) return row.status;
  return event === "approval.decided" ? "decided" : "pending";
}

/** Take in one approval row; answers whether it is a request the page did not know of. */
function learnApproval(row, event) {
  if (!row || !row.id) return false;
  if (row.deleted) {
    forgetApproval(row.id);
    return false;
  }
  const status = approvalStatus(row, event);
  const known = approvals.rows.get(row.id);
  // Settling is final: a read that still says pending is older, never a reopening.
  if (known && known.status !== "pending" && status === "pending") return false;
  approvals.rows.set(row.id, { ...row, status });
  if (status !== "pending") approvals.deadlines.delete(row.id);
  else if (typeof row.secondsLeft === "number") approvals.deadlines.set(row.id, Date.now() + row.secondsLeft * 1000);
  else if (row.deadline && !Number.isNaN(Date.parse(row.deadline))) approvals.deadlines.set(row.id, Date.parse(row.deadline));
  return !known && status === "pending";
}

function forgetApproval(id) {
  approvals.rows.delete(id);
  approvals.deadlines.delete(id);
}

/** Settled rows beyond the ones shown are dropped, so a long-open page does not grow. */
function pruneSettled() {
  const settled = [...approvals.rows.values()].filter((r) => r.status !== "pending").sort(bySettled);
  for (const row of settled.slice(SETTLED_SHOWN * 2)) forgetApproval(row.id);
}

function bySettled(a, b) {
  return String(b.settledAt || "").localeCompare(String(a.settledAt || "")) || String(a.id).localeCompare(String(b.id));
}

/** A row from the live stream. */
function applyApproval(event, row) {
  const isNew = learnApproval(row, event);
  pruneSettled();
  renderApprovals();
  if (isNew && event === "approval.requested") notifyApproval(approvals.rows.get(row.id));
}

/** The pending requests, for the badge: read when a fresh stream starts (or while it is down). */
async function loadPendingApprovals(minPosition) {
  const query = new URLSearchParams({ status: "pending", limit: String(PENDING_READ) });
  if (minPosition) query.set("minPosition", String(minPosition));
  const data = await api(`/api/approvals?${query}`);
  for (const row of data.items) learnApproval(row);
  renderApprovals();
}

function reloadPendingApprovals() {
  holdingMessages(() => loadPendingApprovals(Math.max(live.after || 0, live.lastId || 0))).catch(() => {
    // The badge waits for the next read; the views say what is wrong with the key or server.
  });
}

/** The approvals view's lists: every pending request and the newest settled ones. */
async function loadApprovals(minPosition) {
  const read = (status, limit) => {
    const query = new URLSearchParams({ status, limit: String(limit) });
    if (minPosition) query.set("minPosition", String(minPosition));
    return api(`/api/approvals?${query}`);
  };
  const lists = await Promise.all([
    read("pending", PENDING_READ),
    read("decided", SETTLED_SHOWN),
    read("expired", SETTLED_SHOWN),
    read("abandoned", SETTLED_SHOWN),
  ]);
  const listed = new Set();
  for (const { items } of lists) {
    for (const row of items) {
      listed.add(row.id);
      learnApproval(row);
    }
  }
  // Shown as pending but in none of the lists: settled long ago or deleted, so ask for it alone.
  const unlisted = [...approvals.rows.values()].filter((r) => r.status === "pending" && !listed.has(r.id));
  for (const row of unlisted) {
    try {
      learnApproval(await api(`/api/approvals/${encodeURIComponent(row.id)}`));
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) forgetApproval(row.id);
      else throw error;
    }
  }
  pruneSettled();
  renderApprovals();
}

function renderApprovals() {
  renderApprovalsBadge();
  if (currentRoute && currentRoute.view === "approvals") renderApprovalsView();
}

function pendingApprovals() {
  return [...approvals.rows.values()].filter((r) => r.status === "pending");
}

function renderApprovalsBadge() {
  const count = pendingApprovals().length;
  if (count === approvals.shownCount) return; // unchanged: nothing to announce again
  approvals.shownCount = count;
  const words = count === 1 ? " approval pending" : " approvals pending";
  const badgeEl = $("#approvals-badge");
  badgeEl.replaceChildren(String(count), h("span", { class: "visually-hidden" }, words));
  setAttr(badgeEl, "title", `${count}${words}`);
  badgeEl.hidden = count === 0;
}

/** Who or what held the call: its rule, or the managed handler that answered `ask`. */
function heldBy(row) {
  if (row.ruleId) return ["rule ", h("code", null, row.ruleId)];
  if (row.handlerId) return ["handler ", h("code", null, row.handlerId)];
  return null;
}

function sessionLink(sessionId, title) {
  return sessionId
    ? h("a", { href: `#sessions/${sessionId}`, title: `Session ${sessionId}` }, sessionName(sessionId, title))
    : h("span", { class: "muted" }, "—");
}

function summaryCode(row) {
  return row.inputSummary
    ? h("code", { class: "what" }, row.inputSummary)
    : h("span", { class: "muted" }, "(no input recorded)");
}

function pendingItem(row) {
  const id = row.id;
  const reasonId = `approval-reason-${id}`;
  const countdown = h("span", { class: "countdown", role: "timer" });
  const reason = gated(
    h("input", { id: reasonId, type: "text", maxlength: "2000", autocomplete: "off", "data-reason": id }),
    "operator",
    "deciding approvals",
  );
  const button = (kind, label, extra) =>
    gated(
      h("button", { type: "button", "data-decide": kind, "data-approval": id, ...extra }, label),
      "operator",
      "deciding approvals",
    );
  const buttons = [
    button("allow", "Allow", { class: "primary" }),
    button("deny", "Deny", { class: "danger" }),
    button("session", "Allow for session", { "aria-describedby": `approval-scope-${id}` }),
  ];
  const dl = h("dl", { class: "fields wide approval-fields" });
  fields(dl, [
    ["Agent", row.agent || null],
    ["Session", sessionLink(row.sessionId, row.sessionTitle)],
    ["Workspace", row.workspaceId || null],
    ["Held by", heldBy(row)],
    ["Requested", timeEl(row.requestedAt)],
    ["Time left", countdown],
    ["Event", row.event || null],
    ["Why asked", row.requestReason || undefined],
  ]);
  const el = h(
    "li",
    { class: "approval panel", "data-approval-id": id },
    h("div", { class: "approval-head" }, h("span", { class: "tool" }, row.toolName || "?"), " ", summaryCode(row)),
    dl,
    h(
      "div",
      { class: "approval-decide", role: "group", "aria-label": `Decide on ${row.toolName || "this call"}` },
      h("label", { for: reasonId }, "Reason"),
      reason,
      buttons,
      h(
        "span",
        { id: `approval-scope-${id}`, class: "muted" },
        `Allow for session: later ${row.toolName || "calls of this tool"} calls in this session pass without asking.`,
      ),
    ),
  );
  el.parts = { countdown, reason, buttons };
  return el;
}

function settledRow(row) {
  const outcome = [badge(row.decision)];
  if (row.status === "expired") outcome.push(" ", h("span", { class: "badge s-expired" }, "expired"));
  if (row.status === "abandoned") {
    // Nobody decided: the agent's hook stopped waiting, and the runtime went on its own way.
    outcome.splice(0, 1, h("span", { class: "badge s-abandoned", title: "the agent's hook stopped waiting before anyone decided" }, "abandoned"));
  }
  if (row.forSession) outcome.push(" ", h("span", { class: "muted" }, "for the session"));
  return h(
    "tr",
    { "data-approval-id": row.id, "data-status": row.status },
    h("td", { class: "when" }, timeEl(row.requestedAt)),
    h("td", { class: "nowrap" }, row.agent || "—"),
    h("td", null, sessionLink(row.sessionId, row.sessionTitle)),
    h("td", null, row.toolName || "?"),
    h("td", { class: "summary" }, summaryCode(row)),
    h("td", { class: "nowrap" }, outcome),
    h("td", { class: "nowrap decided-by" }, row.decidedBy || "—"),
    h("td", { class: "when" }, timeEl(row.settledAt)),
    h("td", { class: "reason" }, row.reason || ""),
  );
}

function renderApprovalsView() {
  const pending = pendingApprovals().sort(
    (a, b) => (approvals.deadlines.get(a.id) ?? Infinity) - (approvals.deadlines.get(b.id) ?? Infinity),
  );
  for (const id of [...approvals.items.keys()]) {
    const row = approvals.rows.get(id);
    if (!row || row.status !== "pending") approvals.items.delete(id);
  }
  const items = pending.map((row) => {
    if (!approvals.items.has(row.id)) approvals.items.set(row.id, pendingItem(row));
    return approvals.items.get(row.id);
  });
  syncChildren($("#approvals-pending"), items);
  setText($("#approvals-pending-count"), `(${pending.length})`);
  showApprovalsGuide(pending.length === 0);

  const settled = [...approvals.rows.values()]
    .filter((r) => r.status !== "pending")
    .sort(bySettled)
    .slice(0, SETTLED_SHOWN);
  const keep = new Set(settled.map((r) => r.id));
  for (const id of [...approvals.settledRows.keys()]) if (!keep.has(id)) approvals.settledRows.delete(id);
  const rows = settled.map((row) => {
    // A settled approval never changes again: its row is built once.
    if (!approvals.settledRows.has(row.id)) approvals.settledRows.set(row.id, settledRow(row));
    return approvals.settledRows.get(row.id);
  });
  syncChildren($("#approvals-settled"), rows);
  $("#approvals-settled-empty").hidden = rows.length > 0;
  tickApprovals();
  stampApprovals();
}

function fmtLeft(ms) {
  const s = Math.max(0, Math.ceil(ms / 1000));
  if (s >= 60) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, "0")} s`;
  return `${s} s`;
}

/** Count every pending request's time down from the seconds it had left when read. */
function tickApprovals() {
  const now = Date.now();
  for (const [id, el] of approvals.items) {
    const row = approvals.rows.get(id);
    const deadline = approvals.deadlines.get(id);
    const { countdown } = el.parts;
    if (deadline === undefined) {
      setText(countdown, "—");
      continue;
    }
    const left = deadline - now;
    const then = row && row.onTimeout ? `; then ${row.onTimeout === "allow" ? "allowed" : "denied"}` : "";
    setText(countdown, left > 0 ? `${fmtLeft(left)}${then}` : `Time is up${then.replace("; then", ": being")}`);
    setAttr(countdown, "class", left <= 15000 ? "countdown urgent" : "countdown");
    if (row && row.deadline) setAttr(countdown, "title", `Deadline ${fmtTime(row.deadline)}`);
  }
}

function stampApprovals() {
  setText($("#approvals-updated"), `Updated ${fmtTime(new Date().toISOString())}${liveNote()}`);
}

async function decideApproval(button) {
  const id = button.dataset.approval;
  const kind = button.dataset.decide;
  const el = approvals.items.get(id);
  const row = approvals.rows.get(id);
  if (!el || !row) return;
  const errorEl = $("#approvals-action-error");
  const doneEl = $("#approvals-done");
  showMessage(errorEl, "");
  setText(doneEl, "");
  const reason = el.parts.reason.value.trim();
  const body = { decision: kind === "deny" ? "deny" : "allow" };
  if (reason) body.reason = reason;
  if (kind === "session") body.forSession = true;
  const controls = [...el.parts.buttons, el.parts.reason];
  for (const control of controls) setEnabled(control, false);
  button.setAttribute("aria-busy", "true");
  const what = `${row.toolName || "the call"}${row.inputSummary ? ` ${firstLine(row.inputSummary, 80)}` : ""}`;
  try {
    const decided = await api(`/api/approvals/${encodeURIComponent(id)}/decide`, { method: "POST", body });
    learnApproval(decided);
    const verb = kind === "deny" ? "Denied" : kind === "session" ? "Allowed for the session" : "Allowed";
    setText(doneEl, `${verb}: ${what}${kind === "deny" ? "; the agent is told why." : "; the agent proceeds."}`);
  } catch (error) {
    showMessage(errorEl, `Refused: ${describe(error)}`);
    if (error instanceof ApiError && error.status === 409) {
      // Decided elsewhere, expired or abandoned: show what it became.
      try {
        learnApproval(await api(`/api/approvals/${encodeURIComponent(id)}`));
      } catch (again) {
        showMessage(errorEl, `Refused: ${describe(error)} ${describe(again)}`);
      }
    }
  } finally {
    button.removeAttribute("aria-busy");
    for (const control of controls) setEnabled(control, true);
    pruneSettled();
    renderApprovals();
  }
  // The row left the pending list: focus goes to the next request's reason, or the heading.
  if (!button.isConnected) {
    const next = $("#approvals-pending input[data-reason]");
    if (next && !next.disabled) next.focus();
    else $("#approvals-title").focus();
  }
}

function wireApprovals() {
  $("#approvals-pending").addEventListener("click", (event) => {
    const button = event.target.closest("button[data-decide]");
    if (button && !button.disabled) decideApproval(button);
  });
}

views.approvals = () => {
  showMessage($("#approvals-action-error"), "");
  setText($("#approvals-done"), "");
  renderApprovalsView();
  liveView(loadApprovals, $("#approvals-error"));
  const token = viewToken;
  const tick = () => {
    if (token !== viewToken) return;
    tickApprovals();
    setTimeout(tick, 1000);
  };
  setTimeout(tick, 1000);
};

/** While the stream is down, the badge is read again as slowly as the lists are. */
function watchPendingWhileDown() {
  setInterval(() => {
    const view = currentRoute && currentRoute.view;
    if (!live.up && !live.blocked && !document.hidden && view !== "approvals") {
      loadPendingApprovals().catch(() => {});
    }
  }, FALLBACK_INTERVAL_MS);
}

/** A browser notification, without sound, where the user allowed them ("Notify me"). */
function notifyApproval(approval) {
  if (!("Notification" in window) || Notification.permission !== "granted") return;
  const what = approval.toolName || approval.event || "An agent";
  const where = approval.sessionId ? ` in ${sessionName(approval.sessionId, approval.sessionTitle)}` : "";
  new Notification("Approval requested", {
    body: `${what}${where} waits for a decision.`,
    tag: `approval-${approval.id}`,
    silent: true,
  });
}

/** "Notify me" asks for permission on the user's click only, never by itself. */
function wireNotifications() {
  const button = $("#notify-me");
  const refresh = () => {
    button.hidden = !("Notification" in window) || Notification.permission !== "default";
  };
  button.addEventListener("click", () => {
    if ("Notification" in window) Notification.requestPermission().then(refresh, refresh);
  });
  refresh();
}

// ---------------------------------------------------------------- start

function start() {
  buildBoard();
  wireTaskActions();
  wireWorkflow();
  wireSettings();
  wireSignals();
  wireRevisions();
  wireRevision();
  wirePolicy();
  $("#timeline-refresh").addEventListener("click", () =>
    guarded($("#session-error"), () => loadSession(sessionView.id)),
  );
  $("#timeline-expand").addEventListener("click", () => setAllTurns(true));
  $("#calls-expand").addEventListener("click", () => setAllCalls(true));
  $("#calls-collapse").addEventListener("click", () => setAllCalls(false));
  $("#session-export").addEventListener("click", () => guarded($("#session-error"), downloadExport));
  wireActivity();
  wireNewTask();
  wireNotifications();
  wireApprovals();
  watchPendingWhileDown();
  $("#timeline-collapse").addEventListener("click", () => setAllTurns(false));
  $("#verify-run").addEventListener("click", runVerify);
  $("#stream-lookup").addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = `#stream/${$("#stream-id").value.trim()}`;
  });
  $("#stream-back").addEventListener("click", () => {
    if (history.length > 1) history.back();
    else location.hash = "#audit";
  });
  $("#tasks-workspace").addEventListener("change", rerun);
  $("#sessions-workspace").addEventListener("change", refreshSessions);
  $("#sessions-archived").addEventListener("change", refreshSessions);
  $("#skip-link").addEventListener("click", (event) => {
    event.preventDefault();
    $("#main").focus();
  });
  $("#enter-key").addEventListener("click", () => {
    auth.declined = false;
    askForKey("").then(rerun, () => {});
  });
  $("#forget-key").addEventListener("click", () => {
    sessionStorage.removeItem(KEY_NAME);
    auth.declined = false;
    forgetIdentity();
    updateKeyControls();
    keyChanged();
    rerun();
  });
  window.addEventListener("hashchange", () => route(true));
  updateKeyControls();
  // The role first, so a view never offers for a moment what the key cannot do.
  loadIdentity().finally(() => {
    liveConnect(); // first: the view's list is then read once, from where the stream starts
    route();
  });
}

start();
