"""The daemon's socket file: where it lives, claiming it, binding it, and telling systemd.

Light on purpose (no FastAPI, no torch): the client imports `default_socket_path`, and the
daemon claims its path before loading anything, so a second daemon fails fast.
"""

from __future__ import annotations

import grp
import logging
import os
import socket
import stat
from pathlib import Path
from typing import Optional

from ..errors import OrinError

log = logging.getLogger("orin_llm.server")

SYSTEM_SOCKET = Path("/run/orin-llm/planner.sock")  # systemd's RuntimeDirectory=orin-llm
SOCKET_MODE = 0o660  # owner and group: add a client's user to the socket's group to let it in


def default_socket_path(client: bool = False) -> Path:
    """Where the daemon listens when no --socket is given, and where clients look.

    1. `$ORIN_LLM_SOCKET`, when set.
    2. `$XDG_RUNTIME_DIR/orin-llm/planner.sock` when XDG_RUNTIME_DIR is set (a user's login
       session: a daemon started by hand). A client takes it only if that socket exists, so a
       client in a user session still finds the system daemon.
    3. `/run/orin-llm/planner.sock`: the systemd service (RuntimeDirectory=orin-llm), and any
       process without a session (root, other services).
    """
    if os.environ.get("ORIN_LLM_SOCKET"):
        return Path(os.environ["ORIN_LLM_SOCKET"])
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        user = Path(runtime) / "orin-llm" / "planner.sock"
        if not client or user.exists():
            return user
    return SYSTEM_SOCKET


def claim(path: Path) -> None:
    """Make `path` free for our socket: a stale socket file (nobody listening) is removed; a live
    one, or a file that is not a socket, is refused (OrinError)."""
    if not path.parent.is_dir():
        try:
            path.parent.mkdir(mode=0o750, parents=True)
        except OSError as e:
            raise OrinError(f"cannot create {path.parent} for the socket: {e.strerror}; "
                            "create it or choose another --socket") from None
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise OrinError(f"{path} exists and is not a socket; remove it or choose another --socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(2.0)
    try:
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        log.info("removing stale socket %s (nobody listening)", path)
        path.unlink(missing_ok=True)
        return
    except TimeoutError:  # socket.timeout is TimeoutError since 3.10
        pass  # a full backlog: someone is there, just busy
    except OSError as e:
        raise OrinError(f"cannot check whether a daemon listens on {path}: {e.strerror}") from None
    finally:
        probe.close()
    raise OrinError(f"another daemon is already listening on {path}; stop it first "
                    "(systemctl stop orin-llm) or choose another --socket")


def bind_unix(path: Path, group: Optional[str] = None, backlog: int = 128) -> socket.socket:
    """A listening socket at `path` with mode 0660 (and `group`), never world-accessible: the
    umask makes bind() create it 0660 already, so no client can slip in before the chmod."""
    gid = -1
    if group is not None:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            raise OrinError(f"--socket-group {group!r}: no such group (create it: groupadd {group})"
                            ) from None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o117)
    try:
        sock.bind(str(path))
    except OSError as e:
        sock.close()
        raise OrinError(f"cannot bind {path}: {e.strerror}") from None
    finally:
        os.umask(old)
    try:
        if gid != -1:
            os.chown(path, -1, gid)
        os.chmod(path, SOCKET_MODE)
    except OSError as e:
        sock.close()
        path.unlink(missing_ok=True)
        raise OrinError(f"cannot set the group or mode of {path}: {e.strerror}") from None
    sock.listen(backlog)
    return sock


def bind_tcp(address: str, backlog: int = 128) -> socket.socket:
    """`HOST:PORT` (or `[v6]:PORT`) → a listening TCP socket. There is no authentication on it."""
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit():
        raise OrinError(f"--tcp {address!r}: give HOST:PORT, e.g. 127.0.0.1:8080")
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        return socket.create_server((host, int(port)), family=family, backlog=backlog)
    except OSError as e:
        raise OrinError(f"--tcp {address}: cannot listen: {e.strerror}") from None


def same_file(path: Path, st: os.stat_result) -> bool:
    try:
        now = path.lstat()
    except FileNotFoundError:
        return False
    return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


def notify(state: str) -> None:
    """sd_notify(3) in a few lines: one datagram to $NOTIFY_SOCKET (a no-op outside systemd)."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return
    if addr.startswith("@"):  # an abstract socket
        addr = "\0" + addr[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.connect(addr)
            s.sendall(state.encode())
    except OSError as e:
        log.warning("sd_notify %s to %s failed: %s", state, addr, e)
