"""The unit tests reach nothing but loopback: a test whose code tries another address is refused at once, and fails
even when the code under test caught the refusal (tests/support/no_network.py, applied by tests/conftest.py)."""
from __future__ import annotations

import socket
import threading

import pytest

from tests.support.no_network import NetworkRefused, loopback, refuse_non_loopback


def test_a_connection_to_a_lan_address_is_refused_before_it_leaves_and_loopback_still_works() -> None:
    with refuse_non_loopback() as attempts:
        with socket.socket() as lan, pytest.raises(NetworkRefused):
            lan.connect(("10.0.0.1", 22))
        with socket.socket(socket.AF_INET6) as lan6, pytest.raises(NetworkRefused):
            lan6.connect_ex(("fd00::1", 22, 0, 0))
    assert attempts == ["a connection to ('10.0.0.1', 22)", "a connection to ('fd00::1', 22, 0, 0)"]

    with refuse_non_loopback() as attempts, socket.create_server(("127.0.0.1", 0)) as server:
        accepted = threading.Thread(target=server.accept, daemon=True)
        accepted.start()
        with socket.create_connection(server.getsockname(), timeout=5):
            pass
        accepted.join(5)
    assert attempts == []


def test_what_counts_as_loopback() -> None:
    assert loopback(("127.0.0.1", 1)) and loopback(("127.8.9.10", 1)) and loopback(("::1", 1, 0, 0))
    assert loopback(("localhost", 1))
    assert not loopback(("10.0.0.1", 22)) and not loopback(("192.168.1.1", 22)) and not loopback(("fe80::1%eth0", 22))
    # A name is not looked up (that would itself be a request on the network): it counts as leaving.
    assert not loopback(("deb.debian.org", 80))


def test_a_test_that_swallows_the_refusal_still_fails(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("from tests.conftest import no_network  # noqa: F401\n")
    pytester.makepyfile(test_quiet="""
        import socket

        def test_tries_a_lan_address_quietly():
            try:
                socket.create_connection(("10.0.0.1", 22), timeout=1)
            except OSError:
                pass  # the code under test treats it as an unreachable node
        """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*the test tried to reach the network*10.0.0.1*"])
