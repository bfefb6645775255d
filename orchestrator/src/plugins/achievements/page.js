// The achievements tab: badges from the stored sessions, drawn from whatever the server has
// published so far. The page never waits for a scan: it shows the partial results and polls
// while a scan runs. Mounted by the dashboard's plugins.js with an API bound to this plugin.

const TIER_NAMES = ["bronze", "silver", "gold", "diamond", "olympian"];
const CATEGORY_NAMES = {
  tools: "Tools", subagents: "Subagent trees", board: "Board work", approvals: "Approvals",
  models: "Models and providers", time: "Time of day", streaks: "Streaks", doors: "Doors",
};

function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

function number(n) {
  return typeof n === "number" ? n.toLocaleString("en-US") : "–";
}

export function mount(root, ctx) {
  root.textContent = "";
  root.classList.add("ach");
  const head = el("div", "ach-head");
  const summary = el("span", "ach-summary", "Loading…");
  summary.id = "ach-summary";
  const progress = el("span", "ach-progress muted");
  progress.id = "ach-progress";
  const rescan = el("button", "", "Rescan");
  rescan.id = "ach-rescan";
  const reset = el("button", "", "Reset history");
  reset.id = "ach-reset";
  head.append(summary, progress, rescan, reset);
  const recent = el("section", "ach-recent");
  recent.id = "ach-recent";
  const grid = el("div", "ach-grid");
  grid.id = "ach-grid";
  root.append(head, recent, grid);

  let timer = null;
  let stopped = false;

  async function refresh() {
    // Nothing to draw while the tab is out of sight (another tab, or signed out).
    if (!root.isConnected || root.offsetParent === null) {
      schedule(1000);
      return;
    }
    let data;
    try {
      data = await ctx.get("achievements");
    } catch (e) {
      progress.textContent = e.message;
      schedule(5000);
      return;
    }
    draw(data);
    try {
      const unlocks = await ctx.get("recent-unlocks?limit=8");
      drawRecent(unlocks.unlocks || []);
    } catch {
      // The cards are what matters; the list comes back at the next poll.
    }
    schedule(data.scan.state === "scanning" || data.scan.partial ? 700 : 15000);
  }

  function schedule(ms) {
    clearTimeout(timer);
    if (!stopped) timer = setTimeout(refresh, ms);
  }

  function draw(data) {
    const { counts, scan } = data;
    summary.textContent = `${counts.unlocked} of ${counts.total} badges unlocked · ${counts.discovered} discovered · ${counts.secret} secret`;
    root.dataset.partial = String(scan.partial);
    root.dataset.scan = scan.state;
    root.dataset.counted = String(scan.sessions_counted);
    root.dataset.unlocked = String(counts.unlocked);
    if (scan.partial || scan.state === "scanning") {
      const total = scan.sessions_total ? ` of ${number(scan.sessions_total)}` : "";
      progress.textContent = `Scanning… partial results from ${number(scan.sessions_counted)}${total} sessions`;
    } else {
      progress.textContent = `Counted from ${number(scan.sessions_counted)} sessions`;
    }
    grid.textContent = "";
    let category = null;
    for (const badge of data.badges) {
      if (badge.category !== category) {
        category = badge.category;
        grid.append(el("h3", "ach-category", CATEGORY_NAMES[category] || category));
      }
      grid.append(card(badge));
    }
  }

  function card(badge) {
    const c = el("article", `ach-card ach-${badge.state}`);
    c.dataset.badge = badge.id;
    c.dataset.state = badge.state;
    if (badge.tier) c.dataset.tier = badge.tier;
    const top = el("div", "ach-card-top");
    top.append(el("span", "ach-name", badge.name));
    top.append(el("span", `ach-tier ach-tier-${badge.tier || "none"}`, badge.tier || badge.state));
    c.append(top);
    c.append(el("p", "ach-how", badge.how));
    if (badge.state !== "secret") {
      const line = el("p", "ach-value");
      line.textContent = badge.next
        ? `${number(badge.value)} now · ${badge.next.tier} at ${number(badge.next.needs)}`
        : `${number(badge.value)} now · every tier reached`;
      c.append(line);
      const bar = el("div", "ach-tiers");
      for (const t of badge.thresholds || []) {
        const step = el("span", `ach-step ach-tier-${t.tier}`);
        step.title = `${t.tier}: ${number(t.needs)}`;
        if (badge.value >= t.needs) step.classList.add("reached");
        bar.append(step);
      }
      c.append(bar);
    }
    return c;
  }

  function drawRecent(unlocks) {
    recent.textContent = "";
    recent.append(el("h3", "", "Recent unlocks"));
    if (!unlocks.length) {
      recent.append(el("p", "muted", "Nothing unlocked yet."));
      return;
    }
    const list = el("ul", "ach-recent-list");
    for (const u of unlocks) {
      const item = el("li", "");
      item.append(el("span", `ach-tier ach-tier-${u.tier}`, u.tier), ` ${u.name} · ${new Date(u.at).toLocaleString()}`);
      list.append(item);
    }
    recent.append(list);
  }

  rescan.addEventListener("click", async () => {
    try {
      await ctx.post("rescan");
      ctx.toast("Rescanning the stored sessions");
    } catch (e) {
      ctx.toast(e.message, true);
    }
    schedule(200);
  });
  reset.addEventListener("click", async () => {
    if (!confirm("Forget the unlock history and count again from the next scan?")) return;
    try {
      await ctx.post("reset-state");
      ctx.toast("Unlock history cleared");
    } catch (e) {
      ctx.toast(e.message, true);
    }
    schedule(200);
  });

  refresh();
  return {
    shown: () => schedule(0),
    stop: () => {
      stopped = true;
      clearTimeout(timer);
    },
  };
}

export { TIER_NAMES };
