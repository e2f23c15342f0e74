"""The link to the site server, broken on cue by a loopback proxy the test controls (proxy.py), between a
real daemon (the tiny engine) with --remote and a real HTTP peer (peer.py): each way the link fails ends
in a local plan within the deadline that says why, the daemon rests the remote, and plans are served
remotely again once the link heals. test_vllm.py runs the same checks against a real vLLM."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import tiny_fixture
from tests.server.conftest import Daemon, short_dir

from .link_checks import check_a_broken_link
from .peer import Peer
from .proxy import Proxy

tiny_engine_dir = tiny_fixture("engine_dir")


@pytest.fixture(scope="module")
def link():
    with Peer() as peer, Proxy(peer.port) as proxy:
        yield peer, proxy


@pytest.fixture(scope="module")
def daemon(tiny_engine_dir, link):
    _, proxy = link
    where = short_dir()
    d = Daemon(tiny_engine_dir, where / "planner.sock", "--remote", proxy.url, "--remote-first-token-share", "0.1",
               "--remote-backoff-s", "3")
    try:
        yield d.wait_ready()
    finally:
        d.stop()
        shutil.rmtree(where, ignore_errors=True)


@pytest.mark.parametrize("mode", ["stall", "drop", "refuse"])
@pytest.mark.full  # a daemon process (the fast tier runs the routes in-process)
def test_a_broken_link_ends_in_a_local_plan_and_heals(daemon, link, mode):
    print(check_a_broken_link(daemon, link[1], mode, deadline_ms=10_000, heal_within_s=30, max_tokens=12))


def test_the_proxy_breaks_and_heals_what_it_says():
    """The proxy itself, without the daemon: refused, reset, held, and passing again on the same port."""
    import http.client

    def get(url_port: int, timeout_s: float = 2.0) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", url_port, timeout=timeout_s)
        try:
            conn.request("GET", "/v1/models")
            return conn.getresponse().status
        finally:
            conn.close()

    with Peer() as peer, Proxy(peer.port) as proxy:
        assert get(proxy.port) == 200
        proxy.set("refuse")
        with pytest.raises(ConnectionRefusedError):
            get(proxy.port)
        proxy.set("drop")
        with pytest.raises((ConnectionResetError, http.client.RemoteDisconnected, BrokenPipeError)):
            get(proxy.port)
        proxy.set("stall")
        with pytest.raises(TimeoutError):
            get(proxy.port, timeout_s=0.5)
        proxy.heal()
        assert get(proxy.port) == 200
