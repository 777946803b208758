// Tachograph's plugin for __RUNTIME_TITLE__, written and owned by `tachograph hook install __RUNTIME__`
// (each install rewrites it, `tachograph hook uninstall __RUNTIME__` removes it: edits are lost).
// It posts each hook below to Tachograph and applies the answer: a deny is thrown (the tool
// does not run and the model reads the reason), a rewrite replaces the tool's arguments,
// context reaches the model. It imports no package, so nothing needs installing for it.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const SETTINGS = __SETTINGS__;

const queues = new Map(); // session -> its last delivery: a session's hooks arrive in order
const contexts = new Map(); // session -> context for its system prompt
const roles = new Map(); // message -> role
const lastText = new Map(); // session -> the last text the model wrote
let failing; // whether the failure log's last line is a failure (unknown at first)

function logPath() {
  const explicit = process.env.TACHOGRAPH_HOOK_LOG || "";
  if (path.isAbsolute(explicit)) return explicit;
  let state = process.env.XDG_STATE_HOME || "";
  if (!path.isAbsolute(state)) state = path.join(process.env.HOME || os.homedir(), ".local", "state");
  return path.join(state, "tachograph", "hooks.log");
}

function noteFailure(event, error) {
  try {
    const file = logPath();
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    try {
      if (fs.statSync(file).size > 1024 * 1024) fs.renameSync(file, file + ".1");
    } catch {}
    const line = { at: new Date().toISOString(), event, error: String(error).slice(0, 500) };
    fs.appendFileSync(file, JSON.stringify(line) + "\n");
    failing = true;
  } catch {}
}

function noteSuccess() {
  if (failing === false) return;
  try {
    const file = logPath();
    const fd = fs.openSync(file, "r");
    const size = fs.fstatSync(fd).size;
    const tail = Buffer.alloc(Math.min(size, 512));
    fs.readSync(fd, tail, 0, tail.length, size - tail.length);
    fs.closeSync(fd);
    const last = tail.toString("utf8").trimEnd();
    if (last && !last.endsWith('"ok": true}')) {
      fs.appendFileSync(file, `{"at": "${new Date().toISOString()}", "ok": true}\n`);
    }
  } catch {}
  failing = false;
}

function describe(error) {
  // Bun names a refused connection by its code (`ConnectionRefused`), as doctor counts it.
  const code = error && error.code ? ` (${error.code})` : "";
  const cause = error && error.cause ? ` (${error.cause.message || error.cause})` : "";
  return `${SETTINGS.url}: ${(error && (error.message || error.name)) || error}${code}${cause}`;
}

async function deliver(hook, event, body) {
  const headers = { "content-type": "application/json", accept: "application/json" };
  const key = process.env.TACHOGRAPH_AGENT_TOKEN || process.env.TACHOGRAPH_API_KEY;
  if (key) headers["x-tachograph-key"] = key;
  if (process.env.TACHOGRAPH_SESSION_ID) headers["x-tachograph-session-id"] = process.env.TACHOGRAPH_SESSION_ID;
  if (process.env.TACHOGRAPH_WORKSPACE) headers["x-tachograph-workspace"] = process.env.TACHOGRAPH_WORKSPACE;
  const waitS = SETTINGS.heldHooks.includes(hook) ? SETTINGS.heldWaitS : SETTINGS.waitS;
  try {
    const response = await fetch(SETTINGS.url, {
      method: "POST",
      headers,
      body: JSON.stringify(body),
      redirect: "error", // the credential goes to the pinned server only
      signal: AbortSignal.timeout(waitS * 1000),
    });
    const text = await response.text();
    if (!response.ok) throw new Error(`answered HTTP ${response.status}`);
    let answer;
    try {
      answer = JSON.parse(text);
    } catch {
      throw new Error("answered invalid JSON");
    }
    if (!answer || typeof answer !== "object" || Array.isArray(answer)) {
      throw new Error("answered JSON that is not an object");
    }
    noteSuccess();
    return answer;
  } catch (error) {
    // The run goes on whatever went wrong, unless this hook gates and fails closed.
    noteFailure(event, describe(error));
    return SETTINGS.failClosed && SETTINGS.gates.includes(event) ? { deny: SETTINGS.failClosedReason } : {};
  }
}

function post(session, hook, event, body) {
  const key = session || "";
  const next = (queues.get(key) || Promise.resolve()).then(() => deliver(hook, event, body));
  queues.set(key, next.catch(() => {}));
  return next;
}

function keep(session, context) {
  if (typeof context !== "string" || !context) return;
  const kept = contexts.get(session) || [];
  if (!kept.includes(context)) kept.push(context);
  contexts.set(session, kept);
}

function refuse(answer) {
  if (typeof answer.deny === "string") throw new Error(answer.deny);
}

export const TachographPlugin = async () => ({
  event: async ({ event }) => {
    const type = event && event.type;
    const properties = (event && event.properties) || {};
    if (type === "message.updated") {
      const info = properties.info || {};
      if (info.id) roles.set(info.id, info.role);
      return;
    }
    if (type === "message.part.updated") {
      const part = properties.part || {};
      if (part.type === "text" && !part.synthetic && roles.get(part.messageID) === "assistant") {
        lastText.set(part.sessionID, part.text);
      }
      return;
    }
    const name = SETTINGS.busEvents[type];
    if (!name) return;
    const session = properties.sessionID || (properties.info && properties.info.id);
    const body = { hook: "event", input: event };
    if (lastText.has(session)) body.lastAssistantMessage = lastText.get(session);
    keep(session, (await post(session, "event", name, body)).context);
  },
  "chat.message": async (input, output) => {
    const session = input.sessionID;
    const answer = await post(session, "chat.message", "UserPromptSubmit", { hook: "chat.message", input, output });
    refuse(answer);
    keep(session, answer.context);
  },
  "tool.execute.before": async (input, output) => {
    const body = { hook: "tool.execute.before", input, output };
    const answer = await post(input.sessionID, "tool.execute.before", "PreToolUse", body);
    refuse(answer);
    if (answer.args && typeof answer.args === "object" && output.args) {
      for (const name of Object.keys(output.args)) delete output.args[name];
      Object.assign(output.args, answer.args);
    }
    keep(input.sessionID, answer.context);
  },
  "tool.execute.after": async (input, output) => {
    const body = { hook: "tool.execute.after", input, output };
    const answer = await post(input.sessionID, "tool.execute.after", "PostToolUse", body);
    if (typeof answer.context === "string" && answer.context) {
      output.output = `${output.output ?? ""}\n\n${answer.context}`;
    }
  },
  "experimental.session.compacting": async (input, output) => {
    const body = { hook: "experimental.session.compacting", input, output: {} };
    const answer = await post(input.sessionID, "experimental.session.compacting", "PreCompact", body);
    if (typeof answer.context === "string" && answer.context && Array.isArray(output.context)) {
      output.context.push(answer.context);
    }
  },
  "experimental.chat.system.transform": async (input, output) => {
    // Before each model call: what Tachograph asked the model to know in this session.
    await queues.get(input.sessionID || "");
    for (const text of contexts.get(input.sessionID) || []) output.system.push(text);
  },
});
