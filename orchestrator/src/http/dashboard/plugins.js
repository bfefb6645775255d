// Tabs from plugins: reads GET /api/dashboard/tabs, adds a button and a view for each, and
// loads a tab's module (served by troupe under /dashboard/plugins/<name>/) the first time it is
// opened. The module exports mount(root, context) and may return {shown(), stop()}. A tab whose
// manifest is broken gets a disabled-looking button whose view says why.

import * as api from "./api.js";

const loaded = new Map();

// Hides every view of the page but `view`, and marks only `button` pressed.
function showOnly(view, button) {
  for (const main of document.querySelectorAll("#app > main")) main.hidden = main !== view;
  for (const tab of document.querySelectorAll("nav.tabs .tab")) tab.setAttribute("aria-pressed", String(tab === button));
}

// The API a tab's module gets: calls below its own prefix, with the page's token.
function contextFor(tab, toast) {
  const path = (p) => tab.api + String(p).replace(/^\//, "");
  return {
    name: tab.name,
    get: (p) => api.get(path(p)),
    post: (p, body) => api.post(path(p), body),
    call: (method, p, body) => api.call(method, path(p), body),
    toast,
  };
}

export async function loadPluginTabs(toast) {
  let tabs;
  try {
    ({ tabs } = await api.get("/api/dashboard/tabs"));
  } catch (e) {
    if (!(e instanceof api.Unauthorized)) toast(`Plugin tabs: ${e.message}`, true);
    return;
  }
  if (!document.querySelector('link[href="/dashboard/plugins.css"]')) {
    const own = document.createElement("link");
    own.rel = "stylesheet";
    own.href = "/dashboard/plugins.css";
    document.head.append(own);
  }
  const nav = document.querySelector("nav.tabs");
  const app = document.getElementById("app");
  const panel = document.getElementById("task-panel");
  // Signed in again: the tabs are drawn afresh.
  for (const handle of loaded.values()) if (handle.stop) handle.stop();
  loaded.clear();
  for (const old of document.querySelectorAll("[data-plugin-tab]")) old.remove();
  // Whenever one of the page's own views is shown again (a tab, a key), the plugin views and
  // buttons step back, whichever code showed it.
  if (!app.dataset.pluginWatch) {
    app.dataset.pluginWatch = "true";
    new MutationObserver((changes) => {
      for (const change of changes) {
        const main = change.target;
        if (main.tagName !== "MAIN" || main.dataset.pluginTab || main.hidden) continue;
        for (const view of document.querySelectorAll("main[data-plugin-tab]")) view.hidden = true;
        for (const button of document.querySelectorAll("button[data-plugin-tab]")) button.setAttribute("aria-pressed", "false");
      }
    }).observe(app, { subtree: true, attributes: true, attributeFilter: ["hidden"] });
  }
  for (const tab of tabs) {
    const button = document.createElement("button");
    button.className = "tab plugin-tab";
    button.id = `tab-plugin-${tab.name}`;
    button.dataset.pluginTab = tab.name;
    button.setAttribute("aria-pressed", "false");
    button.textContent = tab.label;
    const view = document.createElement("main");
    view.id = `view-plugin-${tab.name}`;
    view.dataset.pluginTab = tab.name;
    view.className = "plugin-view";
    view.hidden = true;
    if (tab.problem) {
      button.classList.add("broken");
      button.title = tab.problem;
      const note = document.createElement("p");
      note.className = "error plugin-problem";
      note.textContent = `This tab is disabled: ${tab.problem}`;
      view.append(note);
    } else {
      for (const href of tab.styles || []) {
        const link = document.createElement("link");
        link.rel = "stylesheet";
        link.href = href;
        link.dataset.pluginTab = tab.name;
        document.head.append(link);
      }
    }
    button.addEventListener("click", () => openTab(tab, button, view, toast));
    nav.append(button);
    app.insertBefore(view, panel);
  }
  document.body.dataset.pluginTabs = String(tabs.length);
}

async function openTab(tab, button, view, toast) {
  showOnly(view, button);
  if (tab.problem) return;
  const running = loaded.get(tab.name);
  if (running) {
    if (running.shown) running.shown();
    return;
  }
  loaded.set(tab.name, {});
  try {
    const module = await import(tab.entry);
    const handle = module.mount(view, contextFor(tab, toast)) || {};
    loaded.set(tab.name, handle);
    view.dataset.mounted = "true";
  } catch (e) {
    loaded.delete(tab.name);
    view.textContent = "";
    const note = document.createElement("p");
    note.className = "error plugin-problem";
    note.textContent = `The ${tab.label} tab failed to load: ${e.message}`;
    view.append(note);
  }
}
