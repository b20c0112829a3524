// FuseForge dashboard: what every page shares. The CSRF token (from the page's meta tag) on
// every request that changes something, the banner, and a live stream that says when it is
// cut off and comes back by itself.
"use strict";
window.FuseForge = (() => {
  const csrf = () => document.querySelector('meta[name="csrf-token"]')?.content || "";

  function banner(message, bad = false) {
    const el = document.getElementById("banner");
    if (!el) return;
    if (!message) { el.hidden = true; el.textContent = ""; return; }
    el.textContent = message;
    el.classList.toggle("bad", bad);
    el.hidden = false;
  }

  // fetch() against the API with the session cookie and the CSRF token; answers
  // {ok, status, body}; a network failure shows the banner and answers status 0.
  async function api(method, url, body) {
    const headers = { "X-CSRF-Token": csrf(), Accept: "application/json" };
    let payload = body;
    if (body !== undefined && !(body instanceof FormData)) {
      headers["Content-Type"] = "application/json";
      payload = JSON.stringify(body);
    }
    try {
      const response = await fetch(url, { method, headers, body: payload, credentials: "same-origin" });
      const text = await response.text();
      let parsed = null;
      try { parsed = text ? JSON.parse(text) : null; } catch (_) { parsed = { error: "HTTPError", detail: text }; }
      return { ok: response.ok, status: response.status, body: parsed };
    } catch (err) {
      banner("The FuseForge API cannot be reached: check the server, then try again.", true);
      return { ok: false, status: 0, body: { error: "Unreachable", detail: String(err) } };
    }
  }

  // An EventSource that shows the banner while it is cut off. EventSource reconnects by itself
  // (sending Last-Event-ID); a stream we reopen ourselves (closed, or after its timeout event)
  // resumes through `resumeParam` (the query parameter the route reads the last id from).
  function stream(url, handlers, resumeParam) {
    let source = null;
    let retryMs = 1000;
    let lastId = "";
    const target = () => {
      if (!resumeParam || !lastId) return url;
      const next = new URL(url, window.location.href);
      next.searchParams.set(resumeParam, lastId);
      return next.pathname + next.search;
    };
    const open = () => {
      source = new EventSource(target(), { withCredentials: true });
      source.onopen = () => { retryMs = 1000; banner(null); };
      source.onerror = () => {
        banner("Live updates lost: reconnecting…");
        if (source.readyState === EventSource.CLOSED) {
          setTimeout(open, retryMs);
          retryMs = Math.min(retryMs * 2, 30000);
        }
      };
      for (const [name, handler] of Object.entries(handlers)) {
        source.addEventListener(name, (event) => {
          if (event.lastEventId) lastId = event.lastEventId;
          handler(event.data ? JSON.parse(event.data) : null, event);
        });
      }
      source.addEventListener("timeout", (event) => {
        if (event.lastEventId) lastId = event.lastEventId;
        source.close();
        open();
      });
    };
    open();
    return { close: () => source && source.close() };
  }

  return { csrf, banner, api, stream };
})();
