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

  async function refresh(id) {
    if (inFlight.has(id)) { again.add(id); return; }
    inFlight.add(id);
    try {
      const fresh = await fetchRow(id);
      const old = rowOf(id);
      if (fresh && old) {
        const hadFocus = old.contains(document.activeElement);
        old.replaceWith(fresh);
        if (hadFocus) fresh.querySelector("a")?.focus();
      }
    } finally {
      inFlight.delete(id);
      if (again.delete(id)) refresh(id);
    }
  }

  async function insert(id) {
    if (inFlight.has(id)) { again.add(id); return; }
    inFlight.add(id);
    try {
      const fresh = await fetchRow(id);
      if (!fresh) return;
      const old = rowOf(id);
      if (old) { old.replaceWith(fresh); return; }
      tbody.prepend(fresh);
      while (tbody.rows.length > limit) tbody.rows[tbody.rows.length - 1].remove();
      showTable();
      bumpTotal();
    } finally {
      inFlight.delete(id);
      if (again.delete(id)) refresh(id);
    }
  }

  function onJob(job) {
    if (!job || !job.id) return;
    const said = JSON.stringify(job);
    if (seen.get(job.id) === said) return;
    seen.set(job.id, said);
    if (rowOf(job.id)) refresh(job.id);
    else if (firstPage && matches(job) && isNew(job)) insert(job.id);
  }

  FuseForge.stream("/v1/jobs/stream", { job: onJob });
})();
