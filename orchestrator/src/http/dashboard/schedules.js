// The schedules view: the board's scheduled jobs with their next run and last outcome, and
// pause, resume and run-now buttons. It adds its own tab and view when loaded, so the page
// needs only the script tag; it reads the board from the page's board picker.

import * as api from "./api.js";

const $ = (id) => document.getElementById(id);
const REFRESH_MS = 5000;

function boardQuery() {
  const board = $("board-select")?.value || "";
  return board ? `?board=${encodeURIComponent(board)}` : "";
}

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text == null || text === "" ? "–" : String(text);
  if (className) td.className = className;
  return td;
}

function button(label, onClick) {
  const b = document.createElement("button");
  b.textContent = label;
  b.addEventListener("click", onClick);
  return b;
}

async function act(id, what) {
  try {
    await api.post(`/api/schedules/${encodeURIComponent(id)}/${what}${boardQuery()}`);
  } catch (e) {
    if (!(e instanceof api.Unauthorized)) $("schedules-error").textContent = e.message;
  }
  await refresh();
}

function render(jobs) {
  const box = $("schedules");
  box.replaceChildren();
  if (!jobs.length) {
    const p = document.createElement("p");
    p.className = "muted";
    p.textContent = "No scheduled jobs on this board. Make one with `troupe cron create` or the cronjob tool.";
    box.append(p);
    return;
  }
  const table = document.createElement("table");
  table.className = "schedule-table";
  const head = document.createElement("tr");
  for (const h of ["Name", "Schedule", "State", "Next run", "Last outcome", "Runs", "Owner", ""]) {
    const th = document.createElement("th");
    th.textContent = h;
    head.append(th);
  }
  table.append(head);
  for (const job of jobs) {
    const tr = document.createElement("tr");
    tr.dataset.jobId = job.id;
    tr.dataset.state = job.state;
    const zone = job.timezone && job.timezone !== "UTC" ? ` (${job.timezone})` : "";
    tr.append(
      cell(job.name, "job-name"),
      cell(job.schedule + zone),
      cell(job.state, "job-state"),
      cell(job.next_run ? new Date(job.next_run).toLocaleString() : null, "job-next"),
      cell(job.last_outcome, "job-last"),
      cell(job.runs),
      cell(job.owner),
    );
    const actions = document.createElement("td");
    if (job.state === "active") actions.append(button("Pause", () => act(job.id, "pause")));
    if (job.state === "paused") actions.append(button("Resume", () => act(job.id, "resume")));
    actions.append(button("Run now", () => act(job.id, "run")));
    tr.append(actions);
    table.append(tr);
  }
  box.append(table);
}

async function refresh() {
  try {
    const data = await api.call("GET", `/api/schedules${boardQuery()}`);
    $("schedules-error").textContent = "";
    render(data.jobs || []);
  } catch (e) {
    if (!(e instanceof api.Unauthorized)) $("schedules-error").textContent = `The schedules could not be read: ${e.message}`;
  }
}

function show(on) {
  $("view-schedules").hidden = !on;
  $("tab-schedules").setAttribute("aria-pressed", String(on));
  if (!on) return;
  for (const id of ["view-board", "view-sessions"]) {
    const view = $(id);
    if (view) view.hidden = true;
  }
  for (const tab of document.querySelectorAll("nav.tabs .tab")) {
    if (tab.id !== "tab-schedules") tab.setAttribute("aria-pressed", "false");
  }
  refresh();
}

function install() {
  const nav = document.querySelector("nav.tabs");
  if (!nav || $("tab-schedules")) return;
  const tab = document.createElement("button");
  tab.id = "tab-schedules";
  tab.className = "tab";
  tab.setAttribute("aria-pressed", "false");
  tab.textContent = "Schedules";
  nav.append(tab);
  const view = document.createElement("main");
  view.id = "view-schedules";
  view.hidden = true;
  const block = document.createElement("section");
  block.className = "panel-block";
  const title = document.createElement("h2");
  title.textContent = "Scheduled jobs";
  const error = document.createElement("p");
  error.id = "schedules-error";
  error.className = "error";
  error.setAttribute("role", "alert");
  const list = document.createElement("div");
  list.id = "schedules";
  block.append(title, error, list);
  view.append(block);
  const panel = $("task-panel");
  panel.parentNode.insertBefore(view, panel);
  tab.addEventListener("click", () => show(true));
  for (const other of nav.querySelectorAll(".tab")) {
    if (other !== tab) other.addEventListener("click", () => show(false));
  }
  $("board-select")?.addEventListener("change", () => {
    if (!view.hidden) refresh();
  });
  setInterval(() => {
    if (!view.hidden) refresh();
  }, REFRESH_MS);
}

install();
