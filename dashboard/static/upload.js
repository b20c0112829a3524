// Models and datasets pages: upload a file by dropping it on #upload-dropzone or choosing it in
// #upload-file, POSTed to the zone's data-upload-url (default /v1/models) with the role of
// #upload-role where the page has one (datasets). XMLHttpRequest rather than fetch() because
// only XHR reports upload progress; on success a model goes on to its new-job form and a
// dataset's page reloads to list it, on refusal the API's own detail (InvalidModelFile,
// DatasetRoleConflict, UploadTooLarge...) is shown where the status is.
"use strict";
(() => {
  const zone = document.getElementById("upload-dropzone");
  const input = document.getElementById("upload-file");
  const nameInput = document.getElementById("upload-name");
  const roleInput = document.getElementById("upload-role");
  const progress = document.getElementById("upload-progress");
  const status = document.getElementById("upload-status");
  if (!zone || !input || !progress || !status) return;
  let busy = false;

  function say(message, problem = false) {
    status.textContent = message;
    status.classList.toggle("error-box", problem);
    if (problem) status.setAttribute("role", "alert");
    else status.removeAttribute("role");
  }

  function sizeText(bytes) {
    if (bytes < 1024) return `${bytes} B`;
    if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
    if (bytes < 1024 * 1024 * 1024) return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
    return `${(bytes / 1024 / 1024 / 1024).toFixed(2)} GB`;
  }

  function answerOf(xhr) {
    try { return JSON.parse(xhr.responseText); } catch (_) { return null; }
  }

  function refused(xhr) {
    const body = answerOf(xhr);
    const code = body && body.error ? body.error : `HTTP ${xhr.status}`;
    const detail = body && body.detail ? body.detail : (xhr.statusText || "the server gave no reason");
    if (xhr.status === 401) return `Upload refused (${code}): ${detail}. Sign in again, then retry.`;
    return `Upload refused (${code}): ${detail}`;
  }

  function upload(file) {
    if (busy) return;
    if (!file) { say("No file chosen.", true); return; }
    busy = true;
    zone.setAttribute("aria-busy", "true");
    input.disabled = true;
    progress.value = 0;
    progress.textContent = "0%";
    say(`Uploading ${file.name} (${sizeText(file.size)})…`);

    const form = new FormData();
    const name = nameInput ? nameInput.value.trim() : "";
    if (name) form.append("name", name); // the multipart form's name field (the query's is ignored)
    form.append("file", file, file.name);

    const xhr = new XMLHttpRequest();
    const url = zone.dataset.uploadUrl || "/v1/models";
    xhr.open("POST", roleInput ? `${url}?role=${encodeURIComponent(roleInput.value)}` : url);
    xhr.setRequestHeader("X-CSRF-Token", window.FuseForge ? window.FuseForge.csrf() : "");
    xhr.setRequestHeader("Accept", "application/json");
    xhr.upload.onprogress = (event) => {
      if (!event.lengthComputable) return;
      const percent = Math.round((event.loaded / event.total) * 100);
      progress.value = percent;
      progress.textContent = `${percent}%`;
      say(`Uploading ${file.name}: ${percent}% of ${sizeText(event.total)}`);
    };
    xhr.upload.onload = () => say(`Uploaded ${file.name}; FuseForge is checking the model…`);
    const done = () => { busy = false; zone.removeAttribute("aria-busy"); input.disabled = false; };
    xhr.onload = () => {
      const body = answerOf(xhr);
      if ((xhr.status === 201 || xhr.status === 200) && body && body.id) {
        progress.value = 100;
        if (body.role) { // a dataset: list it
          say(`${body.name} ${xhr.status === 200 ? "was uploaded before" : "uploaded"} as a ${body.role} dataset.`);
          window.location.assign(`/ui/datasets?role=${encodeURIComponent(body.role)}`);
          return;
        }
        say(xhr.status === 200
          ? `${body.name} was uploaded before; opening its new-job form…`
          : `${body.name} uploaded; opening its new-job form…`);
        window.location.assign(`/ui/models/${encodeURIComponent(body.id)}/new-job`);
        return;
      }
      done();
      progress.value = 0;
      say(refused(xhr), true);
    };
    xhr.onerror = () => {
      done();
      progress.value = 0;
      say(`Upload of ${file.name} failed: the FuseForge API could not be reached. Check the server, then try again.`, true);
    };
    xhr.onabort = () => { done(); say("Upload cancelled.", true); };
    xhr.send(form);
  }

  input.addEventListener("change", () => { if (input.files && input.files.length) upload(input.files[0]); });

  // Drag and drop over the whole zone; dragenter/leave fire for children too, hence the count.
  let depth = 0;
  zone.addEventListener("dragenter", (event) => { event.preventDefault(); depth += 1; zone.classList.add("over"); });
  zone.addEventListener("dragover", (event) => { event.preventDefault(); event.dataTransfer.dropEffect = "copy"; });
  zone.addEventListener("dragleave", () => { depth = Math.max(depth - 1, 0); if (!depth) zone.classList.remove("over"); });
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    depth = 0;
    zone.classList.remove("over");
    const files = event.dataTransfer ? event.dataTransfer.files : null;
    if (!files || !files.length) { say("Nothing to upload: drop a file.", true); return; }
    upload(files[0]);
  });
  // A file dropped beside the zone would otherwise open in the tab and leave the page.
  window.addEventListener("dragover", (event) => event.preventDefault());
  window.addEventListener("drop", (event) => { if (!zone.contains(event.target)) event.preventDefault(); });
})();
