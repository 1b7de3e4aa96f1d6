// vrambisect's panel in ComfyUI's page: when a prompt fails (an execution error, an
// interruption, or no progress for a while), it shows what this server's log says (vrambisect
// logscan), offers Diagnose (vrambisect bisect on this install, with progress and the verdict)
// and the bug report bundle. Plain DOM and the app/api modules every frontend since 1.x serves,
// so that the same script runs on the 1.27 frontend of ComfyUI 0.3.64 and on current ones.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";

const SHOW = "VRAMBisect.ShowOnFailure";
const STALL = "VRAMBisect.StallMinutes";
const SEEN = "vrambisect.seen-diagnosis";

function setting(id, fallback) {
  try {
    const store = app.extensionManager && app.extensionManager.setting;
    const v = store ? store.get(id) : app.ui.settings.getSettingValue(id);
    return v === undefined || v === null ? fallback : v;
  } catch (e) {
    return fallback;
  }
}

function setSetting(id, value) {
  try {
    const store = app.extensionManager && app.extensionManager.setting;
    if (store) return store.set(id, value);
    return app.ui.settings.setSettingValue(id, value);
  } catch (e) {
    return undefined;
  }
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (v === true) node.setAttribute(k, "");
    else if (k === "class") node.className = v;
    else if (k === "style") node.style.cssText = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function minutes(s) {
  if (s === null || s === undefined) return "unknown";
  if (s < 90) return `${Math.round(s)} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

function mib(bytes) {
  return `${Math.round(bytes / 1048576)} MiB`;
}

async function call(path, body) {
  const options = body === undefined ? {} : {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  };
  let res;
  try {
    res = await api.fetchApi(path, options);
  } catch (e) {
    return { ok: false, status: 0, data: { error: { message: `ComfyUI did not answer: ${e}` } } };
  }
  let data = null;
  try {
    data = await res.json();
  } catch (e) {
    data = { error: { message: `HTTP ${res.status}` } };
  }
  if (res.status === 404 && !(data && data.error)) {
    data = { error: { message: "this ComfyUI has not loaded the vrambisect extension's routes: restart it" } };
  }
  return { ok: res.ok, status: res.status, data };
}

const CSS = `
.vrambisect-panel{pointer-events:auto;position:fixed;right:16px;bottom:16px;z-index:10000;width:460px;max-height:75vh;overflow:auto;
 background:#1e1f22;color:#e6e6e6;border:1px solid #5a5d63;border-radius:8px;box-shadow:0 6px 24px rgba(0,0,0,.5);
 font:13px/1.45 system-ui,sans-serif;padding:12px 14px}
.vrambisect-panel h3{margin:0 0 6px;font-size:15px;color:#ffb86b}
.vrambisect-panel .vb-head{display:flex;justify-content:space-between;align-items:center;margin-bottom:6px;color:#9aa0a6;font-size:12px}
.vrambisect-panel .vb-x{background:none;border:none;color:#9aa0a6;font-size:16px;cursor:pointer}
.vrambisect-panel section{margin:8px 0}
.vrambisect-panel .vb-label{color:#9aa0a6;font-size:12px}
.vrambisect-panel code,.vrambisect-panel pre{background:#111214;border-radius:4px;padding:2px 5px;font:12px ui-monospace,monospace;white-space:pre-wrap;overflow-wrap:anywhere}
.vrambisect-panel pre{padding:6px 8px;margin:4px 0}
.vrambisect-panel .vb-buttons{display:flex;flex-wrap:wrap;gap:6px;margin-top:10px}
.vrambisect-panel button.vb{background:#2d5fa8;color:#fff;border:none;border-radius:4px;padding:5px 10px;cursor:pointer}
.vrambisect-panel button.vb.vb-quiet{background:#3a3c41}
.vrambisect-panel button.vb:disabled{opacity:.5;cursor:default}
.vrambisect-panel .vb-bar{height:6px;background:#3a3c41;border-radius:3px;overflow:hidden;margin:6px 0}
.vrambisect-panel .vb-bar>div{height:100%;background:#4caf50}
.vrambisect-panel .vb-error{color:#ff7b72}
.vrambisect-panel .vb-warning{color:#e3b341}
.vrambisect-panel a{color:#7cb7ff}
`;

class Panel {
  constructor() {
    this.root = null;
    this.failure = null;
    this.scan = null;
    this.status = null;
    this.message = null;
    this.report = null;
    this.poll = null;
  }

  mount() {
    if (this.root) return;
    document.head.append(el("style", { id: "vrambisect-style" }, CSS));
    this.root = el("div", { class: "vrambisect-panel", id: "vrambisect-panel", role: "dialog", "aria-label": "vrambisect" });
    this.root.style.display = "none";
    document.body.append(this.root);
  }

  show() {
    this.mount();
    this.root.style.display = "block";
    this.render();
  }

  hide() {
    if (this.root) this.root.style.display = "none";
    const d = this.status && this.status.diagnosis;
    if (d && !["running", "orphaned", "stopping"].includes(d.state)) localStorage.setItem(SEEN, String(d.started));
  }

  async refresh() {
    const r = await call("/vrambisect/status");
    if (r.ok) this.status = r.data;
    else this.message = r.data.error.message;
    return r.ok;
  }

  async onFailure(kind, detail) {
    if (!setting(SHOW, true)) return;
    if (this.status && this.status.running) return;
    await this.refresh();
    if (this.status && this.status.running) return;
    const failure = { kind, detail };
    let scan = null;
    let message = null;
    if (this.status && this.status.tool.ok) {
      const r = await call("/vrambisect/scan", detail && detail.prompt_id ? { prompt_id: detail.prompt_id } : {});
      if (r.ok) scan = r.data;
      else message = r.data.error.message;
    }
    // An error launch flags cannot fix (a node's own, the user's interrupt) opens nothing.
    const outcome = scan && scan.reading ? scan.reading.outcome : null;
    if (scan && kind !== "stalled" && !this.flagsMayFix(outcome)) return;
    Object.assign(this, { failure, scan, message, report: null });
    this.show();
  }

  diagnosable() {
    if (!this.failure) return false;
    if (this.failure.kind === "stalled") return true;
    const outcome = this.scan && this.scan.reading ? this.scan.reading.outcome : null;
    return this.flagsMayFix(outcome);
  }

  // The outcomes as the program names them (vrambisect extension facts, through /status):
  // each one's headline and whether launch flags may fix it.
  outcome(name) {
    const known = this.status && this.status.outcomes;
    return (known && name && known[name]) || null;
  }

  flagsMayFix(name) {
    const o = this.outcome(name);
    return !!(o && o.flags_may_fix);
  }

  title(name, fallback) {
    const o = this.outcome(name);
    return o ? o.title : fallback;
  }

  async diagnose() {
    const id = this.failure && this.failure.detail && this.failure.detail.prompt_id;
    this.message = null;
    const r = await call("/vrambisect/diagnose", { prompt_id: id || "" });
    if (!r.ok) {
      this.message = r.data.error.message;
      this.render();
      return;
    }
    await this.refresh();
    this.follow();
  }

  follow() {
    this.render();
    clearInterval(this.poll);
    this.poll = setInterval(async () => {
      await this.refresh();
      this.render();
      if (!this.status || !this.status.running) clearInterval(this.poll);
    }, 2000);
  }

  async cancel() {
    this.stopping = true;
    this.render();
    const r = await call("/vrambisect/cancel", {});
    if (!r.ok) this.message = r.data.error.message;
    await this.refresh();
    this.stopping = false;
    this.render();
    this.follow();
  }

  async writeReport() {
    this.message = "writing the report…";
    this.render();
    const id = this.failure && this.failure.detail && this.failure.detail.prompt_id;
    const r = await call("/vrambisect/report", id ? { prompt_id: id } : {});
    this.message = null;
    if (!r.ok) {
      this.message = r.data.error.message;
      this.render();
      return;
    }
    this.report = r.data;
    await this.refresh();
    this.render();
    const a = el("a", { href: api.apiURL(`/vrambisect/report/${encodeURIComponent(r.data.name)}`), download: r.data.name });
    document.body.append(a);
    a.click();
    a.remove();
  }

  render() {
    if (!this.root || this.root.style.display === "none") return;
    const s = this.status;
    const d = s && s.diagnosis;
    const body = [];
    body.push(el("div", { class: "vb-head" },
      el("span", {}, "vrambisect", s ? ` ${s.version}` : ""),
      el("button", { class: "vb-x", title: "Close", onclick: () => this.hide() }, "×")));
    if (s && !s.tool.ok) {
      body.push(el("section", { class: "vb-tool" }, el("div", { class: "vb-error" }, s.tool.message)));
    }
    // The diagnosis shown beside a failure is that failure's own.
    const shown = this.failure && this.failure.detail ? this.failure.detail.prompt_id : null;
    const mine = d && (!this.failure || d.prompt_id === shown);
    if (d && d.state === "running") body.push(this.renderProgress(d));
    else if (d && ["orphaned", "stopping"].includes(d.state)) body.push(this.renderStopped(d));
    else if (mine && ["cancelled", "stopped", "failed"].includes(d.state)) body.push(this.renderStopped(d));
    else if (mine && d.verdict) body.push(this.renderVerdict(d));
    // Beside its own diagnosis, the failure is its title and error line only.
    if (this.failure) body.push(this.renderFailure(Boolean(mine && (d.state === "running" || d.verdict))));
    if (this.report) body.push(this.renderReport());
    const removed = this.renderRemoved();
    if (removed) body.push(removed);
    if (this.message) body.push(el("section", { class: "vb-error vb-message" }, this.message));
    body.push(this.renderButtons());
    this.root.replaceChildren(...body);
  }

  renderFailure(compact) {
    const { kind, detail } = this.failure;
    const out = el("section", { class: "vb-failure" });
    const reading = this.scan && this.scan.reading;
    const outcome = reading ? reading.outcome : null;
    const title = outcome && outcome !== "pass" ? this.title(outcome, outcome)
      : kind === "stalled" ? this.title("hang", "The prompt failed")
      : kind === "interrupted" ? this.title("interrupted", "The prompt failed") : "The prompt failed";
    out.append(el("h3", {}, title));
    if (detail && detail.exception_message) {
      out.append(el("div", {}, el("span", { class: "vb-label" }, `${detail.node_type || "node"} #${detail.node_id}: `),
        `${detail.exception_type || "error"}: ${String(detail.exception_message).trim().split("\n")[0]}`));
    }
    if (kind === "stalled") out.append(el("div", {}, `No progress for ${detail.minutes} minute${detail.minutes === 1 ? "" : "s"}.`));
    if (compact) return out;
    if (!this.scan) {
      if (this.status && this.status.tool.ok && !this.message) out.append(el("div", { class: "vb-label" }, "reading this server's log…"));
      return out;
    }
    if (reading.summary) out.append(el("div", { class: "vb-summary" }, reading.summary));
    const st = reading.startup || {};
    const facts = [];
    if (st.dynamic_vram !== null && st.dynamic_vram !== undefined) facts.push(`Dynamic VRAM ${st.dynamic_vram ? "on" : "off"}`);
    if (st.vram_state) facts.push(st.vram_state);
    if (st.comfyui_version) facts.push(`ComfyUI ${st.comfyui_version}`);
    if (st.comfy_aimdo_version) facts.push(`comfy-aimdo ${st.comfy_aimdo_version}`);
    if (facts.length) out.append(el("div", { class: "vb-label" }, facts.join(" · ")));
    out.append(el("div", {}, el("span", { class: "vb-label" }, "Launch flags: "),
      el("code", {}, this.scan.flags.length ? this.scan.flags.join(" ") : "(none)")));
    // What to try leaves out flags this ComfyUI does not have (its own parser says) and the
    // flag of a feature it does not have on.
    const off = st.dynamic_vram === false ? new Set(["--disable-dynamic-vram"]) : new Set();
    const known = this.scan.known_flags ? new Set(this.scan.known_flags) : null;
    const usable = (f) => !off.has(f) && (!known || known.has(f.split("=")[0]));
    for (const k of (reading.known_issues || []).slice(0, 3)) {
      const tries = (k.flags_to_try || []).filter(usable);
      const issue = el("div", { class: "vb-issue" }, el("b", {}, k.title), ": ", k.meaning || "");
      const links = (k.issue_urls || []).map((u, i) => el("a", { href: u, target: "_blank", rel: "noopener noreferrer" }, `#${(k.issues || [])[i] || u}`));
      if (links.length) issue.append(el("div", {}, el("span", { class: "vb-label" }, "known upstream: "), ...links.flatMap((a, i) => (i ? [", ", a] : [a]))));
      if (tries.length) issue.append(el("div", {}, el("span", { class: "vb-label" }, "what to try: "), el("code", {}, tries.join("  "))));
      out.append(issue);
    }
    return out;
  }

  renderProgress(d) {
    const p = d.progress || {};
    const planned = p.runs_planned ? Math.max(p.runs_planned, (p.runs_done || 0) + 1) : null;
    const pct = planned ? Math.min(100, Math.round(100 * (p.runs_done || 0) / planned)) : 0;
    const run = p.run || (p.runs_done || 0) + 1;
    return el("section", { class: "vb-progress" },
      el("h3", {}, "Diagnosing…"),
      el("div", {}, planned ? `Run ${run} of about ${planned}` : "Starting the first run (your flags)",
        p.current ? ` · ${p.current}` : "", p.phase ? ` · ${p.phase}` : ""),
      el("div", { class: "vb-bar" }, el("div", { style: `width:${pct}%` })),
      el("div", { class: "vb-label" }, `${minutes(p.elapsed_s)} so far · `, p.eta_s === null || p.eta_s === undefined ? "time left: known after the first run" : `about ${minutes(p.eta_s)} left`),
      el("div", { class: "vb-label" }, this.status && this.status.holds_prompts
        ? "Prompts queued here are refused until it ends: each run starts its own ComfyUI on this GPU."
        : "Don't queue prompts here until it ends (this ComfyUI cannot hold them back): each run starts its own ComfyUI on this GPU."));
  }

  renderVerdict(d) {
    const v = d.verdict;
    const out = el("section", { class: "vb-verdict" }, el("h3", {}, v.kind === "fixed_by" ? "Fixed by a launch flag" : v.kind === "caused_by" ? "Caused by a launch flag" : "Diagnosis finished"));
    out.append(el("div", { class: "vb-statement" }, v.statement || v.kind));
    if (v.keeps_dynamic_vram === true) out.append(el("div", { class: "vb-label" }, "This fix keeps Dynamic VRAM on."));
    for (const a of v.alternatives || []) {
      out.append(el("div", { class: "vb-label vb-alternative" }, "Also passes: ", el("code", {}, (a.fixing_flags || []).join(" ")), a.compared ? ` (${a.compared})` : ""));
    }
    for (const n of v.not_helped || []) out.append(el("div", { class: "vb-label vb-not-helped" }, n));
    if (v.confidence !== null && v.confidence !== undefined && v.confidence < 1) out.append(el("div", { class: "vb-label" }, `confidence ${(100 * v.confidence).toFixed(1)}%`));
    if (v.launch) {
      out.append(el("div", { class: "vb-label" }, v.launch.where + ":"));
      out.append(el("pre", { class: "vb-launch" }, v.launch.line || "(no flags)"));
    }
    const held = d.gpu_held_by_this_comfyui;
    if (held && held.torch_reserved_bytes !== undefined) {
      out.append(el("div", { class: "vb-label" }, `While it ran, this ComfyUI (idle, models unloaded) still held ${mib(held.torch_reserved_bytes)} in PyTorch's cache on ${held.device}, besides its CUDA context; ${mib(held.device_free_bytes)} of ${mib(held.device_total_bytes)} were free.`));
    } else if (held && held.device === "cpu") {
      out.append(el("div", { class: "vb-label" }, "This ComfyUI runs on the CPU: it held no GPU memory while the diagnosis ran."));
    }
    out.append(el("div", { class: "vb-label" }, `${v.runs_total} run${v.runs_total === 1 ? "" : "s"}`, d.resume ? " · to look again: " : "", d.resume ? el("code", {}, d.resume) : null));
    return out;
  }

  renderStopped(d) {
    const title = { cancelled: "Diagnosis cancelled", failed: "The diagnosis could not run", orphaned: "A diagnosis is still running", stopping: "Stopping the diagnosis…" }[d.state] || "Diagnosis stopped";
    const v = d.verdict;
    const runs = v && v.runs_total !== null && v.runs_total !== undefined ? `${v.runs_total} run${v.runs_total === 1 ? "" : "s"} finished. ` : "";
    return el("section", { class: "vb-stopped" }, el("h3", {}, title),
      d.message ? el("div", { class: d.state === "failed" ? "vb-error" : "" }, d.message) : null,
      d.resume ? el("div", { class: "vb-label" }, `${runs}Every finished run is kept; go on with: `) : null,
      d.resume ? el("pre", { class: "vb-resume" }, d.resume) : null);
  }

  // What the last clean-up removed (the newest diagnoses and reports are kept).
  renderRemoved() {
    const r = (this.status && this.status.removed) || {};
    const lines = [];
    for (const [kind, what] of Object.entries(r)) {
      if (!what || !what.names || !what.names.length) continue;
      lines.push(`Removed ${what.names.length} older ${kind} from ${what.folder} (the newest ${what.kept} are kept${kind === "diagnoses" ? ", and any you can still resume" : ""}): ${what.names.join(", ")}`);
    }
    return lines.length ? el("section", { class: "vb-label vb-removed" }, ...lines.map((l) => el("div", {}, l))) : null;
  }

  renderReport() {
    const r = this.report;
    const red = (r.report && r.report.redaction) || {};
    const kinds = (red.kinds || []).map((k) => `${k.count} ${k.what}`).join(", ");
    return el("section", { class: "vb-report" },
      el("div", {}, "Downloaded ", el("a", { href: api.apiURL(`/vrambisect/report/${encodeURIComponent(r.name)}`), download: r.name }, r.name),
        r.diagnosed ? " (with the diagnosis's runs)." : " (the failure as it happened: nothing was rerun)."),
      el("div", { class: "vb-label" }, red.enabled ? `Redacted: ${kinds || "nothing needed it"}.` : "Not redacted."),
      // What the program warns of (a user name kept where it is also a word, a bundle over
      // GitHub's limit): read before filing.
      ...((r.report && Array.isArray(r.report.warnings)) ? r.report.warnings : [])
        .map((w) => el("div", { class: "vb-warning" }, `Check before filing: ${w}`)),
      r.template ? el("div", {}, "Attach it to a new issue: ", el("a", { href: r.template, target: "_blank", rel: "noopener noreferrer" }, "ComfyUI's bug report form")) : null);
  }

  renderButtons() {
    const s = this.status;
    const running = s && s.running;
    const ok = s && s.tool.ok;
    const d = s && s.diagnosis;
    const row = el("div", { class: "vb-buttons" });
    if (running || (d && ["orphaned", "stopping"].includes(d.state))) {
      const stopping = Boolean(this.stopping) || (d && d.state === "stopping");
      row.append(el("button", { class: "vb vb-cancel", disabled: stopping, onclick: () => this.cancel() }, stopping ? "Stopping…" : "Cancel"));
      return row;
    }
    if (this.diagnosable() && this.failure.detail && this.failure.detail.prompt_id) {
      const again = d && d.prompt_id === this.failure.detail.prompt_id;
      row.append(el("button", { class: "vb vb-diagnose", disabled: !ok, onclick: () => this.diagnose(), title: "Reruns this workflow under flag combinations on this install until one fixes it" }, again ? "Diagnose again" : "Diagnose now"));
    }
    // The diagnosis's bundle, or the failure's as it happened (nothing rerun).
    const failed = this.failure && this.failure.detail && this.failure.detail.prompt_id;
    if (failed || (d && d.reportable)) {
      row.append(el("button", { class: "vb vb-report-button", disabled: !ok, onclick: () => this.writeReport() }, "Write bug report"));
    }
    row.append(el("button", { class: "vb vb-quiet vb-dismiss", onclick: () => this.hide() }, "Dismiss"));
    row.append(el("button", { class: "vb vb-quiet vb-silence", onclick: () => { setSetting(SHOW, false); this.hide(); } }, "Don't show on failures"));
    return row;
  }
}

const panel = new Panel();

// A prompt that shows no progress for this long is a stall (hangs at "Requested to load").
const watch = { prompt: null, last: 0, told: null };
function activity(e) {
  const id = e && e.detail && e.detail.prompt_id;
  if (id) watch.prompt = id;
  watch.last = Date.now();
}

app.registerExtension({
  name: "vrambisect.panel",
  settings: [
    { id: SHOW, category: ["vrambisect", "Panel", "Show"], name: "Show the vrambisect panel when a prompt fails", type: "boolean", defaultValue: true },
    { id: STALL, category: ["vrambisect", "Panel", "Stall"], name: "Call a prompt stalled after this many minutes without progress", type: "number", defaultValue: 10, attrs: { min: 1, max: 240 } },
  ],
  commands: [{ id: "vrambisect.open", label: "vrambisect: open the panel", function: async () => { panel.show(); await panel.refresh(); panel.render(); } }],
  async setup() {
    panel.mount();
    api.addEventListener("execution_error", (e) => { watch.prompt = null; panel.onFailure("error", e.detail || {}); });
    api.addEventListener("execution_interrupted", (e) => { watch.prompt = null; panel.onFailure("interrupted", e.detail || {}); });
    api.addEventListener("execution_start", activity);
    for (const name of ["executing", "progress", "executed", "execution_cached", "progress_state"]) api.addEventListener(name, activity);
    api.addEventListener("execution_success", () => { watch.prompt = null; });
    setInterval(() => {
      const limit = Number(setting(STALL, 10)) * 60000;
      if (watch.prompt && watch.told !== watch.prompt && Date.now() - watch.last > limit) {
        watch.told = watch.prompt;
        panel.onFailure("stalled", { prompt_id: watch.prompt, minutes: Math.round(limit / 60000) });
      }
    }, 15000);
    // A diagnosis under way, or a verdict not yet seen, is shown again after a reload or a restart.
    if (await panel.refresh()) {
      const d = panel.status.diagnosis;
      const live = d && ["running", "orphaned", "stopping"].includes(d.state);
      if (d && (live || localStorage.getItem(SEEN) !== String(d.started))) {
        panel.show();
        if (live) panel.follow();
      }
    }
  },
});
