// The board view: tasks kept by id, columns by status rendered virtualised (only the cards in
// view are in the DOM, so a 5,000-task board stays responsive), filters, selection for bulk
// actions and the keyboard cursor. Live changes arrive through `applyEvent`/`upsert`; a render
// rewrites only cards, never the scroll containers, so scroll positions survive updates.

export const STATUSES = ["triage", "todo", "scheduled", "ready", "running", "blocked", "review", "done"];
const CARD_HEIGHT = 106; // px, card plus gap; fixed so a column can place cards without measuring
const OVERSCAN = 6;

// Statuses an event kind moves a task to, applied at once so the card moves before the task
// itself is read back (which then confirms or corrects it).
const STATUS_OF_EVENT = {
  completed: "done",
  claimed: "running",
  blocked: "blocked",
  archived: "archived",
  review_requested: "review",
  scheduled: "scheduled",
  promoted: "ready",
};

export class Board {
  constructor(root, handlers) {
    this.root = root;
    this.handlers = handlers; // {open(id), selectionChanged(), summary(text, total)}
    this.tasks = new Map();
    this.children = new Map(); // parent id -> Set of child ids
    this.parents = new Map(); // child id -> Set of parent ids
    this.filter = { text: "", assignee: "", status: "" };
    this.selected = new Set();
    this.cursor = null;
    this.openId = null;
    this.lists = new Map();
    this.columns = new Map();
    this.pending = false;
    this.build();
  }

  build() {
    this.root.textContent = "";
    for (const status of STATUSES) {
      const column = document.createElement("section");
      column.className = "column";
      column.dataset.status = status;
      const head = document.createElement("h3");
      const name = document.createElement("span");
      name.textContent = status;
      const count = document.createElement("span");
      count.className = "count";
      head.append(name, count);
      const scroller = document.createElement("div");
      scroller.className = "scroller";
      const spacer = document.createElement("div");
      spacer.className = "spacer";
      scroller.append(spacer);
      scroller.addEventListener("scroll", () => this.paintColumn(status), { passive: true });
      column.append(head, scroller);
      this.root.append(column);
      this.columns.set(status, { column, count, scroller, spacer, shown: new Map() });
    }
    window.addEventListener("resize", () => this.render());
  }

  clear() {
    this.tasks.clear();
    this.children.clear();
    this.parents.clear();
    this.selected.clear();
    this.cursor = null;
    for (const c of this.columns.values()) c.scroller.scrollTop = 0;
    this.render();
  }

  upsert(task) {
    if (task.status === "archived") this.tasks.delete(task.id);
    else this.tasks.set(task.id, task);
    this.render();
  }

  setLinks(links) {
    this.children.clear();
    this.parents.clear();
    for (const { parent_id, child_id } of links) this.addLink(parent_id, child_id);
    this.render();
  }

  addLink(parent, child) {
    if (!this.children.has(parent)) this.children.set(parent, new Set());
    if (!this.parents.has(child)) this.parents.set(child, new Set());
    this.children.get(parent).add(child);
    this.parents.get(child).add(parent);
  }

  // A task's own links, as `GET /tasks/{id}` reports them.
  setTaskLinks(id, links) {
    for (const p of this.parents.get(id) || []) this.children.get(p)?.delete(id);
    for (const c of this.children.get(id) || []) this.parents.get(c)?.delete(id);
    this.parents.delete(id);
    this.children.delete(id);
    for (const p of links.parents || []) this.addLink(p, id);
    for (const c of links.children || []) this.addLink(id, c);
  }

  // The status an event implies, applied before the task is read back.
  applyEvent(event) {
    const status = STATUS_OF_EVENT[event.kind];
    const task = event.task_id && this.tasks.get(event.task_id);
    if (status && task && task.status !== status) {
      this.upsert({ ...task, status, updated_at: event.created_at });
    }
  }

  // Children finished / all, or null for a task without children.
  progress(id) {
    const kids = this.children.get(id);
    if (!kids || kids.size === 0) return null;
    let done = 0;
    for (const k of kids) {
      const t = this.tasks.get(k);
      if (!t || t.status === "done" || t.status === "archived") done += 1;
    }
    return { done, all: kids.size };
  }

  matches(task) {
    const f = this.filter;
    if (f.status && task.status !== f.status) return false;
    if (f.assignee === "-" ? task.assignee : f.assignee && task.assignee !== f.assignee) return false;
    if (f.text) {
      const hay = `${task.id} ${task.title} ${task.body} ${task.assignee || ""}`.toLowerCase();
      if (!hay.includes(f.text.toLowerCase())) return false;
    }
    return true;
  }

  assignees() {
    const seen = new Set();
    for (const t of this.tasks.values()) if (t.assignee) seen.add(t.assignee);
    return [...seen].sort();
  }

  // Re-sorts and repaints on the next frame; many updates in one frame cost one render.
  render() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.renderNow();
    });
  }

  renderNow() {
    const lists = new Map(STATUSES.map((s) => [s, []]));
    for (const t of this.tasks.values()) {
      if (lists.has(t.status) && this.matches(t)) lists.get(t.status).push(t);
    }
    for (const [status, list] of lists) {
      list.sort((a, b) => b.priority - a.priority || a.created_at - b.created_at || (a.id < b.id ? -1 : 1));
      this.lists.set(status, list);
      const col = this.columns.get(status);
      col.count.textContent = String(list.length);
      col.spacer.style.height = `${list.length * CARD_HEIGHT}px`;
      col.column.hidden = this.filter.status !== "" && this.filter.status !== status;
      this.paintColumn(status, true);
    }
    let running = 0;
    for (const t of this.tasks.values()) if (t.status === "running") running += 1;
    this.handlers.summary(`${this.tasks.size} tasks · ${running} running`, this.tasks.size);
    document.body.dataset.rendered = String(this.tasks.size);
  }

  paintColumn(status, force = false) {
    const col = this.columns.get(status);
    const list = this.lists.get(status) || [];
    const top = col.scroller.scrollTop;
    const height = col.scroller.clientHeight || 800;
    const first = Math.max(0, Math.floor(top / CARD_HEIGHT) - OVERSCAN);
    const last = Math.min(list.length, Math.ceil((top + height) / CARD_HEIGHT) + OVERSCAN);
    const keep = new Map();
    for (let i = first; i < last; i++) {
      const task = list[i];
      const key = task.id;
      let card = col.shown.get(key);
      if (!card) card = this.makeCard();
      if (force || card.dataset.version !== version(task, this)) this.fillCard(card, task);
      card.style.transform = `translateY(${i * CARD_HEIGHT}px)`;
      if (!card.isConnected) col.spacer.append(card);
      keep.set(key, card);
      col.shown.delete(key);
    }
    for (const card of col.shown.values()) card.remove();
    col.shown = keep;
  }

  // A card's elements are made once and updated in place, so a click that lands while a live
  // update repaints the card still reaches the same checkbox.
  makeCard() {
    const card = document.createElement("article");
    card.className = "card";
    card.tabIndex = -1;
    const top = el("div", "card-top");
    const pick = document.createElement("input");
    pick.type = "checkbox";
    pick.className = "pick";
    pick.title = "Select for a bulk action";
    pick.addEventListener("change", () => {
      const id = card.dataset.taskId;
      if (pick.checked) this.selected.add(id);
      else this.selected.delete(id);
      card.classList.toggle("selected", pick.checked);
      this.handlers.selectionChanged();
    });
    const title = el("span", "title");
    // The title has the card's whole width; the checkbox sits on the line below with the meta.
    top.append(title);
    const foot = el("div", "card-foot");
    const meta = el("div", "meta");
    foot.append(pick, meta);
    const bar = el("div", "progress");
    const fill = el("span");
    bar.append(fill);
    const barText = el("span", "progress-text");
    card.append(top, foot, bar, barText);
    card.parts = { pick, title, meta, bar, fill, barText };
    card.addEventListener("click", (e) => {
      if (e.target.closest(".pick")) return;
      this.cursor = card.dataset.taskId;
      this.handlers.open(card.dataset.taskId);
    });
    return card;
  }

  fillCard(card, task) {
    const { pick, title, meta, bar, fill, barText } = card.parts;
    card.dataset.taskId = task.id;
    card.dataset.version = version(task, this);
    card.classList.toggle("cursor", this.cursor === task.id);
    card.classList.toggle("open", this.openId === task.id);
    card.classList.toggle("selected", this.selected.has(task.id));
    pick.checked = this.selected.has(task.id);
    title.textContent = task.title;
    title.title = task.title;
    meta.textContent = "";
    meta.append(el("span", "assignee", task.assignee || "unassigned"));
    meta.append(el("span", "prio", `P${task.priority}`));
    meta.append(el("span", "age", age(task.created_at)));
    const run = runState(task);
    if (run) meta.append(el("span", `run ${run.kind}`, run.text));
    // Whatever the card cannot show whole is in its tooltip.
    meta.title = meta.textContent.trim() ? [...meta.children].map((s) => s.textContent).join(" · ") : "";
    card.title = `${task.title}\n${meta.title}`;
    const p = this.progress(task.id);
    bar.hidden = !p;
    barText.hidden = !p;
    if (p) {
      bar.title = `${p.done} of ${p.all} children finished`;
      fill.style.width = `${Math.round((100 * p.done) / p.all)}%`;
      barText.textContent = `${p.done}/${p.all}`;
    }
  }

  // Cards in reading order (column by column), for j/k.
  ordered() {
    const out = [];
    for (const s of STATUSES) {
      const col = this.columns.get(s);
      if (col.column.hidden) continue;
      for (const t of this.lists.get(s) || []) out.push(t.id);
    }
    return out;
  }

  moveCursor(step) {
    const ids = this.ordered();
    if (ids.length === 0) return null;
    let i = ids.indexOf(this.cursor);
    i = i < 0 ? 0 : Math.min(ids.length - 1, Math.max(0, i + step));
    this.cursor = ids[i];
    this.scrollTo(this.cursor);
    this.render();
    return this.cursor;
  }

  scrollTo(id) {
    const task = this.tasks.get(id);
    if (!task) return;
    const list = this.lists.get(task.status) || [];
    const i = list.findIndex((t) => t.id === id);
    const col = this.columns.get(task.status);
    if (i < 0 || !col) return;
    const y = i * CARD_HEIGHT;
    const s = col.scroller;
    if (y < s.scrollTop || y + CARD_HEIGHT > s.scrollTop + s.clientHeight) {
      s.scrollTop = Math.max(0, y - s.clientHeight / 2);
    }
  }
}

function version(task, board) {
  const p = board.progress(task.id);
  return [task.updated_at, task.status, task.title, task.assignee, task.priority,
    board.cursor === task.id, board.openId === task.id, board.selected.has(task.id),
    p ? `${p.done}/${p.all}` : ""].join("|");
}

// A lease's worker as a person reads it: `host:pid` (the API sends {host, pid, worker}; an
// older string form is shown as it is).
export function workerLabel(worker) {
  if (!worker) return "";
  if (typeof worker === "object") {
    const host = worker.host ? String(worker.host) : "";
    const pid = worker.pid !== undefined && worker.pid !== null ? String(worker.pid) : "";
    return host && pid ? `${host}:${pid}` : host || pid;
  }
  return String(worker);
}

export function runState(task) {
  if (task.status === "running") {
    const worker = task.lease ? workerLabel(task.lease.worker) : "";
    return { kind: "running", text: worker ? `running · ${worker}` : "running" };
  }
  if (task.status === "blocked") return { kind: "blocked", text: task.block_kind || "blocked" };
  if (task.consecutive_failures > 0) return { kind: "failed", text: `failed ×${task.consecutive_failures}` };
  return null;
}

export function age(ms) {
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 60) return `${Math.floor(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}
