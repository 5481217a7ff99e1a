// The Agora dashboard: one page, routed on the URL's #fragment, refreshed every 2 s from the
// master's JSON API (/api/...). No framework and no build step: plain DOM calls.
"use strict";

const REFRESH_MS = 2000;
const COLORS = ["#2f6fde", "#e8590c", "#2b8a3e", "#9c36b5", "#c23b3b", "#1098ad", "#f08c00"];
const main = document.getElementById("main");
let timer = null;
let tail = null; // the open log viewer: {key, path, offset}

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

async function api(path) {
  const reply = await fetch(path, { cache: "no-store" });
  const body = await reply.json();
  if (!reply.ok) throw new Error(body.error || `${reply.status} ${reply.statusText}`);
  return body;
}

// Actions: a POST of JSON; the answer's message (or the refusal) shows above the page until
// the next one or another page.
async function post(path, body) {
  const reply = await fetch(path, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body || {}),
  });
  const answer = await reply.json();
  if (!reply.ok) throw new Error(answer.error || `${reply.status} ${reply.statusText}`);
  return answer;
}

function notify(text, refused) {
  document.getElementById("notice").replaceChildren(h("div",
    { class: refused ? "notice refused" : "notice done", "data-testid": refused ? "refused" : "done" },
    text, " ", h("button", { onclick: () => notify.clear() }, "dismiss")));
}
notify.clear = () => document.getElementById("notice").replaceChildren();

// A button that asks `question` (or `question()`) first, then POSTs `body()` to `path`; once
// done, the page shown is `then` (a #fragment: e.g. the list, after a delete) or this one again.
function action(testid, label, question, path, body, then) {
  return h("button", { class: "action", "data-testid": testid, onclick: async () => {
    if (!window.confirm(typeof question === "function" ? question() : question)) return;
    try {
      notify((await post(path, body ? body() : {})).message, false);
      if (then) history.pushState(null, "", then); // no hashchange: the notice stays
      route();
    } catch (e) { notify(e.message, true); }
  } }, label);
}

// A field whose value, once the user types in it, survives the page's refreshes (until
// `kept.forget(key)`, when its action is sent).
const drafts = {};
function kept(key, value, attrs) {
  const input = h("input", { ...attrs, value: drafts[key] ?? value,
    oninput: () => { drafts[key] = input.value; } });
  return input;
}
kept.forget = (key) => { delete drafts[key]; };

// A filter of a list page: its value in the page's #fragment query (`params`), so that a
// filtered list can be linked to and survives refreshes.
function queryFilter(page, params, name, el) {
  el.value = params.get(name) || "";
  el.addEventListener("change", () => {
    if (el.value) params.set(name, el.value); else params.delete(name);
    location.hash = `#/${page}?${params}`;
  });
  return el;
}

function ago(t) {
  if (!t) return "-";
  const s = Math.max(0, Date.now() / 1000 - t);
  return s < 90 ? `${s.toFixed(0)} s ago` : `${(s / 60).toFixed(0)} min ago`;
}

function pct(x) { return `${(100 * (x || 0)).toFixed(1)}%`; }

function bar(used, total) {
  const f = total > 0 ? Math.min(1, used / total) : 0;
  return h("span", {}, h("span", { class: "bar" }, h("span", { style: `width:${100 * f}%` })),
    `${+used.toFixed(2)} / ${+total.toFixed(2)}`);
}

function table(testid, columns, rows, empty) {
  if (!rows.length) return h("p", { class: "muted", "data-testid": testid }, empty || "(none)");
  return h("table", { "data-testid": testid },
    h("thead", {}, h("tr", {}, columns.map(([title]) => h("th", {}, title)))),
    h("tbody", {}, rows.map((row) => h("tr", {}, columns.map(([, cell]) => h("td", {}, cell(row)))))));
}

// Shown as the command line shows them (RUNNING, FINISHED); the class keeps the full name.
function stateCell(state) {
  return h("span", { class: `state-${state}` }, String(state).replace(/^(TASK|JOB|INSTANCE)_/, ""));
}

function agentLink(id, text) {
  return h("a", { href: `#/agent/${encodeURIComponent(id)}` }, text || id);
}

function frameworkLink(id, text) {
  return h("a", { href: `#/framework/${encodeURIComponent(id)}` }, text || id);
}

function seconds(s) {
  return s < 90 ? `${s.toFixed(0)} s` : s < 5400 ? `${(s / 60).toFixed(0)} min` : `${(s / 3600).toFixed(1)} h`;
}

// Outstanding offers: who holds what, on which agent, for how long.
function offersTable(testid, offers, timeout) {
  return table(testid, [
    ["Framework", (o) => frameworkLink(o.framework_id, o.framework || o.framework_id)],
    ["Agent", (o) => agentLink(o.agent_id, o.hostname || o.agent_id)],
    ["Resources", (o) => h("code", {}, o.resources)],
    ["Held for", (o) => seconds(o.age_seconds) +
      (timeout ? ` (rescinded at ${seconds(timeout)})` : "")],
    ["Offer", (o) => h("code", {}, o.offer_id)],
  ], offers, "No outstanding offers.");
}

function taskTable(testid, tasks, empty) {
  return table(testid, [
    ["Task", taskLink],
    ["Framework", (t) => frameworkLink(t.framework_id, t.framework || t.framework_id)],
    ["State", (t) => stateCell(t.state)],
    ["Host", (t) => agentLink(t.agent_id, t.hostname || t.agent_id)],
    ["Resources", (t) => h("code", {}, t.resources)],
    ["Last message", (t) => t.message],
  ], tasks.slice().reverse(), empty);
}

// A two-column table of a thing's fields: [[label, value], ...].
function facts(testid, rows) {
  return h("table", { class: "facts", "data-testid": testid },
    h("tbody", {}, rows.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v)))));
}

function taskLink(t) {
  return h("a", { href: `#/task/${encodeURIComponent(t.framework_id)}/${encodeURIComponent(t.task_id)}` },
    t.task_id);
}

// --- pages -------------------------------------------------------------------------------

const pages = {
  async overview() {
    const [o, shares] = await Promise.all([api("/api/overview"), api("/api/shares")]);
    const t = o.tasks;
    const card = (label, value, id) => h("div", { class: "card", "data-testid": id },
      h("div", { class: "muted" }, label), h("div", { class: "value" }, value));
    const res = Object.keys(o.total_scalars).map((name) =>
      h("div", {}, h("b", {}, `${name} `), bar(o.allocated_scalars[name] || 0, o.total_scalars[name])));
    return [
      h("h1", {}, "Cluster"),
      h("div", { class: "cards" },
        card("Agents", `${o.agents_active} / ${o.agents}`, "agents-count"),
        card("Frameworks", `${o.frameworks_connected} / ${o.frameworks}`, "frameworks-count"),
        card("Running tasks", t.TASK_RUNNING || 0, "running-count"),
        card("Finished", t.TASK_FINISHED || 0, "finished-count"),
        card("Failed or lost", (t.TASK_FAILED || 0) + (t.TASK_LOST || 0) + (t.TASK_ERROR || 0), "failed-count"),
        card("Outstanding offers", h("a", { href: "#/offers" }, o.offers), "offers-count")),
      Object.keys(o.held_back).length ? h("p", { class: "warn", "data-testid": "held-back-note" },
        "Held back for quota: ", Object.entries(o.held_back).map(([role, r]) => `${r} for role ${role}`).join("; "),
        " (", h("a", { href: "#/offers" }, "see offers"), ")") : null,
      h("h2", {}, "Resources allocated"), h("div", {}, res),
      h("h2", {}, "Dominant shares (DRF), last minutes"),
      chart("by role", shares, "roles"),
      chart("by framework", shares, "frameworks"),
      h("p", { class: "muted" }, `master ${o.master_id}${o.leader ? ", leader " + o.leader : ""}`),
    ];
  },

  async agents() {
    const agents = await api("/api/agents");
    return [h("h1", {}, "Agents"), table("agents", [
      ["Hostname", (a) => agentLink(a.agent_id, a.hostname)],
      ["State", (a) => stateCell(a.state)],
      ["CPUs", (a) => bar(a.allocated_scalars.cpus || 0, a.total_scalars.cpus || 0)],
      ["Memory MB", (a) => bar(a.allocated_scalars.mem || 0, a.total_scalars.mem || 0)],
      ["Tasks", (a) => a.tasks],
      ["Attributes", (a) => Object.entries(a.attributes).map(([k, v]) => `${k}=${v}`).join(" ")],
      ["Last heartbeat", (a) => ago(a.last_heartbeat_at)],
      ["Id", (a) => h("code", {}, a.agent_id)],
    ], agents, "No agents are registered.")];
  },

  async frameworks() {
    const frameworks = await api("/api/frameworks");
    const why = h("div", { "data-testid": "why" });
    const explain = async (f) => {
      why.replaceChildren(h("p", { class: "muted" }, "asking the allocator…"));
      try {
        const w = await api(`/api/frameworks/${encodeURIComponent(f.framework_id)}/why`);
        why.replaceChildren(h("h2", {}, `Why ${w.name || w.framework_id} gets no offers`),
          h("ul", {}, (w.reasons.length ? w.reasons : ["nothing holds it back"]).map((r) => h("li", {}, r))));
      } catch (e) { why.replaceChildren(h("p", { class: "error" }, e.message)); }
    };
    return [h("h1", {}, "Frameworks"), table("frameworks", [
      ["Name", (f) => frameworkLink(f.framework_id, f.name || f.framework_id)],
      ["Role", (f) => f.role],
      ["Connected", (f) => (f.connected ? "yes" : "no") + (f.suppressed ? " (suppressed)" : "")],
      ["Dominant share", (f) => pct(f.dominant_share)],
      ["Tasks", (f) => f.tasks],
      ["Allocated", (f) => h("code", {}, f.allocated)],
      ["Offered", (f) => h("code", {}, f.offered)],
      ["", (f) => h("button", { onclick: () => explain(f) }, "why no offers?")],
      ["Id", (f) => h("code", {}, f.framework_id)],
    ], frameworks, "No frameworks are registered."), why];
  },

  async tasks() {
    const params = new URLSearchParams(location.hash.split("?")[1] || "");
    const tasks = await api(`/api/tasks?${params}`);
    const filter = (name, el) => queryFilter("tasks", params, name, el);
    const states = ["", "RUNNING", "STAGING", "STARTING", "KILLING", "FINISHED", "FAILED", "KILLED",
      "ERROR", "LOST"];
    return [h("h1", {}, "Tasks"),
      h("div", { class: "filters" },
        filter("state", h("select", { "data-testid": "filter-state" },
          states.map((s) => h("option", { value: s }, s || "any state")))),
        filter("framework", h("input", { placeholder: "framework name or id" })),
        filter("agent", h("input", { placeholder: "agent host or id" }))),
      taskTable("tasks", tasks.slice(-500), "No tasks match.")];
  },

  async task(frameworkId, taskId) {
    const base = `/api/tasks/${encodeURIComponent(frameworkId)}/${encodeURIComponent(taskId)}`;
    const t = await api(base);
    const parts = [h("h1", {}, `Task ${t.task_id}`), table("task", [
      ["Framework", (x) => frameworkLink(x.framework_id, x.framework || x.framework_id)],
      ["State", (x) => stateCell(x.state)],
      ["Agent", (x) => h("span", {}, agentLink(x.agent_id, x.hostname || x.agent_id), ` (${x.agent_state})`)],
      ["Resources", (x) => h("code", {}, x.resources)],
      ["Last message", (x) => `${x.message}${x.reason ? " [" + x.reason + "]" : ""}`],
    ], [t])];
    if (!["TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_ERROR", "TASK_LOST", "TASK_DROPPED",
      "TASK_GONE"].includes(t.state)) {
      parts.push(h("p", {}, action("kill", "Kill task",
        `Kill task ${t.task_id} of ${t.framework || t.framework_id}? It gets SIGTERM, then SIGKILL after its grace period.`,
        `${base}/kill`)));
    }
    if (t.state === "TASK_RUNNING") {
      try {
        const { usage } = await api(`${base}/usage`);
        if (usage) parts.push(h("p", { "data-testid": "usage" },
          `CPU ${((usage.cpu_user_seconds || 0) + (usage.cpu_system_seconds || 0)).toFixed(2)} s, ` +
          `memory ${((usage.mem_rss_bytes || 0) / 1048576).toFixed(1)} MB of ` +
          `${((usage.mem_limit_bytes || 0) / 1048576).toFixed(0)} MB, ` +
          `disk ${((usage.disk_used_bytes || 0) / 1048576).toFixed(1)} MB`));
      } catch (e) { parts.push(h("p", { class: "error" }, e.message)); }
    }
    try {
      const { files } = await api(`${base}/files`);
      const key = `${frameworkId}/${taskId}`;
      const open = (path) => { tail = { key, path, offset: 0, text: "" }; route(); };
      parts.push(h("h2", {}, "Sandbox"), table("files", [
        ["File", (f) => (f.is_dir ? f.path + "/" : h("a", { href: "javascript:void 0", onclick: () => open(f.path) }, f.path))],
        ["Size", (f) => f.size || 0],
      ], files));
      if (!tail || tail.key !== key) tail = { key, path: "stdout", offset: 0, text: "" };
      parts.push(h("h2", {}, `${tail.path} (live)`), await follow(base));
    } catch (e) {
      parts.push(h("p", { class: "error", "data-testid": "sandbox-error" }, e.message));
    }
    return parts;
  },

  async agent(agentId) {
    const a = await api(`/api/agents/${encodeURIComponent(agentId)}`);
    const res = (name) => h("span", {}, bar(a.allocated_scalars[name] || 0, a.total_scalars[name] || 0),
      ` (${+(a.free_scalars[name] || 0).toFixed(2)} free)`);
    return [
      h("h1", {}, `Agent ${a.hostname}`),
      facts("agent", [
        ["State", h("span", {}, stateCell(a.state), a.draining ? " (drained: offered to no one)" : "")],
        ["Address", a.address],
        ["Total", h("code", {}, a.total)],
        ["Allocated", h("code", {}, a.allocated || "-")],
        ["Free", h("code", {}, a.free || "-")],
        ["CPUs", res("cpus")],
        ["Memory MB", res("mem")],
        ["Attributes", Object.entries(a.attributes).map(([k, v]) => `${k}=${v}`).join(" ") || "-"],
        ["Last heartbeat", ago(a.last_heartbeat_at)],
        ["Id", h("code", {}, a.agent_id)],
      ]),
      h("p", {}, a.draining
        ? action("undrain", "Undrain", `Offer ${a.hostname}'s resources again?`,
          `/api/agents/${encodeURIComponent(a.agent_id)}/undrain`)
        : action("drain", "Drain", `Drain ${a.hostname}? No new offers of it; its tasks keep running.`,
          `/api/agents/${encodeURIComponent(a.agent_id)}/drain`)),
      h("h2", {}, "By framework"),
      table("agent-frameworks", [
        ["Framework", (f) => frameworkLink(f.framework_id, f.framework)],
        ["Tasks use", (f) => h("code", {}, f.in_use)],
        ["Offered", (f) => h("code", {}, f.offered)],
      ], a.frameworks, "No framework uses or is offered anything here."),
      h("h2", {}, "Outstanding offers"), offersTable("agent-offers", a.offers),
      h("h2", {}, "Running tasks"), taskTable("agent-tasks", a.running, "No tasks run here."),
      h("h2", {}, "Ended tasks"), taskTable("agent-ended", a.ended, "None."),
    ];
  },

  async framework(key) {
    const f = await api(`/api/frameworks/${encodeURIComponent(key)}`);
    const q = f.role_quota;
    return [
      h("h1", {}, `Framework ${f.label}`),
      facts("framework", [
        ["Role", f.role],
        ["Connected", (f.connected ? "yes" : "no") + (f.suppressed ? " (suppressed: asks for no offers)" : "")],
        ["Dominant share", pct(f.dominant_share)],
        ["Allocated", h("code", {}, f.allocated || "-")],
        ["Offered", h("code", {}, f.offered || "-")],
        ["Role's quota", q
          ? h("code", {}, `guarantee ${q.guarantee}, limit ${q.limit || "-"}, held back for it ${q.held_back}`)
          : "none"],
        ["Principal", f.principal || "-"],
        ["User", f.user || "-"],
        ["Registered", ago(f.registered_at)],
        ["Id", h("code", {}, f.framework_id)],
      ]),
      h("h2", {}, "Why no offers"),
      h("ul", { "data-testid": "framework-why" },
        (f.why.length ? f.why : ["nothing holds it back"]).map((r) => h("li", {}, r))),
      h("h2", {}, "Outstanding offers it holds"), offersTable("framework-offers", f.offers),
      h("h2", {}, "Running tasks"), taskTable("framework-tasks", f.running, "No tasks running."),
      h("h2", {}, "Ended tasks"), taskTable("framework-ended", f.ended, "None."),
    ];
  },

  async offers() {
    const o = await api("/api/offers");
    return [
      h("h1", {}, "Outstanding offers"),
      h("p", { class: "muted" }, o.offer_timeout_seconds
        ? `An offer not answered within ${seconds(o.offer_timeout_seconds)} is rescinded (--offer-timeout).`
        : "No offer timeout: an offer is held until its framework answers (--offer-timeout)."),
      offersTable("offers", o.offers, o.offer_timeout_seconds),
      h("h2", {}, "Held back for quota"),
      h("p", { class: "muted" }, "While a role is below its guarantee, this much of the free resources is offered to no other role."),
      table("held-back", [
        ["Role", (r) => r.role],
        ["Held back", (r) => h("code", {}, r.held_back)],
        ["Guarantee", (r) => h("code", {}, r.guarantee)],
        ["Allocated", (r) => h("code", {}, r.allocated || "-")],
        ["Frameworks", (r) => r.frameworks.length ? r.frameworks.flatMap((id) => [frameworkLink(id), " "]) : "none in this role"],
      ], o.held_back, "Nothing is held back for quota."),
      h("h2", {}, "Preempted"),
      h("p", { class: "muted" }, "Tasks stopped for a role below its guarantee or fair share, the latest first (agora cluster preemptions)."),
      table("preemptions", [
        ["When", (p) => new Date(p.at * 1000).toLocaleTimeString()],
        ["Task", (p) => h("a", { href: `#/task/${encodeURIComponent(p.framework_id)}/${encodeURIComponent(p.task_id)}` }, p.task_id)],
        ["Of role", (p) => p.role],
        ["On", (p) => agentLink(p.agent_id, p.hostname)],
        ["For role", (p) => p.beneficiary],
        ["Owed", (p) => p.reason],
      ], o.preemptions, "No task has been preempted (preemption is off unless the master has a timeout)."),
    ];
  },

  async app(appId) {
    const a = await api(`/api/apps/${encodeURIComponent(appId)}`);
    const app = a.app;
    const rows = (a.tasks || []).map((t) => ({ ...t, framework_id: a.framework_id }));
    return [
      h("h1", {}, `App ${app.id}`),
      facts("app", [
        ["State", stateCell(a.state)],
        ["Instances", `${app.instances || 0} wanted, ${a.running || 0} running, ${a.healthy || 0} healthy, ` +
          `${a.unhealthy || 0} unhealthy, ${a.staged || 0} staging`],
        ["Waiting because", a.waiting_reason || "-"],
        ["Last failure", a.last_failure ? `${a.last_failure} (${ago(a.last_failure_at)})` : "-"],
        ["Last failed check", a.last_health_failure
          ? `${a.last_health_failure} (${ago(a.last_health_failure_at)})` : "-"],
        ["Each instance", h("code", {}, `cpus:${app.cpus || 0};mem:${app.mem || 0}` +
          (app.ports ? `; ${app.ports} port(s)` : ""))],
        ["Command", h("code", {}, app.cmd || (app.args || []).join(" "))],
        ["Owner", (app.labels || {})["agora.owner"] || "-"],
        ["Version", h("code", {}, app.version || "-")],
      ]),
      scaler(app),
      (a.deployments || []).length ? h("h2", {}, "Deployments") : null,
      (a.deployments || []).length ? table("app-deployments", [
        ["To version", (d) => h("code", {}, d.to_version)],
        ["Old instances", (d) => d.old_instances || 0],
        ["New", (d) => d.new_instances || 0],
        ["New healthy", (d) => d.new_healthy || 0],
      ], a.deployments) : null,
      h("h2", {}, "Instances"),
      table("app-tasks", [
        ["Task", taskLink],
        ["State", (t) => stateCell(t.state)],
        ["Healthy", (t) => (t.healthy === undefined ? "-" : t.healthy ? "yes" : "no")],
        ["Host", (t) => agentLink(t.agent_id, t.hostname || t.agent_id)],
        ["Endpoint", (t) => (t.ports || []).map((p) => `${t.host}:${p}`).join(" ") || "-"],
        ["Message", (t) => (t.killing ? "being killed. " : "") + (t.message || "")],
      ], rows, "No instances."),
    ];
  },

  async roles() {
    const roles = await api("/api/roles");
    return [h("h1", {}, "Roles"), table("roles", [
      ["Role", (r) => r.role],
      ["Weight", (r) => r.weight],
      ["Dominant share", (r) => pct(r.dominant_share)],
      ["Allocated", (r) => h("code", {}, r.allocated)],
      ["Quota guarantee", (r) => h("code", {}, r.guarantee || "-")],
      ["Quota limit", (r) => h("code", {}, r.limit || "-")],
      // What other roles may not be offered while this role is below its guarantee.
      ["Held back for it", (r) => h("code", {}, r.held_back || "-")],
      ["Frameworks", (r) => r.frameworks.length],
    ], roles, "No roles yet.")];
  },

  async apps() {
    const a = await api("/api/apps");
    if (!a.available) return [h("h1", {}, "Service apps"), h("p", { class: "muted" }, a.message)];
    return [h("h1", {}, "Service apps"), table("apps", [
      ["App", (x) => h("a", { href: `#/app/${encodeURIComponent(x.app.id)}` }, x.app.id)],
      ["State", (x) => stateCell(x.state)],
      ["Wanted", (x) => x.app.instances || 0],
      ["Running", (x) => x.running || 0],
      ["Healthy", (x) => x.healthy || 0],
      ["Unhealthy", (x) => x.unhealthy || 0],
      ["Waiting because", (x) => x.waiting_reason || ""],
    ], a.apps, "No apps.")];
  },
};

// The app page's instance count: what the user typed survives the page's refreshes.
function scaler(app) {
  const key = `app:${app.id}`;
  const input = kept(key, app.instances || 0,
    { type: "number", min: "0", step: "1", "data-testid": "instances" });
  return h("p", { class: "filters" }, h("label", {}, "Instances "), input,
    action("scale", "Scale", () => `Scale app ${app.id} to ${input.value} instance(s)?`,
      `/api/apps/${encodeURIComponent(app.id)}/scale`, () => {
        kept.forget(key);
        return { instances: Number(input.value) };
      }));
}

// A live tail: each refresh reads what was appended since the last one.
async function follow(base) {
  const read = await api(`${base}/file?path=${encodeURIComponent(tail.path)}&offset=${tail.offset}`);
  tail.text += read.data;
  tail.offset = read.offset + read.data.length;
  if (tail.text.length > 200000) tail.text = tail.text.slice(-200000);
  return h("pre", { class: "log", "data-testid": "log" }, tail.text || "(empty)");
}

// An SVG line per series (share against local time): a series is drawn only where it has
// samples, so a framework that did not exist (null), or a stretch with no samples at all (the
// master was down), leaves a gap instead of a line drawn across it.
function chart(title, shares, kind) {
  const at = shares.at, series = shares[kind], labels = (kind === "frameworks" && shares.labels) || {};
  const names = Object.keys(series);
  const W = 720, H = 180, L = 44, R = 12, T = 24, B = 22;
  const svgNS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(svgNS, "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("width", W); svg.setAttribute("height", H);
  svg.setAttribute("data-testid", `chart-${kind}`);
  const el = (tag, attrs, text) => {
    const e = document.createElementNS(svgNS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    svg.append(e);
    return e;
  };
  const max = Math.max(0.05, ...names.flatMap((n) => series[n].filter((v) => v !== null)));
  const t1 = at.length ? at[at.length - 1] : Date.now() / 1000;
  const t0 = Math.min(at.length ? at[0] : t1, t1 - 60);
  const x = (t) => L + ((t - t0) / Math.max(1, t1 - t0)) * (W - L - R);
  const y = (v) => H - B - (v / max) * (H - T - B);
  // Time axis: a tick every 10 s .. 10 min, whichever gives at most 10, in local time.
  const step = [10, 15, 30, 60, 120, 300, 600].find((s) => (t1 - t0) / s <= 10) || 600;
  const format = step < 60 ? { hour: "2-digit", minute: "2-digit", second: "2-digit" }
    : { hour: "2-digit", minute: "2-digit" };
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
    el("line", { x1: x(t), y1: T, x2: x(t), y2: H - B, stroke: "#eef0f3" });
    el("text", { x: x(t), y: H - 6, "text-anchor": "middle", class: "tick", "data-at": t },
      new Date(t * 1000).toLocaleTimeString([], format));
  }
  el("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#ccc" });
  el("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#ccc" });
  el("text", { x: L - 4, y: y(max) + 4, "text-anchor": "end", class: "tick" }, pct(max));
  el("text", { x: L - 4, y: y(0) + 4, "text-anchor": "end", class: "tick" }, "0%");
  const gap = 2.5 * (shares.interval || 2);
  names.forEach((name, i) => {
    const color = COLORS[i % COLORS.length];
    let run = [];
    const draw = () => {
      if (run.length === 1) {
        el("circle", { cx: run[0][0], cy: run[0][1], r: 2, fill: color, "data-series": name });
      } else if (run.length > 1) {
        el("polyline", { points: run.map((p) => p.join(",")).join(" "), fill: "none",
          stroke: color, "stroke-width": 2, "data-series": name });
      }
      run = [];
    };
    at.forEach((t, j) => {
      const v = series[name][j];
      if (v === null || (j > 0 && t - at[j - 1] > gap)) draw();
      if (v !== null) run.push([x(t).toFixed(1), y(v).toFixed(1)]);
    });
    draw();
  });
  el("text", { x: L, y: 15 }, `${title} (max ${pct(max)})`);
  const legend = h("div", { class: "legend", "data-testid": `legend-${kind}` }, names.map((n, i) =>
    h("span", { title: n }, h("i", { style: `background:${COLORS[i % COLORS.length]}` }), labels[n] || n)));
  return h("div", {}, svg, legend);
}

// --- routing -----------------------------------------------------------------------------

async function route() {
  clearTimeout(timer);
  const [path] = location.hash.replace(/^#\/?/, "").split("?");
  const [name, ...args] = path.split("/").map(decodeURIComponent);
  const page = pages[name || "overview"];
  const section = { agent: "agents", framework: "frameworks", task: "tasks", job: "jobs",
    schedule: "jobs", history: "jobs", app: "apps" };
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("active", a.dataset.page === (section[name] || name || "overview"));
  }
  const status = document.getElementById("status");
  try {
    if (!page) throw new Error(`no page ${location.hash}`);
    const content = await page(...args);
    main.replaceChildren(...content.filter((c) => c !== null));
    status.textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (e) {
    main.replaceChildren(h("h1", {}, "Error"), h("p", { class: "error", "data-testid": "error" }, e.message));
  }
  timer = setTimeout(refresh, REFRESH_MS);
}

// The periodic refresh, put off while the user types in a field of the page.
function refresh() {
  const focused = document.activeElement;
  if (focused && main.contains(focused) && ["INPUT", "SELECT"].includes(focused.tagName)) {
    timer = setTimeout(refresh, REFRESH_MS);
  } else {
    route();
  }
}

window.addEventListener("hashchange", () => { tail = null; notify.clear(); route(); });
// Once every script has run: jobs.js adds the batch framework's pages to `pages`.
window.addEventListener("DOMContentLoaded", route);
