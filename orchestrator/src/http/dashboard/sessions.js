// The sessions view: the server's live sessions with their subagent trees and the tool calls
// running now (read from each session's SSE stream), one queue of pending approvals from any
// depth, soft and hard stops, the board's running workers, and every session in the store
// with its transcript (transcript.js). A browser holds few connections per host, so at most
// MAX_STREAMS sessions are followed at once, busy ones first.

import * as api from "./api.js";
import { el, age, workerLabel } from "./board.js";
import { StoredSessions, showTranscript } from "./transcript.js";

const MAX_STREAMS = 3;
const APPROVAL_POLL_MS = 1000;
const SESSION_POLL_MS = 1500;

export class SessionsView {
  constructor(ctx) {
    this.ctx = ctx; // {board(), boardSlug(), toast(), visible()}
    this.sessions = [];
    this.streams = new Map(); // root session id -> {abort, last, tree: Map id -> node}
    this.approvals = [];
    this.timers = [];
    this.stored = new StoredSessions(document.getElementById("stored-sessions"), ctx);
  }

  start() {
    this.stop();
    const loop = (fn, ms) => {
      const tick = async () => {
        try {
          await fn();
        } catch (e) {
          if (e instanceof api.Unauthorized) return;
        }
        this.timers.push(setTimeout(tick, ms));
      };
      tick();
    };
    loop(() => this.refreshApprovals(), APPROVAL_POLL_MS);
    loop(() => (this.ctx.visible() ? this.refreshSessions() : null), SESSION_POLL_MS);
  }

  stop() {
    for (const t of this.timers) clearTimeout(t);
    this.timers = [];
    for (const s of this.streams.values()) s.abort.abort();
    this.streams.clear();
    // Signed out (maybe back in with another token): the stored list is read again.
    this.stored.loaded = false;
  }

  async refreshApprovals() {
    const { approvals } = await api.get("/api/approvals");
    const changed = approvals.map((a) => a.request_id).join() !== this.approvals.map((a) => a.request_id).join();
    this.approvals = approvals;
    // A new request usually means a session worth showing: do not wait for the next poll.
    if (changed && this.ctx.visible()) this.refreshSessions().catch(() => {});
    const badge = document.getElementById("approval-count");
    badge.hidden = approvals.length === 0;
    badge.textContent = String(approvals.length);
    if (this.ctx.visible()) this.renderApprovals();
  }

  async refreshSessions() {
    if (!this.stored.loaded && !this.stored.loading) {
      this.stored.loading = true;
      this.stored.reload().finally(() => { this.stored.loading = false; }).catch(() => {});
    }
    const { sessions } = await api.get("/api/sessions");
    this.sessions = sessions;
    const wanted = [...sessions]
      .sort((a, b) => Number(b.busy) - Number(a.busy))
      .slice(0, MAX_STREAMS)
      .map((s) => s.session_id);
    for (const [id, s] of this.streams) {
      if (!wanted.includes(id)) {
        s.abort.abort();
        this.streams.delete(id);
      }
    }
    for (const id of wanted) if (!this.streams.has(id)) this.follow(id);
    this.render();
  }

  follow(id) {
    const stream = { abort: new AbortController(), last: 0, tree: new Map(), ended: false };
    stream.tree.set(id, { id, path: [id], running: new Map(), state: "idle", goal: "" });
    this.streams.set(id, stream);
    const run = async () => {
      while (!stream.abort.signal.aborted && !stream.ended) {
        try {
          stream.last = await api.readSse(`/api/sessions/${encodeURIComponent(id)}/events`, stream.last,
            (e) => this.onEvent(stream, e.data), stream.abort.signal);
          stream.ended = true;
        } catch (e) {
          if (e instanceof api.Unauthorized || stream.abort.signal.aborted) return;
          await new Promise((r) => setTimeout(r, 1000));
        }
      }
    };
    run();
  }

  onEvent(stream, event) {
    const node = (sid) => {
      if (!stream.tree.has(sid)) stream.tree.set(sid, { id: sid, path: [sid], running: new Map(), state: "idle", goal: "" });
      return stream.tree.get(sid);
    };
    const n = node(event.session_id);
    switch (event.type) {
      case "session_started":
        n.path = event.agent_path;
        break;
      case "turn_started":
        n.state = "working";
        break;
      case "tool_call_started":
        n.running.set(event.call_id, { tool: event.underlying_tool || event.tool, brief: event.brief, since: Date.now() });
        break;
      case "tool_call_finished":
        n.running.delete(event.call_id);
        break;
      case "approval_requested":
        n.state = "waiting for approval";
        this.refreshApprovals().catch(() => {});
        break;
      case "approval_answered":
        n.state = "working";
        break;
      case "process_notice":
        n.notices = (n.notices || []).concat([{ summary: event.summary, at: Date.now() }]).slice(-5);
        break;
      case "todo_updated":
        n.todos = event.todos;
        n.todoSummary = event.summary;
        break;
      case "subagent_spawned":
        n.pendingGoals = n.pendingGoals || new Map();
        n.pendingGoals.set(event.subagent_id, event.goal);
        break;
      case "subagent_started": {
        const child = node(event.child_session_id);
        child.goal = (n.pendingGoals && n.pendingGoals.get(event.subagent_id)) || child.goal;
        if (child.path.length === 1) child.path = [...n.path, event.child_session_id];
        child.state = "working";
        break;
      }
      case "final":
        n.state = event.status;
        n.running.clear();
        break;
      case "session_ended":
        n.state = "ended";
        n.running.clear();
        break;
    }
    if (this.ctx.visible()) this.render();
  }

  render() {
    this.renderApprovals();
    this.renderSessions();
    this.renderWorkers();
  }

  renderApprovals() {
    const root = document.getElementById("approvals");
    const shown = [...root.querySelectorAll("[data-request-id]")].map((n) => n.dataset.requestId).join(",");
    if (shown === this.approvals.map((a) => a.request_id).join(",") && shown) return;
    root.textContent = "";
    if (this.approvals.length === 0) {
      root.append(el("p", "muted", "Nothing waits for an answer."));
      return;
    }
    for (const a of this.approvals) {
      const card = el("div", "approval");
      card.dataset.requestId = a.request_id;
      const path = el("div", "agent-path");
      a.agent_path.forEach((sid, i) => {
        if (i) path.append(el("span", "sep", " › "));
        path.append(el("code", "", sid));
      });
      path.append(el("span", "muted", `  (depth ${a.agent_path.length - 1})`));
      if (a.kind === "question") {
        card.append(path, el("div", "approval-tool", "question"), el("div", "question", a.reason));
        card.append(this.answerRow(a));
        root.append(card);
        continue;
      }
      card.append(path, el("div", "approval-tool", a.tool), el("div", "muted", a.reason));
      card.append(el("pre", "args", JSON.stringify(a.arguments, null, 2)));
      const row = el("div", "actions");
      for (const [label, choice, cls] of [["Approve", "once", "primary"], ["Approve for session", "session", ""], ["Deny", "deny", "danger"]]) {
        const b = el("button", cls, label);
        b.dataset.choice = choice;
        b.addEventListener("click", async () => {
          try {
            await api.post(`/api/approvals/${encodeURIComponent(a.request_id)}`, { choice });
            this.ctx.toast(`${label}: ${a.tool}`);
          } catch (e) {
            if (!(e instanceof api.Unauthorized)) this.ctx.toast(e.message, true);
          }
          await this.refreshApprovals().catch(() => {});
        });
        row.append(b);
      }
      card.append(row);
      root.append(card);
    }
  }

  // A clarify question: a button per choice, a field for other words when they are allowed,
  // and a way to decline.
  answerRow(a) {
    const row = el("div", "actions");
    const send = async (body, label) => {
      try {
        await api.post(`/api/approvals/${encodeURIComponent(a.request_id)}`, body);
        this.ctx.toast(label);
      } catch (e) {
        if (!(e instanceof api.Unauthorized)) this.ctx.toast(e.message, true);
      }
      await this.refreshApprovals().catch(() => {});
    };
    const args = a.arguments || {};
    (args.choices || []).forEach((choice, i) => {
      const b = el("button", i === 0 ? "primary" : "", choice);
      b.dataset.answer = String(i + 1);
      b.addEventListener("click", () => send({ choice: "answer", answer: String(i + 1) }, `Answered: ${choice}`));
      row.append(b);
    });
    if (args.allow_other || !(args.choices || []).length) {
      const input = el("input", "answer-text", "");
      input.placeholder = "Your answer";
      const b = el("button", "", "Answer");
      b.dataset.answer = "text";
      b.addEventListener("click", () => {
        if (input.value.trim()) send({ choice: "answer", answer: input.value.trim() }, "Answered");
      });
      row.append(input, b);
    }
    const decline = el("button", "danger", "Decline");
    decline.dataset.choice = "deny";
    decline.addEventListener("click", () => send({ choice: "deny" }, "Declined"));
    row.append(decline);
    return row;
  }

  renderSessions() {
    const root = document.getElementById("sessions");
    root.textContent = "";
    if (this.sessions.length === 0) {
      root.append(el("p", "muted", "No sessions are open on this server."));
      return;
    }
    for (const s of this.sessions) {
      const box = el("div", "session");
      box.dataset.sessionId = s.session_id;
      const head = el("div", "session-head");
      head.append(el("code", "", s.session_id), el("span", `state ${s.busy ? "busy" : "idle"}`, s.busy ? "working" : "idle"));
      if (s.last_outcome && s.last_outcome.status) head.append(el("span", "muted", `last: ${s.last_outcome.status}`));
      const transcript = el("button", "", "Transcript");
      transcript.dataset.transcript = s.session_id;
      transcript.addEventListener("click", () => showTranscript(s.session_id, this.ctx));
      head.append(transcript);
      for (const mode of ["soft", "hard"]) {
        const b = el("button", mode === "hard" ? "danger" : "", mode === "hard" ? "Hard stop" : "Stop");
        b.dataset.stop = mode;
        b.title = mode === "hard" ? "End the turn and every subagent now" : "End the turn at the next safe point";
        b.addEventListener("click", async () => {
          try {
            const r = await api.post(`/api/sessions/${encodeURIComponent(s.session_id)}/stop`, { mode });
            this.ctx.toast(`${mode} stop: ${r.turns_stopped} turn(s) stopped`);
          } catch (e) {
            if (!(e instanceof api.Unauthorized)) this.ctx.toast(e.message, true);
          }
          this.refreshSessions().catch(() => {});
        });
        head.append(b);
      }
      box.append(head);
      const stream = this.streams.get(s.session_id);
      if (stream) box.append(this.tree(stream, s.session_id, 0));
      root.append(box);
    }
  }

  tree(stream, id, depth) {
    const n = stream.tree.get(id);
    const ul = el("ul", "agent-tree");
    if (!n) return ul;
    const li = el("li", "");
    const line = el("div", "agent");
    line.append(el("code", "", depth ? id : "root"), el("span", "muted", ` ${n.state}`));
    if (n.goal) line.append(el("span", "goal", ` — ${n.goal}`));
    li.append(line);
    if (n.todos && n.todos.length) li.append(todoList(n.todos, n.todoSummary));
    for (const notice of n.notices || []) {
      li.append(el("div", "process-notice muted", `⚑ ${notice.summary} · ${age(notice.at)}`));
    }
    for (const [callId, c] of n.running) {
      const call = el("div", "running-call");
      call.dataset.callId = callId;
      call.append(el("span", "spinner"), el("b", "", c.tool), el("span", "muted", ` ${c.brief || ""} · ${age(c.since)}`));
      li.append(call);
    }
    for (const child of stream.tree.values()) {
      if (child.path.length === n.path.length + 1 && child.path[child.path.length - 2] === id) {
        li.append(this.tree(stream, child.id, depth + 1));
      }
    }
    ul.append(li);
    return ul;
  }

  renderWorkers() {
    const root = document.getElementById("workers");
    root.textContent = "";
    const running = [...this.ctx.board().tasks.values()].filter((t) => t.status === "running");
    if (running.length === 0) {
      root.append(el("p", "muted", "No task is running."));
      return;
    }
    for (const t of running) {
      const row = el("div", "worker");
      row.append(el("code", "", t.id), el("span", "", t.title), el("span", "muted", t.lease ? workerLabel(t.lease.worker) : ""));
      if (t.lease) {
        const b = el("button", "danger", "Terminate run");
        b.addEventListener("click", async () => {
          try {
            await api.post(`/api/plugins/kanban/runs/${t.lease.run_id}/terminate${api.query({ board: this.ctx.boardSlug() })}`);
          } catch (e) {
            if (!(e instanceof api.Unauthorized)) this.ctx.toast(e.message, true);
          }
        });
        row.append(b);
      }
      root.append(row);
    }
  }
}

// A session's plan, one line per item with its mark.
function todoList(todos, summary) {
  const box = el("div", "todo-list");
  if (summary) box.append(el("div", "muted", `plan · ${summary.completed + summary.cancelled}/${summary.total} done`));
  const marks = { pending: "[ ]", in_progress: "[>]", completed: "[x]", cancelled: "[-]" };
  for (const t of todos) {
    const row = el("div", `todo ${t.status}`, `${marks[t.status] || "[ ]"} ${t.content}`);
    row.dataset.todoId = t.id;
    row.dataset.status = t.status;
    box.append(row);
  }
  return box;
}
