"""A guard for tests that must not reach a network: every socket connect (and datagram send) to an address that
is not loopback is refused, and the test that tried fails at its end, even when the code under test caught the
refusal and went on (a bad-input test pointed at 10.0.0.1 whose refusal broke would otherwise pass, having
opened an SSH connection out of the machine).

Only this process is guarded: a subprocess (ssh, ansible-playbook) is not. For those, ./dev.sh runs the tests
that are not lab tests inside an empty network namespace, where only loopback exists. Lab tests (marked `lab`)
reach their nodes on the lab's own addresses and are not guarded.
"""
from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

GUARDED_FAMILIES = (socket.AF_INET, socket.AF_INET6)


class NetworkRefused(ConnectionRefusedError):
    """What a guarded test's code sees when it tries to reach a non-loopback address."""


def loopback(address: Any) -> bool:
    """Whether an AF_INET/AF_INET6 socket address is on this machine's loopback. Names other than `localhost`
    are not looked up (that would be a network request of its own) and count as leaving the machine."""
    host = address[0] if isinstance(address, tuple) and address else address
    if not isinstance(host, str):
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


@contextmanager
def refuse_non_loopback() -> Iterator[list[str]]:
    """Within the block, non-loopback connects and sends raise NetworkRefused; yields the list of attempts
    (one line each), for the caller to fail the test on."""
    attempts: list[str] = []
    originals: dict[str, Callable[..., Any]] = {name: getattr(socket.socket, name)
                                                for name in ("connect", "connect_ex", "sendto")}

    def check(sock: socket.socket, address: Any, what: str) -> None:
        if sock.family in GUARDED_FAMILIES and not loopback(address):
            attempts.append(f"{what} to {address!r}")
            raise NetworkRefused(f"the test session refuses {what} to {address!r}: unit tests use loopback only")

    def connect(sock: socket.socket, address: Any) -> None:
        check(sock, address, "a connection")
        return originals["connect"](sock, address)

    def connect_ex(sock: socket.socket, address: Any) -> int:
        check(sock, address, "a connection")
        return int(originals["connect_ex"](sock, address))

    def sendto(sock: socket.socket, data: bytes, *args: Any) -> int:
        check(sock, args[-1], "a datagram")
        return int(originals["sendto"](sock, data, *args))

    replacements = {"connect": connect, "connect_ex": connect_ex, "sendto": sendto}
    for name, replacement in replacements.items():
        setattr(socket.socket, name, replacement)
    try:
        yield attempts
    finally:
        for name, original in originals.items():
            setattr(socket.socket, name, original)
