"""Ports and process groups as the operating system sees them (a TCP connect, ``/proc``).

What :class:`~specband.harness.process.ServerProcess` asks before a launch (is the port
free), while it runs (which sockets its process group holds: the server that answers is
its own) and when it stops (is any process of the group left).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from collections.abc import Sequence

from specband.engines.failures import PortInUseError

__all__ = [
    "group_members",
    "listening_socket_inodes",
    "port_answering",
    "process_group_alive",
    "socket_inodes_of",
    "wait_port_free",
]


def port_answering(host: str, port: int, timeout_s: float = 0.25) -> bool:
    """True when a TCP connection to ``host:port`` succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def wait_port_free(host: str, port: int, wait_s: float = 10.0) -> None:
    """Return once nothing answers on ``host:port``, waiting up to ``wait_s`` real seconds
    for a busy port to free (a previous server may still be exiting).

    Raises:
        PortInUseError: the port still answers after ``wait_s``
            (``"port P on H is already answering; refusing to launch ..."``).
    """
    deadline = time.monotonic() + wait_s
    while port_answering(host, port):
        if time.monotonic() >= deadline:
            raise PortInUseError(
                f"port {port} on {host} is already answering; refusing to launch (stop that server or pass "
                f"another --port)"
            )
        time.sleep(0.1)


def group_members(pgid: int) -> list[int]:
    """Pids of the live (non-zombie) processes in process group ``pgid``, from /proc."""
    members: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return members
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] != b"Z":
            members.append(int(entry))
    return members


def listening_socket_inodes(port: int) -> set[int] | None:
    """Inodes of the TCP sockets listening on ``port`` (any address, IPv4 and IPv6), from
    ``/proc/net/tcp`` and ``/proc/net/tcp6``; ``None`` when neither can be read (not
    Linux)."""
    found: set[int] = set()
    read_any = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii", errors="replace") as fh:
                lines = fh.read().splitlines()[1:]
        except OSError:
            continue
        read_any = True
        for line in lines:
            parts = line.split()
            if len(parts) < 10 or parts[3] != "0A":  # 0A: TCP_LISTEN
                continue
            try:
                local_port = int(parts[1].rsplit(":", 1)[1], 16)
                inode = int(parts[9])
            except (IndexError, ValueError):
                continue
            if local_port == port and inode:
                found.add(inode)
    return found if read_any else None


def socket_inodes_of(pids: Sequence[int]) -> set[int]:
    """Inodes of the sockets the processes ``pids`` hold open (``/proc/<pid>/fd``)."""
    inodes: set[int] = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                with contextlib.suppress(ValueError):
                    inodes.add(int(target[8:-1]))
    return inodes


def process_group_alive(pgid: int) -> bool:
    """True while a live (non-zombie) process is in process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if sys.platform.startswith("linux") and os.path.isdir("/proc/self"):
        return bool(group_members(pgid))
    return True
