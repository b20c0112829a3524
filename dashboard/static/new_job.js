// New-job form: shows the options of the chosen backend (and a search's own in place of those it
// picks), builds the job's JSON body from the form (only what is set, so the API's defaults apply
// to the rest), posts it to /v1/jobs and goes to the new job; on a refusal it shows the API's
// detail and marks the fields it names (each of the API's messages starts with the field path,
// e.g. "validation.atol: ...").
"use strict";
(() => {
  const form = document.getElementById("new-job");
  if (!form) return;
  const errors = document.getElementById("new-job-errors");
  const status = document.getElementById("new-job-status");
  const submit = form.querySelector('button[type="submit"]');
  const backendSelect = form.elements.namedItem("backend");
  const precisionSelect = form.elements.namedItem("precision");
  const passBoxes = () => Array.from(form.querySelectorAll('input[name="passes"]'));
  const passesBox = document.getElementById("passes");
  let passesTouched = passesBox && passesBox.dataset.custom === "true";
  const searchBox = document.getElementById("f-search"); // not namedItem: it also matches ids

  const backend = () => backendSelect.value;
  const searching = () => Boolean(searchBox && searchBox.checked);

  // --- what the backend and precision change on the page -------------------------------------
  function showBackendOptions() {
    for (const el of form.querySelectorAll("[data-backend-only]")) {
      el.hidden = !el.dataset.backendOnly.split(" ").includes(backend());
    }
  }

  function defaultPasses(forBackend) {
    return passBoxes().filter((box) => !(box.dataset.offOn || "").split(" ").includes(forBackend));
  }

  function checkDefaultPasses() {
    const wanted = new Set(defaultPasses(backend()));
    for (const box of passBoxes()) box.checked = wanted.has(box);
  }

  function showTolerancePlaceholders() {
    const group = document.getElementById("validation");
    if (!group || !group.dataset.toleranceDefaults) return;
    const defaults = JSON.parse(group.dataset.toleranceDefaults)[precisionSelect.value] || {};
    for (const [name, value] of Object.entries(defaults)) {
      const input = form.querySelector(`[data-field="validation.${name}"]`);
      if (input) input.placeholder = String(value);
    }
  }

  backendSelect.addEventListener("change", () => {
    showBackendOptions();
    if (!passesTouched) checkDefaultPasses();
  });
  function showPrecisionOptions() {
    for (const el of form.querySelectorAll("[data-precision-only]")) {
      // A search quantizes its int8 candidates itself: only its calibration dataset is asked.
      el.hidden = searching() || !el.dataset.precisionOnly.split(" ").includes(precisionSelect.value);
    }
  }

  // A search picks the precision, passes, ONNX Runtime level and validation failure itself:
  // those controls stay (disabled, labelled, with a note) and its own options show.
  function showSearchOptions() {
    const on = searching();
    const options = document.getElementById("search-options");
    if (options) options.hidden = !on;
    for (const el of form.querySelectorAll("[data-search-picks]")) el.disabled = on;
    for (const el of form.querySelectorAll("[data-search-note]")) el.hidden = !on;
    showPrecisionOptions();
  }
  searchBox?.addEventListener("change", showSearchOptions);
  precisionSelect.addEventListener("change", () => { showTolerancePlaceholders(); showPrecisionOptions(); });
  for (const box of passBoxes()) box.addEventListener("change", () => { passesTouched = true; });
  document.getElementById("default-passes")?.addEventListener("click", () => {
    passesTouched = false;
    checkDefaultPasses();
  });
  showBackendOptions();
  showSearchOptions();

  // --- the body --------------------------------------------------------------------------------
  // A value the form cannot read as a number is sent as typed: the API's 422 then names the field.
  const numberOf = (text) => (text.trim() !== "" && Number.isFinite(Number(text)) ? Number(text) : text.trim());

  function dimsOf(text) {
    return text.split(/[\s,]+/).filter((t) => t !== "").map((t) => (/^\d+$/.test(t) ? Number(t) : t));
  }

  function numberField(path) {
    const input = form.querySelector(`[data-field="${path}"]`);
    if (!input) return undefined;
    if (input.validity && input.validity.badInput) return "not a number";
    return input.value.trim() === "" ? undefined : numberOf(input.value);
  }

  function group(prefix, names) {
    const out = {};
    for (const name of names) {
      const value = numberField(`${prefix}.${name}`);
      if (value !== undefined) out[name] = value;
    }
    return out;
  }

  function passesValue() {
    const checked = passBoxes().filter((box) => box.checked);
    if (checked.length === 0) return "none";
    const defaults = defaultPasses(backend());
    const same = checked.length === defaults.length && checked.every((box) => defaults.includes(box));
    return same ? "all" : checked.map((box) => box.value);
  }

  // A search job's own block; the fields it picks itself are left out of the body.
  function searchValue(text, checked) {
    const search = { strategy: text("search.strategy") };
    const time = numberField("search.time_budget_s");
    if (time !== undefined) search.time_budget_s = time;
    const latency = numberField("search.latency_budget_ms");
    if (latency !== undefined) search.latency_budget_ms = latency;
    search.pass_sets = checked("search.pass_sets");
    for (const box of form.querySelectorAll("[data-search-limit]")) {
      if (box.checked) search[box.dataset.searchLimit] = JSON.parse(box.dataset.values);
    }
    // Other backends to race, offered only where the chosen backend's workers build them.
    const others = [...form.querySelectorAll('input[name="search.backends"]')]
      .filter((box) => box.checked && !box.closest("[hidden]")).map((box) => box.value);
    if (others.length) search.backends = [backend(), ...others];
    return search;
  }

  function body() {
    const text = (name) => (form.elements.namedItem(name)?.value || "").trim();
    const checked = (name) => Boolean(form.elements.namedItem(name)?.checked);
    const search = searching();
    const job = { model_id: form.dataset.modelId, backend: backend() };
    if (!search) job.precision = precisionSelect.value;
    if (backend() === "tensorrt" && text("target_gpu")) job.target_gpu = text("target_gpu");
    if (!search) job.passes = passesValue();

    const shapes = {};
    for (const input of form.querySelectorAll("[data-shape-input]")) {
      if (input.value.trim()) shapes[input.dataset.input] = dimsOf(input.value);
    }
    if (Object.keys(shapes).length) job.input_shapes = shapes;

    if (backend() === "tensorrt") {
      const profiles = {};
      for (const set of form.querySelectorAll("[data-profile-input]")) {
        const bounds = {};
        for (const input of set.querySelectorAll("[data-bound]")) {
          if (input.value.trim()) bounds[input.dataset.bound] = dimsOf(input.value);
        }
        if (Object.keys(bounds).length) profiles[set.dataset.profileInput] = bounds;
      }
      if (Object.keys(profiles).length) job.profiles = profiles;
    }

    const ranges = {};
    for (const row of form.querySelectorAll("[data-range-input]")) {
      const low = row.querySelector('[data-range-bound="low"]');
      const high = row.querySelector('[data-range-bound="high"]');
      if (low.value.trim() || high.value.trim() || low.validity.badInput || high.validity.badInput) {
        ranges[row.dataset.rangeInput] = [numberField(low.dataset.field) ?? null, numberField(high.dataset.field) ?? null];
      }
    }
    if (Object.keys(ranges).length) job.input_ranges = ranges;

    if (text("dataset_id")) job.dataset_id = text("dataset_id");
    if (!search) job.on_validation_failure = text("on_validation_failure") || "fail";
    job.validation = group("validation", ["samples", "seed", "atol", "rtol", "min_cosine", "max_rel_err",
      "max_rmse", "min_snr_db", "min_top1_agreement", "min_top5_agreement", "max_accuracy_drop"]);
    // A search applies precision_search to its fp16/bf16 candidates; unchecked, it is left out.
    if (!search || checked("precision_search")) job.precision_search = checked("precision_search");
    if (search) {
      job.search = searchValue(text, checked);
      if (text("search_calibration")) job.quantization = { calibration: text("search_calibration") };
    }
    const quantized = (form.querySelector("#quantization")?.dataset.precisionOnly || "").split(" ");
    if (quantized.includes(job.precision)) {
      job.quantization = { mode: text("quantization.mode") || "auto", method: text("quantization.method") || "auto",
        ...group("quantization", ["max_kept_nodes"]) };
      if (text("quantization.calibration")) job.quantization.calibration = text("quantization.calibration");
      // Only the limits given: the others stay int8's defaults.
      const budget = group("accuracy_budget", ["min_cosine", "min_top1_agreement", "max_abs_err"]);
      if (Object.keys(budget).length) job.accuracy_budget = budget;
    }
    if (job.precision_search) {
      // Every limit is sent, unset ones as null: the budget's own default (min_cosine) is
      // replaced by what the form shows, so clearing a field clears that limit.
      job.accuracy_budget = { min_cosine: null, min_top1_agreement: null, max_abs_err: null,
        ...group("accuracy_budget", ["min_cosine", "min_top1_agreement", "max_abs_err"]) };
    } else if (search) {
      // The budget that judges every candidate, as the form shows it (all fields empty: each
      // precision's own defaults).
      const budget = group("accuracy_budget", ["min_cosine", "min_top1_agreement", "max_abs_err"]);
      if (Object.keys(budget).length) {
        job.accuracy_budget = { min_cosine: null, min_top1_agreement: null, max_abs_err: null, ...budget };
      }
    }
    job.benchmark = { ...group("benchmark", ["warmup", "iterations"]), measure_memory: checked("benchmark.measure_memory") };
    job.ablation = checked("ablation");
    if (backend() === "onnxruntime") {
      if (!search && text("ort_optimization_level")) job.ort_optimization_level = text("ort_optimization_level");
      const flush = text("ort_flush_denormals");
      if (flush) job.ort_flush_denormals = flush === "true";
    }
    const threadsField = form.querySelector('[data-field="intra_op_threads"]');
    const threads = numberField("intra_op_threads");
    if (threads !== undefined && !threadsField.closest("[data-backend-only]").hidden) {
      job.intra_op_threads = threads;
    }
    if (text("callback_url")) job.callback_url = text("callback_url");
    return job;
  }

  // --- the API's refusal, shown and pointed at --------------------------------------------------
  function clearErrors() {
    errors.hidden = true;
    errors.textContent = "";
    for (const el of form.querySelectorAll(".field-error")) el.remove();
    for (const el of form.querySelectorAll('[aria-invalid="true"]')) {
      el.removeAttribute("aria-invalid");
      const described = (el.getAttribute("aria-describedby") || "").split(" ").filter((id) => !id.startsWith("error-for-"));
      if (described.length) el.setAttribute("aria-describedby", described.join(" "));
      else el.removeAttribute("aria-describedby");
    }
  }

  // The control (or group) a message's field path names: the longest leading part of the path
  // some control carries as its data-field ("profiles.x.min.0" → "profiles.x.min"); of two
  // carrying it (quantization.calibration: the quantization's and the search's), the shown one.
  function fieldOf(path) {
    const fields = Array.from(form.querySelectorAll("[data-field]"));
    let candidate = path;
    while (candidate) {
      const matches = fields.filter((el) => el.dataset.field === candidate);
      const match = matches.find((el) => !el.closest("[hidden]")) || matches[0];
      if (match) return match;
      const cut = candidate.lastIndexOf(".");
      candidate = cut > 0 ? candidate.slice(0, cut) : "";
    }
    return null;
  }

  let errorCount = 0;
  function markField(target, message) {
    const control = target.matches("input, select, textarea") ? target : target.querySelector("input, select, textarea");
    if (!control) return null;
    for (let el = target.parentElement; el; el = el.parentElement) {
      if (el.tagName === "DETAILS") el.open = true;
      if (el.hidden && el.dataset.backendOnly) return null; // an option of the other backend
    }
    const note = document.createElement("p");
    note.className = "field-error";
    note.id = `error-for-${++errorCount}`;
    note.textContent = message;
    control.setAttribute("aria-invalid", "true");
    const described = control.getAttribute("aria-describedby");
    control.setAttribute("aria-describedby", described ? `${described} ${note.id}` : note.id);
    (control.closest(".field") || control.closest("li") || target).append(note);
    return control;
  }

  function showRefusal(answer) {
    const detail = answer.body && answer.body.detail ? String(answer.body.detail) : `HTTP ${answer.status}`;
    const code = answer.body && answer.body.error ? answer.body.error : "Error";
    errors.textContent = `The job was not started (${code}): ${detail}`;
    errors.hidden = false;
    // Several problems come joined by "; "; a part that names no field continues the one before
    // it (a message's own "; ").
    const problems = [];
    for (const part of detail.split("; ")) {
      const match = /^([A-Za-z_][\w.\-[\]:/ ]*?): (.+)$/s.exec(part);
      const target = match ? fieldOf(match[1]) : null;
      if (target) problems.push({ target, message: match[2] });
      else if (problems.length) problems[problems.length - 1].message += `; ${part}`;
    }
    let first = null;
    for (const { target, message } of problems) {
      const control = markField(target, message);
      if (!first) first = control;
    }
    (first || errors).focus();
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors();
    submit.disabled = true;
    status.textContent = "Starting the job…";
    const answer = await window.FuseForge.api("POST", "/v1/jobs", body());
    if (answer.status === 202 && answer.body && answer.body.id) {
      status.textContent = "Job queued; opening it…";
      window.location.assign(`/ui/jobs/${encodeURIComponent(answer.body.id)}`);
      return;
    }
    submit.disabled = false;
    status.textContent = "";
    showRefusal(answer);
  });
})();
