"""The server's listening socket, taken before the model loads: a busy port fails in a second
with a clear error instead of after minutes of loading."""

from __future__ import annotations

import errno
import socket

from spectool.errors import ConfigError

__all__ = ["bind", "check_free"]


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on (host, port), the way uvicorn would open it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # uvicorn's choice: TIME_WAIT is fine
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        why = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound ({exc.strerror})"
        raise ConfigError(f"port {port} on {host} {why}; pick another with --port") from exc
    sock.set_inheritable(True)
    return sock


def check_free(host: str, port: int) -> None:
    """Raise ConfigError unless (host, port) can be bound now (the socket is released again)."""
    bind(host, port).close()
