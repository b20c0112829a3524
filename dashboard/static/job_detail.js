// Job detail page: while the job is queued or running, follow its event stream and keep the
// status badge, stage, progress and event list current; when the job ends, reload the page so
// every section (reports, benchmarks, artifacts, error) shows the final document. Also loads
// the build log when its <details> is opened, so the page stays light.
"use strict";
(() => {
  const root = document.getElementById("job");
  if (!root) return;

  const log = document.getElementById("build-log");
  if (log) {
    log.addEventListener("toggle", async () => {
      if (!log.open || log.dataset.loaded) return;
      log.dataset.loaded = "1";
      const pre = log.querySelector("pre");
      pre.textContent = "Loading the build log…";
      try {
        const response = await fetch(log.dataset.src, { credentials: "same-origin" });
        pre.textContent = response.ok ? await response.text()
          : `The build log could not be loaded (HTTP ${response.status}).`;
      } catch (err) {
        pre.textContent = `The build log could not be loaded: ${err}`;
      }
    });
  }

  if (root.dataset.live !== "true") return;
  const badge = document.getElementById("job-status");
  const events = document.querySelector("#events-table tbody");
  // Sections a new stage can change; they are swapped in from a fresh copy of the page.
  const REFRESHED = ["job-facts", "stages", "fusion", "ablation", "validation", "benchmarks"];
  // The stream replays stored events from the start on every (re)connection: the page already
  // shows those up to its last one.
  let lastAt = root.dataset.lastEventAt ? Date.parse(root.dataset.lastEventAt) : 0;

  function showState(state) {
    if (!state) return;
    if (state.status) {
      badge.textContent = state.status;
      badge.className = `status status-${state.status}`;
      root.dataset.status = state.status;
    }
    const stage = document.getElementById("job-stage");
    if ("stage" in state && stage) stage.textContent = state.stage || "–";
    if (typeof state.progress === "number") {
      const percent = `${Math.round(state.progress * 100)}%`;
      const progress = document.getElementById("job-progress");
      const progressText = document.getElementById("job-progress-text");
      if (progress) { progress.value = state.progress; progress.textContent = percent; }
      if (progressText) progressText.textContent = percent;
    }
    const detail = document.getElementById("status-detail");
    if (detail && "status_detail" in state) detail.textContent = state.status_detail || "–";
  }

  // Appends a stored event the page does not show yet; true when it was new.
  function addEvent(event) {
    if (!events || !event || !event.message || !event.created_at) return false;
    const at = Date.parse(event.created_at);
    if (at <= lastAt) return false;
    lastAt = at;
    const row = document.createElement("tr");
    for (const text of [new Date(at).toISOString().replace("T", " ").slice(0, 19) + " UTC",
                        event.stage || "–", event.message]) {
      const cell = document.createElement("td");
      cell.textContent = text;
      row.appendChild(cell);
    }
    events.appendChild(row);
    document.getElementById("no-events")?.remove();
    return true;
  }

  // A stage started: fetch the page again and swap in the sections it changes (one request per
  // stage, a few per job), leaving the event list and the stream as they are.
  let refreshing = null;
  function refreshSections() {
    if (refreshing) return;
    refreshing = setTimeout(async () => {
      refreshing = null;
      try {
        const response = await fetch(window.location.href, { credentials: "same-origin" });
        if (!response.ok) return;
        const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
        for (const id of REFRESHED) {
          const now = document.getElementById(id);
          const next = fresh.getElementById(id);
          if (!now || !next) continue;
          // A folded section the reader opened stays open.
          const opened = now.querySelector("details.fold")?.open;
          const fold = next.querySelector("details.fold");
          if (fold && opened !== undefined) fold.open = opened;
          now.replaceWith(document.importNode(next, true));
        }
      } catch (_) { /* the stream's banner already says when the server is unreachable */ }
    }, 300);
  }

  // "status" carries either the job's state ({status, stage, progress, ...}) or a stored
  // state-change event ({id, stage, message, created_at}); "stage" and "log" are stored events.
  const handle = (data) => {
    if (!data) return;
    if ("status" in data || "progress" in data) showState(data);
    else addEvent(data);
  };
  let stream = null;
  stream = FuseForge.stream(`/v1/jobs/${encodeURIComponent(root.dataset.jobId)}/events`, {
    stage: (data) => { if (addEvent(data)) refreshSections(); },
    status: handle,
    progress: handle,
    log: handle,
    end: (data) => {
      showState(data);
      if (stream) stream.close();
      window.location.reload();
    },
  }, "after");
})();
