// Stored sessions and their transcripts: the Sessions tab's list of every session in the
// store (chat, serve, board workers, subagents), a page at a time, and the transcript viewer
// the list and a task's runs open. Both need the dashboard token: with the API token the server
// answers 403 `dashboard_scope_required`, and the list says so instead of failing.

import * as api from "./api.js";
import { el, age } from "./board.js";

const PAGE = 50;

// The list of stored sessions, newest first, with "Load more" for the next page.
export class StoredSessions {
  constructor(root, ctx) {
    this.root = root; // <div id="stored-sessions">
    this.ctx = ctx; // {toast(text, bad)}
    this.rows = [];
    this.next = null;
    this.origin = "";
    this.loaded = false;
  }

  // Reads the first page again (the tab was opened, or the origin filter changed).
  async reload() {
    this.rows = [];
    this.next = null;
    await this.page();
  }

  async page() {
    let data;
    try {
      data = await api.get(`/api/store/sessions${api.query({ limit: PAGE, cursor: this.next, origin: this.origin })}`);
    } catch (e) {
      if (e instanceof api.Unauthorized) return;
      this.loaded = true;
      this.renderRefused(e);
      return;
    }
    this.loaded = true;
    this.rows = this.rows.concat(data.sessions);
    this.next = data.next;
    this.render();
  }

  renderRefused(e) {
    this.root.textContent = "";
    const text = e.code === "dashboard_scope_required"
      ? "Sign in with the dashboard token to see every stored session (chats, board workers, subagents) and their transcripts; this token shows only the sessions opened over HTTP."
      : `The stored sessions could not be read: ${e.message}`;
    const p = el("p", "muted stored-refused", text);
    p.dataset.code = e.code || "";
    this.root.append(p);
  }

  render() {
    this.root.textContent = "";
    const bar = el("div", "stored-bar");
    const pick = el("select", "");
    pick.id = "stored-origin";
    pick.setAttribute("aria-label", "Origin");
    for (const [value, label] of [["", "Any origin"], ["chat", "chat"], ["http", "http (serve)"], ["worker", "board worker"], ["api", "api"], ["subagent", "subagent"]]) {
      const o = el("option", "", label);
      o.value = value;
      pick.append(o);
    }
    pick.value = this.origin;
    pick.addEventListener("change", () => {
      this.origin = pick.value;
      this.reload().catch(() => {});
    });
    const refresh = el("button", "", "Refresh");
    refresh.addEventListener("click", () => this.reload().catch(() => {}));
    bar.append(pick, refresh, el("span", "muted", `${this.rows.length}${this.next ? "+" : ""} shown`));
    this.root.append(bar);
    if (this.rows.length === 0) {
      this.root.append(el("p", "muted", "The store holds no sessions yet."));
      return;
    }
    const table = el("table", "stored-table");
    const head = el("tr", "");
    for (const h of ["session", "origin", "title", "status", "messages", "updated", ""]) head.append(el("th", "", h));
    table.append(head);
    for (const s of this.rows) {
      const tr = el("tr", "stored-row");
      tr.dataset.sessionId = s.session_id;
      tr.dataset.origin = s.origin;
      const id = el("td", "");
      id.append(el("code", "", s.session_id));
      if (s.depth > 0) id.append(el("span", "muted", ` subagent of ${s.parent_id}`));
      const open = el("button", "", "Transcript");
      open.dataset.transcript = s.session_id;
      open.addEventListener("click", () => showTranscript(s.session_id, this.ctx));
      const cell = el("td", "");
      cell.append(open);
      tr.append(id, el("td", "", s.origin), el("td", "stored-title", s.title || "—"), el("td", `status ${s.status}`, s.status),
        el("td", "", String(s.messages)), el("td", "muted", age(s.updated_at)), cell);
      table.append(tr);
    }
    this.root.append(table);
    if (this.next) {
      const more = el("button", "", "Load more");
      more.id = "stored-more";
      more.addEventListener("click", () => this.page().catch(() => {}));
      this.root.append(more);
    }
  }
}

// The sessions of a task's runs, by run number: `Map run -> [session]` (empty without the
// dashboard scope, which is reported as `refused`).
export async function runSessions(taskId) {
  try {
    const { sessions } = await api.get(`/api/store/sessions${api.query({ task: taskId, subagents: false })}`);
    const byRun = new Map();
    for (const s of sessions) {
      if (s.run === null || s.run === undefined) continue;
      if (!byRun.has(s.run)) byRun.set(s.run, []);
      byRun.get(s.run).push(s);
    }
    return { byRun, refused: false };
  } catch (e) {
    if (e instanceof api.Unauthorized) throw e;
    return { byRun: new Map(), refused: e.code === "dashboard_scope_required" };
  }
}

// Opens the transcript of `sessionId` (its subagents' too) in a modal dialog.
export async function showTranscript(sessionId, ctx) {
  let data;
  try {
    data = await api.get(`/api/sessions/${encodeURIComponent(sessionId)}/transcript${api.query({ tree: true })}`);
  } catch (e) {
    if (!(e instanceof api.Unauthorized) && ctx) ctx.toast(e.message, true);
    return;
  }
  let dialog = document.getElementById("transcript");
  if (!dialog) {
    dialog = el("dialog", "transcript");
    dialog.id = "transcript";
    document.body.append(dialog);
  }
  dialog.textContent = "";
  dialog.dataset.sessionId = sessionId;
  const head = el("header", "panel-head");
  head.append(el("h2", "", `Transcript · ${sessionId}`));
  const close = el("button", "close", "×");
  close.title = "Close (Esc)";
  close.addEventListener("click", () => dialog.close());
  head.append(close);
  dialog.append(head);
  for (const s of data.sessions) {
    const box = el("section", "transcript-session");
    const info = s.session || {};
    box.dataset.sessionId = info.id || "";
    box.append(el("div", "muted", `${(s.agent_path || []).join(" › ")} · ${info.origin || ""} · ${info.model || ""} · ${info.status || ""}`));
    for (const m of s.messages || []) box.append(message(m));
    dialog.append(box);
  }
  if (!dialog.open) dialog.showModal();
}

// One message: its role, its text, and the tool calls it made or answered.
function message(m) {
  const row = el("div", `msg msg-${m.role}`);
  row.dataset.role = m.role;
  row.append(el("div", "msg-role", m.role === "tool" ? `tool · ${m.name}` : m.role));
  if (m.content) row.append(el("pre", "msg-text", m.content));
  for (const call of m.tool_calls || []) {
    const c = el("pre", "msg-call", `${call.name}(${call.arguments})`);
    c.dataset.tool = call.name;
    row.append(c);
  }
  return row;
}
