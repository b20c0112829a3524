// Jobs page: keeps the table live from the project's job stream. A changed job whose row is
// on the page gets its row again from the server (GET /ui/jobs/<id>/row, the template the page
// itself uses); a new job that belongs on this page (the first page, matching its filters) is
// inserted at the top, and the page keeps at most its page size of rows.
"use strict";
(() => {
  const table = document.getElementById("jobs");
  if (!table || !window.FuseForge) return;
  const tbody = table.tBodies[0];
  const data = table.dataset;
  const limit = Number(data.limit) || 50;
  const firstPage = Number(data.offset || 0) === 0;
  const filters = {
    status: data.filterStatus || "",
    backend: data.filterBackend || "",
    modelId: data.filterModelId || "",
    q: (data.filterQ || "").toLowerCase(),
  };
  const seen = new Map();      // job id -> what its last event said (repeats change nothing)
  const latest = new Map();    // job id -> its last event
  const inFlight = new Set();  // job ids whose row is being fetched
  const again = new Set();     // ... and changed again meanwhile: fetch once more after

  const rowOf = (id) => tbody.querySelector(`tr[data-job-id="${CSS.escape(id)}"]`);

  function matches(job) {
    return (!filters.status || job.status === filters.status)
      && (!filters.backend || job.backend === filters.backend)
      && (!filters.modelId || job.model_id === filters.modelId)
      && (!filters.q || (job.model_name || "").toLowerCase().includes(filters.q));
  }

  // Newer than (or as new as) the newest row shown: a job from a later page that changed
  // does not belong at the top of this one.
  function isNew(job) {
    const newest = tbody.rows[0]?.dataset.created;
    return !newest || Date.parse(job.created_at) >= Date.parse(newest);
  }

  // The server-rendered <tr>, or null (gone, or the session ended: a redirect is not a row).
  async function fetchRow(id) {
    try {
      const response = await fetch(`/ui/jobs/${encodeURIComponent(id)}/row`, {
        credentials: "same-origin", redirect: "manual", headers: { Accept: "text/html" },
      });
      if (!response.ok) return null;
      const template = document.createElement("template");
      template.innerHTML = (await response.text()).trim();
      return template.content.querySelector("tr[data-job-id]");
    } catch (_) {
      return null;
    }
  }

  function showTable() {
    table.hidden = false;
    document.getElementById("jobs-count")?.removeAttribute("hidden");
    for (const empty of document.querySelectorAll("p.empty")) empty.hidden = true;
  }

  function bumpTotal() {
    const total = document.getElementById("jobs-total");
    if (total) total.textContent = String((Number(total.textContent) || 0) + 1);
  }

  // The API serves a changing job's document up to its read cache's age (half a second by
  // default): a row older than the event that asked for it is fetched again, a little later.
  const STALE_RETRY_MS = 700;
  const STALE_RETRIES = 4;
  const number = (text) => (text === "" || text === undefined ? null : Number(text));
  // Whether the row shows what the event says (what the stream compares to send one).
  const shows = (row, job) => row.dataset.status === job.status
    && row.dataset.stage === (job.stage || "")
    && number(row.dataset.progress) === job.progress
    && number(row.dataset.speedup) === (job.speedup ?? null)
    && row.dataset.validation === String(job.validation_passed ?? "");
  const behind = (row, job) => !shows(row, job);

  // Fetch the job's row until it says what `job` (the latest event) says, then `place` it.
  async function update(job, place) {
    const id = job.id;
    if (inFlight.has(id)) { again.add(id); return; }
    inFlight.add(id);
    try {
      let fresh = await fetchRow(id);
      for (let tries = 0; fresh && behind(fresh, latest.get(id)) && tries < STALE_RETRIES; tries++) {
        await new Promise((resolve) => setTimeout(resolve, STALE_RETRY_MS));
        fresh = await fetchRow(id);
      }
      if (fresh) place(fresh, rowOf(id));
    } finally {
      inFlight.delete(id);
      const row = rowOf(id);
      if (again.delete(id) && row && !shows(row, latest.get(id))) update(latest.get(id), replace);
    }
  }

  function replace(fresh, old) {
    if (!old) return;
    const hadFocus = old.contains(document.activeElement);
    old.replaceWith(fresh);
    if (hadFocus) fresh.querySelector("a")?.focus();
  }

  function prepend(fresh, old) {
    if (old) { replace(fresh, old); return; }
    tbody.prepend(fresh);
    while (tbody.rows.length > limit) tbody.rows[tbody.rows.length - 1].remove();
    showTable();
    bumpTotal();
  }

  function onJob(job) {
    if (!job || !job.id) return;
    const said = JSON.stringify(job);
    if (seen.get(job.id) === said) return;
    seen.set(job.id, said);
    latest.set(job.id, job);
    const row = rowOf(job.id);
    if (row) { if (!shows(row, job)) update(job, replace); }
    else if (firstPage && matches(job) && isNew(job)) update(job, prepend);
  }

  // From when the page's list was read: the stream first replays what changed since.
  const since = data.since ? `?since=${encodeURIComponent(data.since)}` : "";
  FuseForge.stream(`/v1/jobs/stream${since}`, { job: onJob }, "since");
})();
