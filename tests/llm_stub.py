"""A tiny OpenAI-compatible chat-completions server on 127.0.0.1 for the tests.

It answers deterministically: `responder(body)` turns the request body into the reply text.
`script` is a queue of misbehaviours served before the responder, one per request:
"429" (rate limit, Retry-After: 0), "500", "503", "timeout" (sleeps past the client's
timeout), "garbage" (200 with a body that is not JSON), "nochoices" (200 with an error
object), "400", "401". Every request is recorded (path, headers, parsed body).
Nothing here talks to any address but the loopback one it is bound to.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Responder = Callable[[dict[str, Any]], str]


def echo_last_line(body: dict[str, Any]) -> str:
    """Reply with the last line of the user message: a deterministic stand-in for a model."""
    user = body["messages"][-1]["content"]
    return str(user.strip().splitlines()[-1])


class StubServer:
    def __init__(self, responder: Responder = echo_last_line, *, timeout_sleep: float = 1.0):
        self.responder = responder
        self.script: list[str] = []
        self.requests: list[dict[str, Any]] = []
        self.timeout_sleep = timeout_sleep
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                with stub._lock:
                    body = json.loads(raw)
                    stub.requests.append(
                        {"path": self.path, "headers": dict(self.headers), "body": body}
                    )
                    action = stub.script.pop(0) if stub.script else "ok"
                if self.path != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                if action == "timeout":
                    threading.Event().wait(stub.timeout_sleep)
                    return self._send(200, stub._completion(body, "late"))
                if action == "429":
                    return self._send(
                        429, {"error": {"message": "slow down"}}, {"Retry-After": "0"}
                    )
                if action in ("500", "503", "400", "401"):
                    return self._send(int(action), {"error": {"message": f"stub {action}"}})
                if action == "garbage":
                    return self._send_raw(200, b"<html>proxy error</html>")
                if action == "nochoices":
                    return self._send(200, {"error": {"message": "model overloaded"}})
                return self._send(200, stub._completion(body, stub.responder(body)))

            def _send(
                self, status: int, data: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                self._send_raw(status, json.dumps(data).encode(), headers)

            def _send_raw(
                self, status: int, raw: bytes, headers: dict[str, str] | None = None
            ) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                # the client may have given up (timeout): nothing to tell it then
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(raw)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def _completion(self, body: dict[str, Any], text: str) -> dict[str, Any]:
        prompt_chars = sum(len(m["content"]) for m in body["messages"])
        return {
            "id": "stub",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": prompt_chars // 4, "completion_tokens": len(text.split())},
        }

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> StubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
