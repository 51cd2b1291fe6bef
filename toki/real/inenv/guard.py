"""The network guard: refuse every connection and DNS lookup that leaves the machine.

Installed before the library is imported. Loopback addresses (127.0.0.0/8, ::1, "localhost")
and Unix sockets pass; anything else raises `ConnectionRefusedError` (connect) or
`socket.gaierror` (lookup) and is recorded with the library frame that asked, so the host can
fail the run naming the library and the call even when the library swallows the error.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import traceback
from typing import Any

__all__ = ["attempts", "drain", "install"]

_LOCK = threading.Lock()
_ATTEMPTS: list[dict[str, Any]] = []
_INSTALLED: list[bool] = []
_LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", ""}


def _is_loopback(host: Any) -> bool:
    if host is None:
        return True
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    text = str(host).strip("[]").lower()
    if text in _LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(text.split("%")[0]).is_loopback
    except ValueError:
        return False


def _caller() -> str:
    """Who asked: the installed packages on the stack, outermost first, each with its
    innermost frame ('mem0/memory/notices.py:65 _fetch_remote_config -> urllib3/...'); the
    innermost frame when no installed package is on the stack."""
    frames = [f for f in traceback.extract_stack()[:-3] if not f.filename.endswith("guard.py")]
    chain: dict[str, traceback.FrameSummary] = {}
    for f in frames:
        if "-packages/" in f.filename:
            path = f.filename.split("-packages/", 1)[1]
            chain.pop(path.split("/", 1)[0], None)
            chain[path.split("/", 1)[0]] = f

    def name(f: traceback.FrameSummary) -> str:
        return f"{f.filename.split('-packages/', 1)[-1]}:{f.lineno} {f.name}"

    if not chain:
        return name(frames[-1]) if frames else "?"
    return " -> ".join(name(f) for f in chain.values())


def _record(call: str, target: Any) -> None:
    with _LOCK:
        _ATTEMPTS.append(
            {
                "call": call,
                "target": repr(target)[:200],
                "caller": _caller(),
                "thread": threading.current_thread().name,
            }
        )


def install() -> None:
    """Patch the socket module (idempotent)."""
    if _INSTALLED:
        return
    _INSTALLED.append(True)
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo
    real_gethostbyname = socket.gethostbyname
    real_gethostbyname_ex = socket.gethostbyname_ex

    def allowed(sock: socket.socket, address: Any) -> bool:
        if sock.family == getattr(socket, "AF_UNIX", None):
            return True
        host = address[0] if isinstance(address, tuple) and address else address
        return _is_loopback(host)

    def connect(self: socket.socket, address: Any) -> None:
        if not allowed(self, address):
            _record("socket.connect", address)
            raise ConnectionRefusedError(f"toki.real network guard: refused connect to {address!r}")
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        if not allowed(self, address):
            _record("socket.connect_ex", address)
            return 111  # ECONNREFUSED
        return real_connect_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kw: Any) -> Any:
        if not _is_loopback(host):
            _record("socket.getaddrinfo", host)
            raise socket.gaierror(
                socket.EAI_NONAME, f"toki.real network guard: refused lookup of {host!r}"
            )
        return real_getaddrinfo(host, *args, **kw)

    def gethostbyname(host: Any) -> str:
        if not _is_loopback(host):
            _record("socket.gethostbyname", host)
            raise socket.gaierror(
                socket.EAI_NONAME, f"toki.real network guard: refused lookup of {host!r}"
            )
        return real_gethostbyname(host)

    def gethostbyname_ex(host: Any) -> Any:
        if not _is_loopback(host):
            _record("socket.gethostbyname_ex", host)
            raise socket.gaierror(
                socket.EAI_NONAME, f"toki.real network guard: refused lookup of {host!r}"
            )
        return real_gethostbyname_ex(host)

    socket.socket.connect = connect  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign,assignment]
    socket.getaddrinfo = getaddrinfo
    socket.gethostbyname = gethostbyname
    socket.gethostbyname_ex = gethostbyname_ex


def attempts() -> list[dict[str, Any]]:
    with _LOCK:
        return list(_ATTEMPTS)


def drain() -> list[dict[str, Any]]:
    """The attempts recorded since the last drain."""
    with _LOCK:
        out = list(_ATTEMPTS)
        _ATTEMPTS.clear()
    return out
