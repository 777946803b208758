// Tachograph operator page: the Policy view (docs/policy.md). Loaded before app.js (both
// deferred, so in order) and run only through it: app.js routes `#policy` to enterPolicy()
// and calls wirePolicy() once at start, so the helpers it defines ($, h, api, gated,
// command, every, ...) exist by the time anything here runs.
"use strict";

const POLICY_INTERVAL_MS = 5000;
// Shadow hits shown, newest first; the Activity view pages through the rest of a rule's.
const SHADOW_SHOWN = 100;
// Lines of unchanged text kept around each change of a diff.
const DIFF_CONTEXT = 3;
// Beyond this many line pairs a diff is not computed (sources are at most 256 KiB).
const DIFF_MAX_CELLS = 1_000_000;

// What an empty view offers to copy: one rule of the policy guide's examples.
const STARTER_RULE = `version: 1
rules:
  - id: ask-before-recursive-delete
    when: >-
      command.commands.exists(c, c.program == "rm"
        && c.args.exists(a, a.startsWith("-") && !a.startsWith("--") && a.contains("r")))
    then: ask
    reason: A recursive delete; a person looks at it first.`;

const policyView = {
  // GET /api/policy, the scope's revisions and history, and their signature (render on change).
  active: [],
  scopeRevisions: [],
  signature: null,
  open: new Set(), // revision ids whose details the operator opened
  // Every revision of every scope: id → {number, workspaceId}, to name a shadow hit's revision.
  known: new Map(),
  shadowHits: [], // the newest activity rows a shadow rule would have decided
  // The source shown in the editor came from the scope's active document and was not edited.
  pristine: true,
};

function policyScopeName(workspaceId) {
  return workspaceId ? `workspace ${workspaceId}` : "global";
}

function chosenPolicyScope() {
  return $("#policy-scope").value || null;
}

function scopeQuery(workspaceId) {
  return workspaceId ? `?workspaceId=${encodeURIComponent(workspaceId)}` : "";
}

// ---------------------------------------------------------------- a line diff

/**
 * The lines of `before` and `after` as [kind, text] pairs, kind "ctx", "del" or "add": a
 * longest common subsequence over the lines between the common head and tail. Null when
 * the two differ in too many lines to compare here.
 */
function lineDiff(before, after) {
  const a = before === "" ? [] : before.split("\n");
  const b = after === "" ? [] : after.split("\n");
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head += 1;
  let tail = 0;
  while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) {
    tail += 1;
  }
  const x = a.slice(head, a.length - tail);
  const y = b.slice(head, b.length - tail);
  if (x.length * y.length > DIFF_MAX_CELLS) return null;
  // lcs[i][j]: the longest common subsequence of x[i:] and y[j:].
  const lcs = Array.from({ length: x.length + 1 }, () => new Uint32Array(y.length + 1));
  for (let i = x.length - 1; i >= 0; i -= 1) {
    for (let j = y.length - 1; j >= 0; j -= 1) {
      lcs[i][j] = x[i] === y[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const out = a.slice(0, head).map((line) => ["ctx", line]);
  let i = 0;
  let j = 0;
  while (i < x.length || j < y.length) {
    if (i < x.length && j < y.length && x[i] === y[j]) {
      out.push(["ctx", x[i]]);
      i += 1;
      j += 1;
    } else if (i < x.length && (j === y.length || lcs[i + 1][j] >= lcs[i][j + 1])) {
      out.push(["del", x[i]]); // removed lines before the lines that replace them, as in git
      i += 1;
    } else {
      out.push(["add", y[j]]);
      j += 1;
    }
  }
  return out.concat(a.slice(a.length - tail).map((line) => ["ctx", line]));
}

/** The diff as lines of text (the workflow diff's classes), unchanged runs folded. */
function policyDiffBlock(before, after, label) {
  const lines = lineDiff(before, after);
  const box = h("div", { class: "diff policy-diff", role: "region", "aria-label": label, tabindex: "0" });
  if (lines === null) {
    box.append(h("p", { class: "muted" }, "Too many lines changed to show a diff here; the source is below."));
    return box;
  }
  const added = lines.filter(([kind]) => kind === "add").length;
  const removed = lines.filter(([kind]) => kind === "del").length;
  const near = lines.map(() => false);
  lines.forEach(([kind], index) => {
    if (kind === "ctx") return;
    for (let k = Math.max(0, index - DIFF_CONTEXT); k <= Math.min(lines.length - 1, index + DIFF_CONTEXT); k += 1) {
      near[k] = true;
    }
  });
  const body = h("div", { class: "diff-lines" });
  let skipped = 0;
  const fold = () => {
    if (skipped) body.append(h("div", { class: "dl dl-hunk" }, `⋯ ${plural(skipped, "unchanged line")}`));
    skipped = 0;
  };
  lines.forEach(([kind, text], index) => {
    if (!near[index]) {
      skipped += 1;
      return;
    }
    fold();
    const mark = { ctx: " ", add: "+", del: "-" }[kind];
    body.append(h("div", { class: `dl dl-${kind}`, "data-kind": kind }, `${mark} ${text}`));
  });
  fold();
  const head = h("h5", { class: "diff-file-head" }, label, " ", h("span", { class: "muted diff-counts" }, `+${added} −${removed}`));
  if (!added && !removed) body.append(h("div", { class: "dl dl-meta" }, "(the same text)"));
  box.append(head, body);
  return box;
}

// ---------------------------------------------------------------- active documents and revisions

function policyActiveItem(r) {
  return h(
    "article",
    { class: "panel policy-active", "data-scope": r.workspaceId || "", "data-revision-id": r.id },
    h(
      "h4",
      null,
      r.workspaceId ? `Workspace ${r.workspaceId}` : "Global",
      " ",
      h("span", { class: "muted" }, `revision ${r.number} · ${r.mode} · ${shortDigest(r.digest)}`),
    ),
    h(
      "p",
      { class: "muted" },
      `Activated by ${r.activatedBy || "?"} `,
      timeEl(r.activatedAt),
      `; recorded by ${r.actor} `,
      timeEl(r.recordedAt),
    ),
    h("pre", { class: "text policy-source" }, r.source),
  );
}

function renderActivePolicies(items) {
  const root = $("#policy-active");
  if (!items.length) {
    root.replaceChildren(
      h(
        "div",
        { class: "guide" },
        h("p", { class: "guide-lead" }, "No policy is active: every call goes on to approvals and handlers."),
        guideSteps([
          guideStep("Write a document in the candidate form below; a first rule to start from:", STARTER_RULE),
          guideStep("Backtest it against the calls already recorded, then record and activate it."),
        ]),
      ),
    );
    return;
  }
  root.replaceChildren(...items.map(policyActiveItem));
}

function policyRevisionAction(r, active) {
  if (r.active) return null;
  const rollback = active !== null && r.number < active.number;
  const does = "activating and rolling back policy";
  const button = gated(
    h("button", { type: "button", "data-policy-action": rollback ? "rollback" : "activate", "data-revision-id": r.id },
      rollback ? "Roll back to this" : "Activate"),
    "operator",
    does,
  );
  button.addEventListener("click", () => changePolicyRevision(button, r, active, rollback));
  return button;
}

async function changePolicyRevision(button, r, active, rollback) {
  const scope = policyScopeName(r.workspaceId);
  const now = active ? `revision ${active.number}` : "no document";
  const changed = await command(button, {
    title: rollback ? `Roll back the ${scope} policy to revision ${r.number}?` : `Activate revision ${r.number}?`,
    body: rollback
      ? `Revision ${r.number} judges the ${scope} calls again instead of ${now}, from the next call on. ` +
        "The rollback is recorded as a compensating event; no revision is deleted."
      : `Revision ${r.number} judges the ${scope} calls instead of ${now}, from the next call on.`,
    label: rollback ? "Roll back" : "Activate",
    run: () => api(`/api/policy/revisions/${encodeURIComponent(r.id)}/${rollback ? "rollback" : "activate"}`, { method: "POST" }),
    errorEl: $("#policy-action-error"),
    doneEl: $("#policy-action-done"),
    done: () => `Revision ${r.number} is now the active ${scope} policy.`,
  });
  if (changed) await reload(loadPolicy, $("#policy-error"), "#policy-revisions-title");
}

function policyRevisionItem(r, previous, active) {
  const id = r.id;
  const details = h(
    "details",
    { class: "policy-revision", open: policyView.open.has(id) },
    h(
      "summary",
      null,
      h("strong", null, `Revision ${r.number}`),
      " ",
      r.active ? h("span", { class: "badge s-active" }, "active") : null,
      " ",
      h("span", { class: "muted" }, `${r.mode} · ${shortDigest(r.digest)} · recorded by ${r.actor} `),
      timeEl(r.recordedAt),
    ),
  );
  // The diff and source are built when first opened: a long history costs nothing until read.
  const fill = () => {
    if (details.childElementCount > 1) return;
    const label = previous ? `Changes from revision ${previous.number}` : "First revision of this scope";
    details.append(
      policyDiffBlock(previous ? previous.source : "", r.source, label),
      h("h5", null, "Source"),
      h("pre", { class: "text policy-source" }, r.source),
    );
  };
  if (details.open) fill();
  details.addEventListener("toggle", () => {
    if (details.open) {
      policyView.open.add(id);
      fill();
    } else policyView.open.delete(id);
  });
  return h("li", { "data-revision-id": id, "data-number": String(r.number) }, details, policyRevisionAction(r, active));
}

const POLICY_HISTORY_WORDS = { record: "recorded", activate: "activated", rollback: "rolled back to", remove: "removed" };

function policyHistoryItem(change, numbers) {
  const number = (id) => (numbers.has(id) ? `revision ${numbers.get(id)}` : shortId(id));
  const what = change.change === "remove"
    ? `removed ${number(change.previousRevisionId)}: no document judges this scope`
    : `${POLICY_HISTORY_WORDS[change.change] || change.change} ${number(change.revisionId)}`;
  const from = change.change === "rollback" && change.previousRevisionId ? ` (from ${number(change.previousRevisionId)})` : "";
  return h("li", { "data-change": change.change }, timeEl(change.at), ` ${change.actor} ${what}${from}`);
}

function renderPolicyRevisions(items, history) {
  const active = items.find((r) => r.active) || null;
  const list = items.map((r, index) => policyRevisionItem(r, items[index + 1] || null, active));
  $("#policy-revisions").replaceChildren(...list);
  $("#policy-revisions-empty").hidden = items.length > 0;
  const numbers = new Map(items.map((r) => [r.id, r.number]));
  $("#policy-history").replaceChildren(...history.map((change) => policyHistoryItem(change, numbers)));
}

async function loadPolicy() {
  const scope = chosenPolicyScope();
  const [active, revisions, everyScope] = await Promise.all([
    api("/api/policy"),
    api(`/api/policy/revisions${scopeQuery(scope)}`),
    api("/api/policy/revisions?all=true"),
  ]);
  if (scope !== chosenPolicyScope()) return; // the operator chose another scope meanwhile
  for (const r of everyScope.items) policyView.known.set(r.id, { number: r.number, workspaceId: r.workspaceId });
  policyView.active = active.items;
  policyView.scopeRevisions = revisions.items;
  const signature = JSON.stringify([active.items.map((r) => r.id), revisions.items.map((r) => [r.id, r.active]), revisions.history]);
  if (signature !== policyView.signature) {
    policyView.signature = signature;
    renderActivePolicies(active.items);
    renderPolicyRevisions(revisions.items, revisions.history);
    applyRole($("#view-policy"));
  }
  fillEditor(false);
  await loadShadowHits();
  setText($("#policy-updated"), `Updated ${fmtClock(new Date().toISOString())} UTC`);
}

// ---------------------------------------------------------------- shadow hits

/** The newest tool calls a shadow rule would have decided (activity rows carry `policy`). */
async function loadShadowHits() {
  const page = await api(`/api/activity?policyMode=shadow&limit=${SHADOW_SHOWN}`);
  policyView.shadowHits = page.items;
  renderShadowHits(Boolean(page.next));
}

function shadowRow(item) {
  const hit = item.policy;
  const revision = policyView.known.get(hit.revisionId);
  const where = revision ? `${policyScopeName(revision.workspaceId)}, revision ${revision.number}` : shortId(hit.revisionId);
  const rule = link(`#activity?${new URLSearchParams({ ruleId: hit.ruleId })}`, hit.ruleId);
  setAttr(rule, "title", `Every call rule ${hit.ruleId} decided or would have`);
  return h(
    "tr",
    { "data-position": String(item.position), "data-rule-id": hit.ruleId },
    h("td", { class: "when" }, timeEl(item.at)),
    h("td", null, link(`#sessions/${item.sessionId}`, sessionName(item.sessionId, item.sessionTitle))),
    h("td", null, item.tool || "?"),
    h("td", null, h("code", null, item.summary || "")),
    h("td", null, h("code", null, rule), " ", h("span", { class: "muted" }, `(${where})`)),
    h("td", null, badge(hit.outcome), hit.error ? h("span", { class: "muted" }, ` expression failed: ${hit.error}`) : null),
    h("td", null, badge(item.decision)),
  );
}

function renderShadowHits(more) {
  const hits = policyView.shadowHits;
  const rows = $("#policy-shadow-rows");
  const shown = Array.from(rows.children, (row) => row.dataset.position).join();
  if (shown !== hits.map((e) => String(e.position)).join()) rows.replaceChildren(...hits.map(shadowRow));
  $("#policy-shadow-empty").hidden = hits.length > 0;
  setText($("#policy-shadow-count"), hits.length ? `(${more ? `the newest ${hits.length}` : hits.length})` : "");
}

// ---------------------------------------------------------------- the candidate document

/** Put the chosen scope's active source in the editor unless the operator has edited it. */
function fillEditor(force) {
  if (!force && !policyView.pristine) return;
  const scope = chosenPolicyScope();
  const active = policyView.active.find((r) => (r.workspaceId || null) === scope);
  const source = $("#policy-source");
  const text = active ? active.source : "";
  if (source.value !== text) source.value = text;
  policyView.pristine = true;
}

function editorInput() {
  showMessage($("#policy-editor-error"), "");
  return { source: $("#policy-source").value, workspaceId: chosenPolicyScope() };
}

/** A refusal in words: a 422 names the rule and its problem, as the API does. */
function policyProblem(error) {
  const body = error instanceof ApiError ? error.body : null;
  if (body && body.ruleId) return `Rule ${body.ruleId}: ${body.problem || error.message}`;
  if (body && body.problem) return `The document: ${body.problem}`;
  return describe(error);
}

async function applyCandidate(button) {
  const input = editorInput();
  if (!input.source.trim()) return showMessage($("#policy-editor-error"), "Write a document first.");
  const scope = policyScopeName(input.workspaceId);
  const body = input.workspaceId ? input : { source: input.source };
  let recorded = null;
  const changed = await command(button, {
    title: `Record and activate this document for the ${scope} scope?`,
    body: `It becomes the next revision of the ${scope} policy and judges its calls from the next call on. ` +
      "The revision before stays on the record: you can roll back to it.",
    label: "Record and activate",
    run: async () => {
      try {
        recorded = await api("/api/policy/revisions", { method: "POST", body });
      } catch (error) {
        throw new Error(policyProblem(error));
      }
      try {
        return await api(`/api/policy/revisions/${encodeURIComponent(recorded.id)}/activate`, { method: "POST" });
      } catch (error) {
        throw new Error(`Revision ${recorded.number} was recorded but not activated: ${describe(error)}`);
      }
    },
    errorEl: $("#policy-editor-error"),
    doneEl: $("#policy-editor-done"),
    done: (revision) => `Revision ${revision.number} is recorded and active for the ${scope} scope.`,
  });
  if (changed) policyView.pristine = true;
  if (recorded) await reload(loadPolicy, $("#policy-error"), "#policy-editor-done");
}

function backtestSummary(result) {
  const changed = result.changed || {};
  const parts = [
    `${plural(changed.deny || 0, "call")} denied`,
    `${plural(changed.ask || 0, "call")} held for a person`,
    `${plural(changed.context || 0, "call")} given context`,
  ];
  const by = result.unjudgedBy || {};
  const why = [
    [by.noFacts, "recorded without their facts"],
    [by.redactedInput, "their input redacted"],
    [by.truncated, "their facts cut to size"],
  ]
    .filter(([n]) => n)
    .map(([n, words]) => `${n} ${words}`);
  const unjudged = result.unjudged
    ? ` ${plural(result.unjudged, "call")} could not be judged${why.length ? ` (${why.join(", ")})` : ""}.`
    : "";
  return `${plural(result.evaluated, "recorded call")} evaluated. Decided differently from what happened: ` +
    `${parts.join(", ")}.${unjudged}`;
}

function backtestRow(rule) {
  const examples = (rule.examples || []).map((e) =>
    h(
      "li",
      { "data-position": String(e.position) },
      link(`#sessions/${e.sessionId}`, sessionName(e.sessionId, null)),
      " ",
      h("code", null, e.summary || ""),
      " ",
      h("span", { class: "muted" }, `(recorded: ${e.decision})`),
    ),
  );
  return h(
    "tr",
    { "data-rule-id": rule.id },
    h(
      "td",
      null,
      h("code", null, rule.id),
      " ",
      h("span", { class: "muted" }, [rule.then, rule.mode === "shadow" ? "shadow" : null].filter(Boolean).join(", ")),
      rule.errors ? h("div", { class: "error" }, `its expression failed on ${plural(rule.errors, "call")}`) : null,
    ),
    h("td", { class: "num" }, String(rule.hits)),
    h("td", null, examples.length ? h("ul", { class: "policy-examples" }, examples) : h("span", { class: "muted" }, "—")),
  );
}

async function runBacktest(button) {
  const input = editorInput();
  if (!input.source.trim()) return showMessage($("#policy-editor-error"), "Write a document first.");
  const body = { source: input.source };
  if (input.workspaceId) body.workspaceId = input.workspaceId;
  const since = localToIso($("#policy-since").value);
  const until = localToIso($("#policy-until").value);
  if (since) body.since = since;
  if (until) body.until = until;
  setText($("#policy-editor-done"), "");
  button.disabled = true;
  button.setAttribute("aria-busy", "true");
  try {
    const result = await api("/api/policy/backtest", { method: "POST", body });
    setText($("#policy-backtest-summary"), backtestSummary(result));
    $("#policy-backtest-rules").replaceChildren(...(result.rules || []).map(backtestRow));
    $("#policy-backtest-result").hidden = false;
    setText($("#policy-editor-done"), "Backtest done. No revision was recorded; the log notes only who ran which document.");
  } catch (error) {
    showMessage($("#policy-editor-error"), `Refused: ${policyProblem(error)}`);
  } finally {
    refreshEnabled(button);
    button.removeAttribute("aria-busy");
  }
}

// ---------------------------------------------------------------- the view

async function loadPolicyScopes() {
  const data = await api("/api/workspaces");
  const select = $("#policy-scope");
  const chosen = select.value;
  const options = [h("option", { value: "" }, "Global")];
  for (const ws of data.items) options.push(h("option", { value: ws.id }, `Workspace ${ws.id}`));
  select.replaceChildren(...options);
  select.value = data.items.some((ws) => ws.id === chosen) ? chosen : "";
}

function enterPolicy() {
  policyView.signature = null;
  loadPolicyScopes().catch((error) => showMessage($("#policy-error"), describe(error)));
  every(POLICY_INTERVAL_MS, loadPolicy, $("#policy-error"));
}

function wirePolicy() {
  $("#policy-scope").addEventListener("change", () => {
    policyView.signature = null;
    $("#policy-backtest-result").hidden = true;
    if (policyView.pristine) $("#policy-source").value = "";
    guarded($("#policy-error"), loadPolicy);
  });
  $("#policy-source").addEventListener("input", () => {
    policyView.pristine = false;
  });
  $("#policy-reset").addEventListener("click", () => fillEditor(true));
  $("#policy-apply").addEventListener("click", (event) => applyCandidate(event.currentTarget));
  $("#policy-backtest").addEventListener("click", (event) => runBacktest(event.currentTarget));
  $("#policy-editor").addEventListener("submit", (event) => event.preventDefault());
}
