// The dashboard's entry point: sign-in, the board switcher, loading a board page by page, the
// live WebSocket feed (resumed from the last event id after a drop), the keyboard, dialogs,
// bulk actions and the theme. Views live in board.js, task.js and sessions.js.

import * as api from "./api.js";
import { Board, STATUSES } from "./board.js";
import { TaskPanel } from "./task.js";
import { SessionsView } from "./sessions.js";
import { loadPluginTabs } from "./plugins.js";

const $ = (id) => document.getElementById(id);
const PAGE = 1000;
const BOARD_KEY = "troupe.board";
const THEME_KEY = "troupe.theme";
// Event kinds that change nothing a card shows.
const QUIET_KINDS = new Set(["heartbeat", "claim_extended", "commented", "attached", "attachment_removed"]);

const state = {
  board: sessionStorage.getItem(BOARD_KEY) || "",
  lastEventId: 0,
  socket: null,
  socketGen: 0,
  refreshing: new Set(),
  refreshQueue: [],
};

const board = new Board($("columns"), {
  open: (id) => openTask(id),
  selectionChanged: () => showBulk(),
  summary: (text, total) => {
    $("board-summary").textContent = text;
    // Keep the switcher's count of the open board current too.
    const option = [...$("board-select").options].find((o) => o.value === state.board);
    if (option) option.textContent = option.textContent.replace(/\(\d+\)$/, `(${total})`);
  },
});
const panel = new TaskPanel($("task-panel"), {
  board: () => board,
  boardSlug: () => state.board,
  open: (id) => openTask(id),
  close: () => closeTask(),
  toast,
  ask,
});
const sessions = new SessionsView({
  board: () => board,
  boardSlug: () => state.board,
  toast,
  visible: () => !$("view-sessions").hidden,
});
// Tests and the benchmark read timings from here.
window.troupeDashboard = { board, state, marks: {} };

// ---- sign-in ----

api.whenUnauthorized(() => signOut("The server refused the token. Check it and sign in again."));

function signOut(message) {
  api.setToken(null);
  closeFeed();
  sessions.stop();
  $("app").hidden = true;
  $("signin").hidden = false;
  const error = $("signin-error");
  error.hidden = !message;
  error.textContent = message || "";
  document.body.dataset.signedIn = "false";
  $("signin-token").focus();
}

$("signin-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  api.setToken($("signin-token").value.trim());
  $("signin-token").value = "";
  await start();
});
$("signout").addEventListener("click", () => signOut(""));

async function start() {
  try {
    await loadBoards();
  } catch (e) {
    if (!(e instanceof api.Unauthorized)) signOut(`Cannot reach the server: ${e.message}`);
    return;
  }
  $("signin").hidden = true;
  $("app").hidden = false;
  document.body.dataset.signedIn = "true";
  sessions.start();
  loadPluginTabs(toast);
  await loadBoard();
}

// ---- boards ----

async function loadBoards() {
  const { boards, default_board } = await api.get("/api/plugins/kanban/boards");
  const select = $("board-select");
  select.textContent = "";
  if (!boards.some((b) => b.board.slug === state.board)) state.board = default_board;
  for (const { board: b, counts } of boards) {
    const o = document.createElement("option");
    o.value = b.slug;
    const total = Object.values(counts).reduce((a, n) => a + n, 0);
    o.textContent = `${b.name || b.slug} (${total})`;
    o.selected = b.slug === state.board;
    select.append(o);
  }
}

$("board-select").addEventListener("change", async (e) => {
  state.board = e.target.value;
  sessionStorage.setItem(BOARD_KEY, state.board);
  closeTask();
  await loadBoard();
});

$("board-new").addEventListener("click", async () => {
  const v = await ask("New board", [{ name: "slug", value: "", label: "Slug (letters, digits, dashes)" }, { name: "name", value: "" }]);
  if (!v) return;
  try {
    await api.post("/api/plugins/kanban/boards", { slug: v.slug, name: v.name || undefined });
    state.board = v.slug.trim().toLowerCase();
    sessionStorage.setItem(BOARD_KEY, state.board);
    await loadBoards();
    await loadBoard();
  } catch (e) {
    if (!(e instanceof api.Unauthorized)) toast(e.message, true);
  }
});

// Loads the board page by page: the first page is painted at once, the rest fill in behind.
async function loadBoard() {
  const slug = state.board;
  closeFeed();
  board.clear();
  const t0 = performance.now();
  let first = true;
  let cursor;
  do {
    const page = await api.get(`/api/plugins/kanban/board${api.query({ board: slug, limit: PAGE, cursor })}`);
    if (slug !== state.board) return;
    if (first) {
      state.lastEventId = page.last_event_id;
      openFeed();
    }
    for (const status of Object.keys(page.columns)) for (const t of page.columns[status]) board.tasks.set(t.id, t);
    board.render();
    if (first) {
      first = false;
      await nextPaint();
      window.troupeDashboard.marks.firstPaintMs = performance.now() - t0;
      // Since navigation started: what a person waits from opening the page.
      window.troupeDashboard.marks.firstPaintAt = performance.now();
    }
    cursor = page.next_cursor;
  } while (cursor);
  await nextPaint();
  window.troupeDashboard.marks.fullLoadMs = performance.now() - t0;
  fillFilters();
  api.get(`/api/plugins/kanban/links${api.query({ board: slug })}`)
    .then(({ links }) => slug === state.board && board.setLinks(links))
    .catch(() => {});
  document.body.dataset.boardLoaded = slug;
}

function nextPaint() {
  return new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
}

// ---- the live feed ----

function openFeed() {
  closeFeed();
  const gen = ++state.socketGen;
  const socket = new WebSocket(api.feedUrl(state.board, state.lastEventId));
  state.socket = socket;
  socket.onopen = () => setFeed("live");
  socket.onmessage = (m) => {
    let event;
    try {
      event = JSON.parse(m.data);
    } catch {
      return;
    }
    if (event.error) {
      toast(event.error.message, true);
      return;
    }
    if (typeof event.id === "number" && event.id > state.lastEventId) state.lastEventId = event.id;
    onBoardEvent(event);
  };
  socket.onclose = () => {
    if (gen !== state.socketGen) return;
    setFeed("reconnecting");
    // Resume from the last event seen: the feed replays exactly what came after it.
    setTimeout(() => gen === state.socketGen && api.token() && openFeed(), 1000);
  };
}

function closeFeed() {
  state.socketGen++;
  if (state.socket) state.socket.close();
  state.socket = null;
  setFeed("offline");
}

function setFeed(text) {
  $("feed-state").textContent = text;
  $("feed-state").dataset.state = text;
  document.body.dataset.feed = text;
}

function onBoardEvent(event) {
  window.troupeDashboard.lastEvent = { id: event.id, at: performance.now(), kind: event.kind, task: event.task_id };
  if (event.kind === "board_created" || event.kind === "board_archived") {
    loadBoards().catch(() => {});
    return;
  }
  if (!event.task_id) return;
  board.applyEvent(event);
  // Forty workers heartbeat all the time: only the open task needs reading back for those.
  if (!QUIET_KINDS.has(event.kind) || panel.id === event.task_id) queueRefresh(event.task_id);
  if (event.kind === "linked" || event.kind === "unlinked") {
    for (const key of ["parent", "child", "parent_id", "child_id"]) {
      if (event.payload && typeof event.payload[key] === "string") queueRefresh(event.payload[key]);
    }
  }
}

// Reads changed tasks back, a few at a time, each once however many events named it.
function queueRefresh(id) {
  if (state.refreshQueue.includes(id)) return;
  state.refreshQueue.push(id);
  pumpRefresh();
}

function pumpRefresh() {
  while (state.refreshing.size < 4 && state.refreshQueue.length) {
    const id = state.refreshQueue.shift();
    state.refreshing.add(id);
    const slug = state.board;
    const done = () => {
      state.refreshing.delete(id);
      pumpRefresh();
    };
    if (panel.id === id) {
      panel.reload().catch(() => {}).finally(done);
      continue;
    }
    api.get(`/api/plugins/kanban/tasks/${id}${api.query({ board: slug })}`)
      .then((d) => {
        if (slug !== state.board) return;
        board.setTaskLinks(id, d.links);
        board.upsert(d.task);
        fillFilters();
      })
      .catch(() => {})
      .finally(done);
  }
}

// ---- task panel, creation, filters, bulk ----

async function openTask(id) {
  board.openId = id;
  board.cursor = id;
  board.render();
  try {
    await panel.show(id);
  } catch (e) {
    if (!(e instanceof api.Unauthorized)) toast(e.message, true);
  }
}

function closeTask() {
  board.openId = null;
  panel.close();
  board.render();
}

$("task-new").addEventListener("click", () => newTask());

async function newTask() {
  const v = await ask("New task", [
    { name: "title", value: "" },
    { name: "body", value: "", long: true },
    { name: "assignee", value: "" },
    { name: "priority", value: "0", type: "number" },
    { name: "parents", value: "", label: "Parents (task ids, comma separated)" },
  ]);
  if (!v || !v.title.trim()) return;
  try {
    const body = { title: v.title, body: v.body, priority: Number(v.priority) || 0 };
    if (v.assignee.trim()) body.assignee = v.assignee.trim();
    const parents = v.parents.split(",").map((s) => s.trim()).filter(Boolean);
    if (parents.length) body.parents = parents;
    const { task } = await api.post(`/api/plugins/kanban/tasks${api.query({ board: state.board })}`, body);
    board.upsert(task);
    openTask(task.id);
  } catch (e) {
    if (!(e instanceof api.Unauthorized)) toast(e.message, true);
  }
}

function fillFilters() {
  const select = $("filter-assignee");
  const current = select.value;
  const names = board.assignees();
  const have = [...select.options].map((o) => o.value).slice(2).join(",");
  if (have === names.join(",")) return;
  select.textContent = "";
  for (const [v, t] of [["", "Any assignee"], ["-", "Unassigned"], ...names.map((n) => [n, n])]) {
    const o = document.createElement("option");
    o.value = v;
    o.textContent = t;
    select.append(o);
  }
  select.value = current;
}

for (const s of STATUSES) {
  const o = document.createElement("option");
  o.value = s;
  o.textContent = s;
  $("filter-status").append(o);
}
$("filter-text").addEventListener("input", (e) => {
  board.filter.text = e.target.value;
  board.render();
});
$("filter-assignee").addEventListener("change", (e) => {
  board.filter.assignee = e.target.value;
  board.render();
});
$("filter-status").addEventListener("change", (e) => {
  board.filter.status = e.target.value;
  board.render();
});

function showBulk() {
  $("bulk").hidden = board.selected.size === 0;
  $("bulk-count").textContent = `${board.selected.size} selected`;
}

$("bulk-clear").addEventListener("click", () => {
  board.selected.clear();
  showBulk();
  board.render();
});

$("bulk-apply").addEventListener("click", async () => {
  const action = $("bulk-action").value;
  if (!action || board.selected.size === 0) return;
  let patch;
  if (action === "assign") {
    const v = await ask("Assign selected to", [{ name: "assignee", value: "" }]);
    if (!v) return;
    patch = { assignee: v.assignee };
  } else if (action === "priority") {
    const v = await ask("Priority of selected", [{ name: "priority", value: "0", type: "number" }]);
    if (!v) return;
    patch = { priority: Number(v.priority) || 0 };
  } else {
    // The API takes no shared summary for several completions: each run keeps its own.
    patch = { status: action };
    if (action === "blocked") patch.reason = "blocked from the dashboard";
  }
  try {
    const ids = [...board.selected];
    const result = await api.post(`/api/plugins/kanban/tasks/bulk${api.query({ board: state.board })}`, { ids, patch });
    const failed = (result.results || []).filter((r) => r.error);
    toast(failed.length ? `${ids.length - failed.length} changed, ${failed.length} refused: ${failed[0].error.message}` : `${ids.length} changed`, failed.length > 0);
    for (const id of ids) queueRefresh(id);
    board.selected.clear();
    showBulk();
  } catch (e) {
    if (!(e instanceof api.Unauthorized)) toast(e.message, true);
  }
});

// ---- tabs, theme, keyboard ----

function showTab(name) {
  $("view-board").hidden = name !== "board";
  $("view-sessions").hidden = name !== "sessions";
  $("tab-board").setAttribute("aria-pressed", String(name === "board"));
  $("tab-sessions").setAttribute("aria-pressed", String(name === "sessions"));
  if (name === "sessions") sessions.refreshSessions().then(() => sessions.render()).catch(() => {});
}
$("tab-board").addEventListener("click", () => showTab("board"));
$("tab-sessions").addEventListener("click", () => showTab("sessions"));

function applyTheme(theme) {
  if (theme) document.documentElement.dataset.theme = theme;
  else delete document.documentElement.dataset.theme;
}
applyTheme(localStorage.getItem(THEME_KEY));
$("theme-toggle").addEventListener("click", () => {
  const dark = document.documentElement.dataset.theme
    ? document.documentElement.dataset.theme === "dark"
    : matchMedia("(prefers-color-scheme: dark)").matches;
  const next = dark ? "light" : "dark";
  localStorage.setItem(THEME_KEY, next);
  applyTheme(next);
});

document.addEventListener("keydown", (e) => {
  const typing = e.target.closest && e.target.closest("input, textarea, select, dialog");
  if (e.key === "Escape") {
    if ($("dialog").open) return; // the dialog closes itself
    if (typing) {
      e.target.blur();
      return;
    }
    if (panel.isOpen) closeTask();
    return;
  }
  if (typing || e.metaKey || e.ctrlKey || e.altKey || $("app").hidden) return;
  if (e.key === "/") {
    e.preventDefault();
    showTab("board");
    $("filter-text").focus();
  } else if (e.key === "n") {
    e.preventDefault();
    newTask();
  } else if (e.key === "j" || e.key === "k") {
    e.preventDefault();
    const id = board.moveCursor(e.key === "j" ? 1 : -1);
    if (id && panel.isOpen) openTask(id);
  } else if (e.key === "Enter" && board.cursor) {
    openTask(board.cursor);
  } else if (e.key === "x" && board.cursor) {
    if (board.selected.has(board.cursor)) board.selected.delete(board.cursor);
    else board.selected.add(board.cursor);
    showBulk();
    board.render();
  }
});

// ---- dialogs and toasts ----

// Asks for some fields in a modal dialog; resolves with their values, or null when cancelled.
function ask(title, fields) {
  const dialog = $("dialog");
  const form = $("dialog-form");
  form.textContent = "";
  const h = document.createElement("h3");
  h.textContent = title;
  form.append(h);
  for (const f of fields) {
    const label = document.createElement("label");
    label.textContent = f.label || f.name;
    const input = document.createElement(f.long ? "textarea" : "input");
    input.name = f.name;
    input.value = f.value;
    if (f.type) input.type = f.type;
    if (f.long) input.rows = 5;
    label.append(input);
    form.append(label);
  }
  const row = document.createElement("div");
  row.className = "actions";
  const ok = document.createElement("button");
  ok.textContent = "OK";
  ok.className = "primary";
  ok.value = "ok";
  const cancel = document.createElement("button");
  cancel.textContent = "Cancel";
  cancel.value = "cancel";
  cancel.type = "button";
  cancel.addEventListener("click", () => dialog.close("cancel"));
  row.append(ok, cancel);
  form.append(row);
  return new Promise((resolve) => {
    form.onsubmit = (e) => {
      e.preventDefault();
      const values = {};
      for (const f of fields) values[f.name] = form.elements[f.name].value;
      dialog.close("ok");
      resolve(values);
    };
    dialog.onclose = () => {
      if (dialog.returnValue !== "ok") resolve(null);
    };
    dialog.returnValue = "";
    dialog.showModal();
    const firstInput = form.querySelector("input, textarea");
    if (firstInput) firstInput.focus();
  });
}

let toastTimer;
function toast(text, bad = false) {
  const t = $("toast");
  t.textContent = text;
  t.classList.toggle("bad", bad);
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => (t.hidden = true), 5000);
}

// Ages on cards move on even when nothing else does.
setInterval(() => board.render(), 30000);

// ---- boot ----

if (api.token()) start();
else signOut("");
