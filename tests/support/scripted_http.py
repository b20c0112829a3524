"""A real HTTP server on a free local port that answers from a script and records what it was
sent: for client behaviour the FuseForge API cannot be made to show on demand (a 503 with
Retry-After, then success; a 401 from a proxy or a key check)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Answer", "Received", "ScriptedServer", "scripted_server"]


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any = None  # JSON-encoded unless bytes
    headers: dict[str, str] = field(default_factory=dict)
    cut_after: int | None = None  # send only this many body bytes, then drop the connection

    def encoded(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        return b"" if self.body is None else json.dumps(self.body).encode()


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body_bytes: int


@dataclass
class ScriptedServer:
    base_url: str
    answers: list[Answer]
    received: list[Received]


@contextmanager
def scripted_server(answers: list[Answer]) -> Iterator[ScriptedServer]:
    """Serve `answers` in order, one per request (the last one repeats when they run out)."""
    script = ScriptedServer("", list(answers), [])
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            with lock:
                script.received.append(Received(self.command, self.path,
                                                {k.lower(): v for k, v in self.headers.items()},
                                                len(body)))
                answer = script.answers.pop(0) if len(script.answers) > 1 else script.answers[0]
            payload = answer.encoded()
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.end_headers()
            if answer.cut_after is not None:
                self.wfile.write(payload[:answer.cut_after])
                self.close_connection = True
                return
            self.wfile.write(payload)

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    script.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield script
    finally:
        server.shutdown()
        server.server_close()
