// The task panel: one task's body, its worker's plan (its todo list), its parents and children
// (a small tree you can click through), comments, runs and events, and the actions on it. Sections are refreshed in place
// when the task changes, so a comment being typed is never lost to a live update.

import * as api from "./api.js";
import { el, age, runState } from "./board.js";
import { runSessions, showTranscript } from "./transcript.js";

const TREE_DEPTH = 3;

export class TaskPanel {
  constructor(root, ctx) {
    this.root = root; // <aside>
    this.ctx = ctx; // {board(), boardSlug(), open(id), close(), toast(text, bad)}
    this.id = null;
    this.detail = null;
  }

  get isOpen() {
    return !this.root.hidden;
  }

  async show(id) {
    this.id = id;
    this.root.hidden = false;
    this.root.dataset.taskId = id;
    document.body.classList.add("panel-open");
    this.build();
    await this.reload();
  }

  close() {
    this.id = null;
    this.root.hidden = true;
    delete this.root.dataset.taskId;
    document.body.classList.remove("panel-open");
    this.root.textContent = "";
  }

  path(suffix = "") {
    return `/api/plugins/kanban/tasks/${this.id}${suffix}${api.query({ board: this.ctx.boardSlug() })}`;
  }

  async reload() {
    if (!this.id) return;
    const id = this.id;
    const detail = await api.get(this.path());
    if (id !== this.id) return;
    this.detail = detail;
    this.ctx.board().setTaskLinks(id, detail.links);
    this.ctx.board().upsert(detail.task);
    this.fill();
  }

  build() {
    const r = this.root;
    r.textContent = "";
    const head = el("header", "panel-head");
    this.titleEl = el("h2", "task-title");
    const closeBtn = el("button", "close", "×");
    closeBtn.title = "Close (Esc)";
    closeBtn.addEventListener("click", () => this.ctx.close());
    head.append(this.titleEl, closeBtn);
    this.metaEl = el("div", "task-meta");
    this.actionsEl = el("div", "actions");
    this.evidenceEl = el("div", "evidence");
    this.bodyEl = el("pre", "task-body");
    this.planEl = el("div", "todo-list task-plan");
    this.treeEl = el("div", "tree");
    this.commentsEl = el("div", "comments");
    this.runsEl = el("div", "runs");
    this.eventsEl = el("ol", "events");

    const commentForm = document.createElement("form");
    commentForm.className = "comment-form";
    const area = document.createElement("textarea");
    area.name = "comment";
    area.placeholder = "Add a comment";
    area.rows = 2;
    const send = el("button", "", "Comment");
    send.type = "submit";
    commentForm.append(area, send);
    commentForm.addEventListener("submit", async (e) => {
      e.preventDefault();
      const text = area.value.trim();
      if (!text) return;
      await this.act(() => api.post(this.path("/comments"), { body: text, author: "dashboard" }));
      area.value = "";
    });

    const linkForm = document.createElement("form");
    linkForm.className = "link-form";
    const other = document.createElement("input");
    other.placeholder = "t_… task id";
    other.name = "other";
    const kind = document.createElement("select");
    kind.name = "kind";
    for (const [v, t] of [["child", "waits for this (child)"], ["parent", "this waits for it (parent)"]]) {
      const o = document.createElement("option");
      o.value = v;
      o.textContent = t;
      kind.append(o);
    }
    const linkBtn = el("button", "", "Link");
    linkBtn.type = "submit";
    linkForm.append(other, kind, linkBtn);
    linkForm.addEventListener("submit", async (e) => {
      e.preventDefault();
      const id = other.value.trim();
      if (!id) return;
      const pair = kind.value === "child" ? { parent_id: this.id, child_id: id } : { parent_id: id, child_id: this.id };
      await this.act(() => api.post(`/api/plugins/kanban/links${api.query({ board: this.ctx.boardSlug() })}`, pair));
      other.value = "";
    });

    r.append(
      head, this.metaEl, this.actionsEl, this.evidenceEl, section("Body", this.bodyEl), section("Plan", this.planEl),
      section("Parents and children", this.treeEl, linkForm),
      section("Comments", this.commentsEl, commentForm),
      section("Runs", this.runsEl), section("Events", this.eventsEl),
    );
  }

  // The plan the task's worker keeps with its todo tool, one line per item with its mark.
  fillPlan(plan) {
    this.planEl.textContent = "";
    const items = (plan && Array.isArray(plan.todos)) ? plan.todos : [];
    if (items.length === 0) {
      this.planEl.append(el("p", "muted", "No plan yet."));
      return;
    }
    const s = plan.summary;
    if (s) this.planEl.append(el("div", "muted", `${s.completed + s.cancelled}/${s.total} done`));
    const marks = { pending: "[ ]", in_progress: "[>]", completed: "[x]", cancelled: "[-]" };
    for (const t of items) {
      const row = el("div", `todo ${t.status}`, `${marks[t.status] || "[ ]"} ${t.content}`);
      row.dataset.todoId = t.id;
      row.dataset.status = t.status;
      this.planEl.append(row);
    }
  }

  fill() {
    const { task, comments, events, runs, links } = this.detail;
    this.titleEl.textContent = task.title;
    this.titleEl.title = task.id;
    this.metaEl.textContent = "";
    const run = runState(task);
    for (const [k, v] of [["id", task.id], ["status", task.status], ["assignee", task.assignee || "unassigned"],
      ["priority", String(task.priority)], ["age", age(task.created_at)], ["run", run ? run.text : "—"]]) {
      const item = el("span", "kv");
      item.append(el("b", "", k), document.createTextNode(" " + v));
      this.metaEl.append(item);
    }
    this.bodyEl.textContent = task.body || "(no body)";
    if (task.result) this.bodyEl.textContent += `\n\nResult: ${task.result}`;
    this.fillPlan(this.detail.todos);
    this.fillActions(task, runs);
    fillEvidence(this.evidenceEl, runs);
    this.fillTree(links);
    this.commentsEl.textContent = "";
    if (comments.length === 0) this.commentsEl.append(el("p", "muted", "No comments yet."));
    for (const c of comments) {
      const item = el("div", "comment");
      item.append(el("div", "comment-head", `${c.author} · ${age(c.created_at)} ago`), el("div", "comment-body", c.body));
      this.commentsEl.append(item);
    }
    this.runsEl.textContent = "";
    if (runs.length === 0) this.runsEl.append(el("p", "muted", "No runs yet."));
    for (const r of runs) {
      const row = el("div", "run-row");
      const ended = r.ended_at || Date.now();
      row.append(
        el("span", "", `#${r.id}`), el("span", "", r.profile || "—"),
        el("span", `outcome ${r.outcome || "open"}`, r.outcome || "running"),
        el("span", "", duration(ended - r.started_at)),
        el("span", "muted", r.summary || r.error || ""),
      );
      const links = el("span", "run-transcripts");
      links.dataset.run = String(r.id);
      row.append(links);
      if (!r.outcome) {
        const stop = el("button", "danger", "Terminate");
        stop.addEventListener("click", () => this.act(() =>
          api.post(`/api/plugins/kanban/runs/${r.id}/terminate${api.query({ board: this.ctx.boardSlug() })}`)));
        row.append(stop);
      }
      this.runsEl.append(row);
    }
    if (runs.length) this.fillRunTranscripts(task.id);
    this.eventsEl.textContent = "";
    for (const e of events.slice(-100).reverse()) {
      const li = el("li", "");
      li.append(el("span", "event-kind", e.kind), el("span", "muted", ` #${e.id} · ${age(e.created_at)} ago `),
        el("code", "", compact(e.payload)));
      this.eventsEl.append(li);
    }
  }

  // Each run's worker session(s), as links to their transcripts: what the worker really did.
  // Without the dashboard token the runs say where to get it.
  async fillRunTranscripts(taskId) {
    let found;
    try {
      found = await runSessions(taskId);
    } catch {
      return;
    }
    if (taskId !== this.id) return;
    for (const slot of this.runsEl.querySelectorAll(".run-transcripts")) {
      slot.textContent = "";
      const sessions = found.byRun.get(Number(slot.dataset.run)) || [];
      for (const s of sessions) {
        const b = el("button", "", "Transcript");
        b.dataset.transcript = s.session_id;
        b.title = `${s.session_id} · ${s.messages} messages`;
        b.addEventListener("click", () => showTranscript(s.session_id, this.ctx));
        slot.append(b);
      }
      if (!sessions.length && found.refused) {
        const note = el("span", "muted", "transcript: dashboard token");
        note.title = "Sign in with the dashboard token to read the worker's transcript";
        slot.append(note);
      }
    }
  }

  fillActions(task) {
    const a = this.actionsEl;
    a.textContent = "";
    const btn = (label, fn, cls = "") => {
      const b = el("button", cls, label);
      b.addEventListener("click", fn);
      a.append(b);
    };
    const status = (s, extra = {}) => () => this.act(() => api.patch(this.path(), { status: s, ...extra }));
    btn("Edit", () => this.edit(task));
    btn("Assign", async () => {
      const who = await this.ctx.ask("Assign to (empty unassigns)", [{ name: "assignee", value: task.assignee || "" }]);
      if (who) await this.act(() => api.patch(this.path(), { assignee: who.assignee }));
    });
    if (["running", "ready", "blocked", "review"].includes(task.status)) btn("Complete", status("done", { summary: "completed from the dashboard" }), "primary");
    if (["running", "ready"].includes(task.status)) btn("Block", async () => {
      const why = await this.ctx.ask("Block: why?", [{ name: "reason", value: "" }]);
      if (why) await this.act(() => api.patch(this.path(), { status: "blocked", reason: why.reason || "blocked from the dashboard" }));
    });
    if (["blocked", "scheduled", "triage", "review"].includes(task.status)) btn("Unblock", status("ready"));
    btn("Archive", status("archived"), "danger");
    if (task.status === "review") reviewButtons(this, btn);
  }

  async edit(task) {
    const values = await this.ctx.ask("Edit task", [
      { name: "title", value: task.title },
      { name: "body", value: task.body, long: true },
      { name: "priority", value: String(task.priority), type: "number" },
    ]);
    if (!values) return;
    await this.act(() => api.patch(this.path(), {
      title: values.title, body: values.body, priority: Number(values.priority) || 0,
    }));
  }

  fillTree(links) {
    const board = this.ctx.board();
    this.treeEl.textContent = "";
    const line = (id, label) => {
      const t = board.tasks.get(id);
      const b = el("button", "tree-node", `${label}${t ? t.title : id}`);
      b.dataset.taskId = id;
      b.append(el("span", `status-chip s-${t ? t.status : "archived"}`, t ? t.status : "archived"));
      b.addEventListener("click", () => this.ctx.open(id));
      return b;
    };
    if ((links.parents || []).length) {
      this.treeEl.append(el("div", "muted", "Waits for:"));
      for (const p of links.parents) this.treeEl.append(line(p, "↑ "));
    }
    const walk = (id, depth, into) => {
      for (const c of board.children.get(id) || []) {
        const item = el("li", "");
        item.append(line(c, ""));
        if (depth < TREE_DEPTH && (board.children.get(c) || new Set()).size) {
          const sub = el("ul", "");
          walk(c, depth + 1, sub);
          item.append(sub);
        }
        into.append(item);
      }
    };
    const kids = el("ul", "tree-children");
    walk(this.id, 1, kids);
    if (kids.childElementCount) {
      this.treeEl.append(el("div", "muted", "Fans out to:"), kids);
    }
    if (!this.treeEl.childElementCount) this.treeEl.append(el("p", "muted", "No parents or children."));
  }

  async act(fn) {
    try {
      await fn();
      await this.reload();
    } catch (e) {
      if (!(e instanceof api.Unauthorized)) this.ctx.toast(e.message, true);
    }
  }
}

function section(title, ...content) {
  const s = el("section", "panel-section");
  s.append(el("h4", "", title), ...content);
  return s;
}

function duration(ms) {
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}

function compact(payload) {
  const text = JSON.stringify(payload || {});
  return text === "{}" ? "" : text.length > 160 ? text.slice(0, 157) + "…" : text;
}

// A person's verdict on a task waiting in review: Approve (done) or Send back with what must
// change (ready; the next worker reads it as a comment).
function reviewButtons(panel, btn) {
  const review = (body) => panel.act(() => api.post(panel.path("/review"), { author: "dashboard", ...body }));
  btn("Approve", () => review({ verdict: "approve" }), "primary review-approve");
  btn("Send back", async () => {
    const why = await panel.ctx.ask("Send back: what must change?", [{ name: "comment", value: "", long: true }]);
    if (why && why.comment.trim()) await review({ verdict: "changes", comment: why.comment });
  }, "review-changes");
}

// What the latest completion rests on: the tool calls troupe recorded in that run, or a
// warning that it rests on none.
function fillEvidence(into, runs) {
  into.textContent = "";
  const latest = runs.filter((r) => r.metadata && r.metadata.evidence !== undefined)
    .sort((a, b) => b.id - a.id)[0];
  if (!latest) return;
  const calls = latest.metadata.evidence;
  if (!Array.isArray(calls) || calls.length === 0) {
    into.append(el("div", "evidence-none", `evidence: none — run #${latest.id} completed without running any tool`));
    return;
  }
  into.append(el("div", "muted", `evidence of run #${latest.id}: ${calls.length} tool call(s) that ran`));
  const list = el("ul", "evidence-calls");
  for (const c of calls) {
    const exit = c.exit_code === undefined || c.exit_code === null ? "" : `, exit ${c.exit_code}`;
    list.append(el("li", `evidence-call ${c.status}`, `${c.tool} ${c.args} → ${c.status}${exit}`));
  }
  into.append(list);
}
