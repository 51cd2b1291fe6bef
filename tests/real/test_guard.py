"""The network guard refuses and records every non-loopback connection and lookup.

Run in a fresh interpreter whose socket functions are replaced by recorders *before* the
guard is installed: the guard's "real" calls then go to the recorders, so the test never
sends a packet even if the guard were broken (it would fail instead)."""

from __future__ import annotations

import json
import subprocess
import sys

from toki.real.session import WORKER_ROOT

SCRIPT = r"""
import json, socket, sys
calls = []
socket.socket.connect = lambda self, addr: calls.append(["connect", list(addr)])
socket.getaddrinfo = lambda host, *a, **k: calls.append(["getaddrinfo", host]) or []
socket.gethostbyname = lambda host: calls.append(["gethostbyname", host]) or "127.0.0.1"
socket.gethostbyname_ex = lambda host: calls.append(["gethostbyname_ex", host]) or (host, [], [])
sys.path.insert(0, sys.argv[1])
from inenv import guard
guard.install()
guard.install()  # idempotent
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "passed"
    except (ConnectionRefusedError, socket.gaierror) as exc:
        out[name] = "refused: " + str(exc)
s = socket.socket()
attempt("lookup", lambda: socket.getaddrinfo("pypi.org", 443))
attempt("connect", lambda: s.connect(("203.0.113.7", 80)))
attempt("connect_ex", lambda: s.connect_ex(("203.0.113.7", 80)) == 111 or 1 / 0)
attempt("byname", lambda: socket.gethostbyname("example.org"))
attempt("loopback", lambda: s.connect(("127.0.0.1", 9)))
attempt("localhost", lambda: socket.getaddrinfo("localhost", 80))
attempt("v6-loopback", lambda: socket.getaddrinfo("::1", 80))
print(json.dumps({"out": out, "attempts": guard.drain(), "after": guard.drain(), "calls": calls}))
"""


def test_the_guard_refuses_and_records_and_lets_loopback_through() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(WORKER_ROOT)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    data = json.loads(done.stdout)
    out = data["out"]
    for name in ("lookup", "connect", "byname"):
        assert out[name].startswith("refused: ") and "toki.real network guard" in out[name]
    assert out["connect_ex"] == "passed"  # refused by returning ECONNREFUSED, as the OS would
    for name in ("loopback", "localhost", "v6-loopback"):
        assert out[name] == "passed", (name, out[name])
    targets = [(a["call"], a["target"]) for a in data["attempts"]]
    assert targets == [
        ("socket.getaddrinfo", "'pypi.org'"),
        ("socket.connect", "('203.0.113.7', 80)"),
        ("socket.connect_ex", "('203.0.113.7', 80)"),
        ("socket.gethostbyname", "'example.org'"),
    ]
    assert all(a["caller"] for a in data["attempts"])
    assert data["after"] == []  # drained
    # nothing but loopback ever reached the (recording) socket layer
    assert data["calls"] == [
        ["connect", ["127.0.0.1", 9]],
        ["getaddrinfo", "localhost"],
        ["getaddrinfo", "::1"],
    ]
