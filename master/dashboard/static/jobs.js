// The batch framework's pages: jobs, a job, a cron schedule, the finished jobs' history, and
// their actions (as `agora job` has them). Uses app.js's helpers; adds to its `pages`.
"use strict";

const NOT_STARTED = ["JOB_QUEUED", "JOB_WAITING"];
const ENDED = ["JOB_SUCCEEDED", "JOB_FAILED", "JOB_KILLED"];
// A dependency's condition as `agora job submit --after JOB:COND` writes it.
const CONDITION = { AFTER_OK: "ok", AFTER_ANY: "any", AFTER_NOT_OK: "notok" };

function when(t) { return t ? new Date(t * 1000).toLocaleString() : "-"; }

function jobLink(id, text) {
  return h("a", { href: `#/job/${encodeURIComponent(id)}` }, text || id);
}

function scheduleLink(name) {
  return h("a", { href: `#/schedule/${encodeURIComponent(name)}` }, name);
}

// A job's pending reason as `agora job list` shows it: PENDING_RUNNING_LIMIT -> running-limit.
function pendingName(reason) {
  if (!reason || reason === "PENDING_REASON_NONE") return "";
  return reason.replace(/^PENDING_/, "").toLowerCase().replace(/_/g, "-");
}

function counts(j) {
  return Object.entries(j.counts || {}).map(([k, v]) => `${k} ${v}`).join(", ") || "-";
}

function jobState(j) {
  return h("span", {}, stateCell(j.state), j.held ? " (held)" : "");
}

// What each instance gets, as `agora job submit` takes it.
function resources(spec) {
  const task = spec.task || {};
  const parts = [`cpus:${task.cpus || 0}`, `mem:${task.mem || 0}`];
  if (task.disk) parts.push(`disk:${task.disk}`);
  if (task.gpus) parts.push(`gpus:${task.gpus}`);
  if (task.ports) parts.push(`${task.ports} port(s)`);
  return parts.join(";") + (spec.gang ? ", gang (all at once)" : "") +
    (spec.revocable ? ", may run on revocable resources" : "");
}

function commandText(spec) {
  const command = (spec.task || {}).command || {};
  return command.shell || (command.argv || []).join(" ") || "-";
}

function constraintsText(spec) {
  return (spec.constraints || []).map((c) => `${c.field}:${c.operator}${c.value ? ":" + c.value : ""}`)
    .join(", ") || "-";
}

// The jobs it waits for (spec.after), each linked; while it waits, which have ended as asked.
// (Once it no longer waits, `message` says how its wait ended.)
function dependencies(j) {
  const after = (j.spec || {}).after || [];
  if (!after.length) return "-";
  const waiting = new Set(j.waiting_for || []);
  const progress = (d) => (j.state !== "JOB_WAITING" ? ""
    : waiting.has(d.job) ? " (not ended yet)" : " (ended as asked)");
  return h("span", { "data-testid": "dependencies" }, after.flatMap((d, i) => [i ? ", " : "",
    jobLink(d.job), `:${CONDITION[d.condition || "AFTER_OK"]}`, progress(d)]));
}

function lastAttempt(i) { return (i.attempts || [])[(i.attempts || []).length - 1] || {}; }

function cpuSeconds(usage) {
  return usage ? ((usage.cpu_user_seconds || 0) + (usage.cpu_system_seconds || 0)).toFixed(2) : "-";
}

function peakMb(usage) {
  return usage ? (Number(usage.mem_peak_bytes || 0) / 1048576).toFixed(1) : "-";
}

function exitCode(attempt) { return attempt.exit_code === undefined ? "-" : attempt.exit_code; }

function started(attempt) { return when(attempt.started_at || attempt.launched_at); }

// The buttons that make sense for the job's state; the batch framework decides (and says why
// not) when the page is older than the job.
function jobActions(j) {
  const base = `/api/jobs/${encodeURIComponent(j.job_id)}`;
  const name = (j.spec || {}).name || j.job_id;
  const buttons = [];
  if (NOT_STARTED.includes(j.state)) {
    buttons.push(j.held
      ? action("release", "Release", `Release job ${name}? Its instances may then start.`, `${base}/release`)
      : action("hold", "Hold", `Hold job ${name}? None of its instances starts until it is released.`,
        `${base}/hold`));
  }
  if (j.state === "JOB_RUNNING") {
    buttons.push(action("requeue", "Requeue",
      `Requeue job ${name}? Its running instances are killed, and those not succeeded run again.`,
      `${base}/requeue`));
  }
  if (!ENDED.includes(j.state)) {
    buttons.push(action("kill-job", "Kill", `Kill job ${name}? Its tasks are killed and no more are launched.`,
      `${base}/kill`));
  }
  return buttons.length ? h("p", { class: "filters", "data-testid": "job-actions" }, buttons) : null;
}

// Priority, instances and time limit of a job that has not started: only what the user changed
// is sent.
function jobUpdater(j) {
  if (!NOT_STARTED.includes(j.state)) return null;
  const spec = j.spec || {};
  const fields = [["priority", "Priority", spec.priority || 0],
    ["instances", "Instances", spec.instances || 0],
    ["time_limit_seconds", "Time limit (s, 0: none)", spec.time_limit_seconds || 0]];
  const inputs = fields.map(([name, label, value]) => ({ name, label, value, key: `job:${j.job_id}:${name}`,
    el: null }));
  for (const f of inputs) f.el = kept(f.key, f.value, { type: "number", "data-testid": `update-${f.name}` });
  const changes = () => Object.fromEntries(inputs.filter((f) => Number(f.el.value) !== f.value)
    .map((f) => [f.name, Number(f.el.value)]));
  const describe = () => Object.entries(changes()).map(([k, v]) => `${k} ${v}`).join(", ") || "nothing";
  return h("p", { class: "filters" }, inputs.flatMap((f) => [h("label", {}, f.label), f.el]),
    action("update", "Update", () => `Update job ${spec.name || j.job_id}: ${describe()}?`,
      `/api/jobs/${encodeURIComponent(j.job_id)}/update`, () => {
        const body = changes();
        inputs.forEach((f) => kept.forget(f.key));
        return body;
      }));
}

function instancesTable(j) {
  const used = (i) => lastAttempt(i).usage || null;
  return table("job-instances", [
    ["#", (i) => i.index || 0],
    ["State", (i) => stateCell(i.state)],
    ["Attempts", (i) => (i.attempts || []).length],
    ["Last task", (i) => (lastAttempt(i).task_id ? taskLink(lastAttempt(i)) : "-")],
    ["Host", (i) => (lastAttempt(i).agent_id ? agentLink(lastAttempt(i).agent_id, lastAttempt(i).hostname) : "-")],
    ["Exit", (i) => exitCode(lastAttempt(i))],
    ["CPU s", (i) => cpuSeconds(used(i))],
    ["Peak MB", (i) => peakMb(used(i))],
    ["Started", (i) => started(lastAttempt(i))],
    ["Ended", (i) => when(lastAttempt(i).ended_at)],
    ["Message", (i) => lastAttempt(i).message || ""],
  ], j.instances || [], "No instances.");
}

// A schedule's latest run: its job's state, or why it was skipped.
function runResult(run) {
  if (run.skipped) return `skipped: ${run.skipped}`;
  if (!run.job_id) return "-";
  return jobLink(run.job_id, run.state ? run.state.replace(/^JOB_/, "") : run.job_id);
}

function lastRun(schedule) {
  const runs = schedule.runs || [];
  return runs.length ? runResult(runs[runs.length - 1]) : "-";
}

function scheduleActions(c) {
  const name = c.spec.name;
  const base = `/api/schedules/${encodeURIComponent(name)}`;
  return h("p", { class: "filters", "data-testid": "schedule-actions" },
    c.suspended
      ? action("resume", "Resume", `Resume schedule ${name}? The times it missed are not caught up.`, `${base}/resume`)
      : action("suspend", "Suspend", `Suspend schedule ${name}? No run fires until it is resumed.`, `${base}/suspend`),
    action("delete-schedule", "Delete", `Delete schedule ${name}? Jobs it started run on.`, `${base}/delete`,
      null, "#/jobs"));
}

// Sets an owner's weight (`agora job owner-weight`): any owner, listed or not yet.
function weightSetter() {
  const name = kept("weight:owner", "", { placeholder: "owner (empty: anonymous)", "data-testid": "owner-name" });
  const weight = kept("weight:value", "", { type: "number", min: "0", step: "any", placeholder: "weight",
    "data-testid": "owner-weight" });
  return h("p", { class: "filters" }, h("label", {}, "Set an owner's weight"), name, weight,
    action("set-weight", "Set", () => `Set the weight of owner ${name.value || "(anonymous)"} to ${weight.value}?`,
      "/api/owners/weight", () => {
        kept.forget("weight:owner");
        kept.forget("weight:value");
        return { owner: name.value, weight: weight.value === "" ? null : Number(weight.value) };
      }));
}

// The history's rows: one per instance of each finished job (as `agora job history`).
function historyRows(jobs) {
  return jobs.slice().reverse().flatMap((j) => (j.instances || []).map((i) => ({ job: j, i, last: lastAttempt(i) })));
}

Object.assign(pages, {
  async jobs() {
    const j = await api("/api/jobs");
    if (!j.available) return [h("h1", {}, "Batch jobs"), h("p", { class: "muted" }, j.message)];
    return [h("h1", {}, "Batch jobs"),
      h("p", {}, h("a", { href: "#/history", "data-testid": "history-link" }, "Finished jobs (history, by owner and time)")),
      table("jobs", [
        ["Job", (x) => jobLink(x.job_id)],
        ["Name", (x) => (x.spec && x.spec.name) || ""],
        ["Owner", (x) => (x.spec && x.spec.owner) || "-"],
        ["State", jobState],
        ["Waiting", (x) => pendingName(x.pending_reason) || "-"],
        ["Instances", counts],
        ["Message", (x) => x.message || ""],
      ], j.jobs.slice().reverse(), "No jobs submitted."),
      h("h2", {}, "Owners"),
      h("p", { class: "muted" }, "Owners share what the batch framework is offered by weighted DRF (agora job owners)."),
      table("owners", [
        ["Owner", (o) => o.name || "(anonymous)"],
        ["Weight", (o) => o.weight || 1],
        ["Running", (o) => o.running || 0],
        ["Pending", (o) => o.pending || 0],
        ["CPUs", (o) => o.cpus || 0],
        ["Share", (o) => (o.share || 0).toFixed(3)],
      ], j.owners || [], "No job waits or runs."),
      weightSetter(),
      h("h2", {}, "Schedules"),
      table("schedules", [
        ["Schedule", (c) => scheduleLink(c.spec.name)],
        ["Cron", (c) => h("code", {}, `${c.spec.cron} (${c.spec.timezone || "UTC"})`)],
        ["State", (c) => (c.suspended ? "suspended" : "active")],
        ["Next run", (c) => when(c.next_run_at)],
        ["Last run", lastRun],
        ["Runs kept", (c) => (c.runs || []).length],
        ["Missed", (c) => c.missed || 0],
      ], j.schedules || [], "No cron schedules.")];
  },

  async job(jobId) {
    const j = await api(`/api/jobs/${encodeURIComponent(jobId)}`);
    const spec = j.spec || {};
    return [
      h("h1", {}, `Job ${spec.name || j.job_id}`),
      facts("job", [
        ["State", jobState(j)],
        ["Instances", counts(j)],
        ["Waiting", pendingName(j.pending_reason) || "-"],
        ["Why", j.message || "-"],
        ["Depends on", dependencies(j)],
        ["Held", j.held ? "yes: none of its instances starts until it is released" : "no"],
        ["Begins", spec.begin_at ? when(spec.begin_at) : "at once"],
        ["Each instance", h("code", {}, resources(spec))],
        ["Command", h("code", {}, commandText(spec))],
        ["Running limit", spec.max_running ? `${spec.max_running} at once` : "none"],
        ["Retries", spec.max_retries || 0],
        ["Priority", spec.priority || 0],
        ["Time limit", spec.time_limit_seconds ? `${spec.time_limit_seconds} s` : "none"],
        ["Constraints", constraintsText(spec)],
        ["Owner", spec.owner || (spec.labels || {})["agora.owner"] || "-"],
        ["Submitted", when(j.submitted_at)],
        ["Started", when(j.started_at)],
        ["Ended", when(j.ended_at)],
        ["Id", h("code", {}, j.job_id)],
      ]),
      jobActions(j),
      jobUpdater(j),
      h("h2", {}, "Instances"),
      instancesTable(j),
    ];
  },

  async schedule(name) {
    const c = await api(`/api/schedules/${encodeURIComponent(name)}`);
    const spec = c.spec, job = spec.job || {};
    return [
      h("h1", {}, `Schedule ${spec.name}`),
      facts("schedule", [
        ["State", c.suspended ? "suspended" : "active"],
        ["Cron", h("code", {}, `${spec.cron} (${spec.timezone || "UTC"})`)],
        ["When a run is due while one runs", (spec.concurrency || "CONCURRENCY_ALLOW").replace(/^CONCURRENCY_/, "").toLowerCase()],
        ["Starting deadline", spec.starting_deadline_seconds ? `${spec.starting_deadline_seconds} s` : "none"],
        ["Next run", c.suspended ? "- (suspended)" : when(c.next_run_at)],
        ["Missed", c.missed || 0],
        ["Each run", h("code", {}, resources(job))],
        ["Command", h("code", {}, commandText(job))],
        ["Owner", job.owner || (job.labels || {})["agora.owner"] || "-"],
        ["Created", when(c.created_at)],
      ]),
      scheduleActions(c),
      h("h2", {}, "Latest runs"),
      table("schedule-runs", [
        ["Due at", (r) => when(r.scheduled_for)],
        ["Fired at", (r) => when(r.fired_at) + (r.catch_up ? " (catch-up)" : "")],
        ["Job", (r) => (r.job_id ? jobLink(r.job_id) : "-")],
        ["Result", runResult],
        ["Message", (r) => r.message || ""],
      ], (c.runs || []).slice().reverse(), "No run yet."),
    ];
  },

  async history() {
    const params = new URLSearchParams(location.hash.split("?")[1] || "");
    const found = await api(`/api/job-history?${params}`);
    const filter = (name, el) => queryFilter("history", params, name, el);
    return [h("h1", {}, "Finished jobs"),
      h("div", { class: "filters" },
        h("label", {}, "Ended within"),
        filter("since", h("input", { placeholder: "e.g. 1d, 2h (empty: all kept)", "data-testid": "filter-since" })),
        h("label", {}, "Owner"),
        filter("owner", h("input", { placeholder: "(empty: everyone)", "data-testid": "filter-owner" }))),
      found.total > found.jobs.length
        ? h("p", { class: "muted" }, `The latest ${found.jobs.length} of ${found.total} jobs.`) : null,
      table("history", [
        ["Job", (r) => jobLink(r.job.job_id)],
        ["Name", (r) => r.job.spec.name || ""],
        ["Owner", (r) => r.job.spec.owner || "-"],
        ["#", (r) => r.i.index || 0],
        ["State", (r) => stateCell(r.i.state)],
        ["Exit", (r) => exitCode(r.last)],
        ["Start", (r) => started(r.last)],
        ["End", (r) => when(r.last.ended_at)],
        ["Agent", (r) => (r.last.agent_id ? agentLink(r.last.agent_id, r.last.hostname) : "-")],
        ["CPU s", (r) => cpuSeconds(r.last.usage)],
        ["Peak MB", (r) => peakMb(r.last.usage)],
        ["Attempts", (r) => (r.i.attempts || []).length],
      ], historyRows(found.jobs), "No finished jobs match.")];
  },
});
