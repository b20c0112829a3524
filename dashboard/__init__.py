"""The web dashboard: server-rendered pages over the REST API, served by the API's own process.

The pages read and act only through the REST API (dashboard/rest.py calls it in-process, as the
signed-in browser); the browser's scripts call the same API for uploads, new jobs and the live
job stream, signed in by the session cookie and a CSRF token (core/browser_sessions.py).
"""
