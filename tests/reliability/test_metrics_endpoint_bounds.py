"""/metrics under connections that hold it (issue 29): a connection cap and a whole-request
deadline, for the in-process server and ``ecoguard exporter`` alike (one server class).

Before: no cap (500 slow connections held one thread each past 50 s; at 256 descriptors the
exporter spun and real scrapes timed out) and a 30 s timeout that restarted with every byte.
Servers listen on 127.0.0.1 on a free port, with a short deadline so each test takes seconds;
every wait has a generous bound, so a failure is a missing behaviour, never a slow machine.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.request

import pytest

pytest.importorskip("prometheus_client")

from prometheus_client import CollectorRegistry, Counter

import ecoguard
from ecoguard.cli import main
from ecoguard.config import Settings
from ecoguard.errors import UsageError
from ecoguard.export import prometheus as prom

DEADLINE_S = 0.5  # the servers' request deadline in these tests (10 s in production)


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    Counter("bounds_probe", "a series so the body is not empty", registry=registry).inc()
    return registry


@pytest.fixture
def serve():
    servers: list[prom.MetricsServer] = []

    def start(max_connections: int) -> prom.MetricsServer:
        server = prom.serve_registry(
            "127.0.0.1",
            0,
            _registry(),
            max_connections=max_connections,
            request_deadline_s=DEADLINE_S,
        )
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.settimeout(0.1)
    return sock


def _closed_by_server(sock: socket.socket) -> bool:
    """True when the server has closed ``sock`` (EOF or reset); False while it is open."""
    try:
        return sock.recv(65536) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def _scrape(url: str, timeout_s: float = 60.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        assert response.status == 200
        return response.read()


def test_a_request_trickled_byte_by_byte_is_cut_at_its_deadline(serve):
    """A byte every 0.1 s used to keep the connection (and its thread) forever: each byte
    restarted the 30 s timeout. The deadline runs from the first byte, whatever comes after."""
    server = serve(max_connections=8)
    sock = _connect(server.port)
    trickle = b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"a" * 1000
    bound = time.monotonic() + 20 * DEADLINE_S + 10
    closed = False
    try:
        for byte in trickle:
            try:
                sock.send(bytes([byte]))
            except OSError:
                closed = True
                break
            if _closed_by_server(sock):
                closed = True
                break
            assert time.monotonic() < bound, "a trickled request kept its connection"
    finally:
        sock.close()
    assert closed
    assert server.connection_stats()["cut_at_deadline"] == 1
    assert b"bounds_probe_total 1.0" in _scrape(server.url)


def test_a_connection_that_sends_nothing_is_cut_at_the_same_deadline(serve):
    server = serve(max_connections=8)
    sock = _connect(server.port)
    bound = time.monotonic() + 20 * DEADLINE_S + 10
    try:
        while not _closed_by_server(sock):
            assert time.monotonic() < bound, "a silent connection kept its slot"
    finally:
        sock.close()


def test_connections_past_the_cap_wait_unserved_and_a_real_scrape_still_answers(serve):
    """40 stalled requests against a cap of 4: never more than 4 served at once (threads and
    descriptors bounded), the stalled ones cut at the deadline, and a real scrape, queued
    behind all of them, answered."""
    threads_before = threading.active_count()
    server = serve(max_connections=4)
    stalled = []
    try:
        for _ in range(40):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # headers never end
            stalled.append(sock)
        assert server.connection_stats()["open"] <= 4
        # the serving thread, and one per served connection at most
        assert threading.active_count() - threads_before <= 1 + 4
        assert b"bounds_probe_total 1.0" in _scrape(server.url)
        stats = server.connection_stats()
        assert stats["peak_open"] <= 4
        assert stats["cut_at_deadline"] >= 4
        assert stats["at_capacity"] >= 1
    finally:
        for sock in stalled:
            sock.close()


def test_idle_kept_alive_connections_give_their_slot_to_a_new_scrape(serve):
    """At the cap, connections idle between requests (kept alive after a scrape) are closed
    first, so a new scraper does not wait out their idle timeout (30 s)."""
    server = serve(max_connections=2)
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"  # HTTP/1.1: kept alive
    kept = []
    try:
        for _ in range(2):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            sock.sendall(request)
            reply = b""
            while b"bounds_probe_total" not in reply:
                chunk = sock.recv(65536)
                assert chunk, "closed before its reply"
                reply += chunk
            kept.append(sock)
        assert server.connection_stats()["open"] == 2
        assert b"bounds_probe_total 1.0" in _scrape(server.url, timeout_s=20)
        assert server.connection_stats()["idle_closed"] >= 1
    finally:
        for sock in kept:
            sock.close()


def test_the_in_process_server_takes_its_cap_from_settings():
    settings = Settings(backend="null", ledger_path=None, metrics_port=0)
    server = prom.start_metrics_server(settings.with_(metrics_max_connections=3))
    assert server is not None
    assert server.connection_stats()["max_connections"] == 3
    assert Settings.from_env({"ECOGUARD_METRICS_MAX_CONNECTIONS": "7"}).metrics_max_connections == 7
    for bad in ("0", "5000", "many"):
        with pytest.raises(UsageError, match="ECOGUARD_METRICS_MAX_CONNECTIONS"):
            Settings.from_env({"ECOGUARD_METRICS_MAX_CONNECTIONS": bad})


# ------------------------------------------------------------------ --addr 0


@pytest.mark.parametrize("addr", ["0", "127.1", "0x7f.0.0.1", "010.0.0.1"])
def test_a_shorthand_ipv4_address_is_refused_naming_the_full_forms(addr, capsys):
    """``--addr 0`` used to bind every interface quietly (the system reads 0 as 0.0.0.0)."""
    assert main(["exporter", "--once", "--backend", "null", "--addr", addr]) == 2
    err = capsys.readouterr().err
    assert repr(addr) in err and "0.0.0.0" in err and "::" in err and "127.0.0.1" in err
    with pytest.raises(UsageError, match="shorthand"):
        ecoguard.install(backend="null", ledger_path="off", metrics_addr=addr)
    with pytest.raises(UsageError, match="ECOGUARD_METRICS_ADDR"):
        Settings.from_env({"ECOGUARD_METRICS_ADDR": addr})


@pytest.mark.parametrize("addr", ["0.0.0.0", "::", "127.0.0.1", "::1", "localhost"])
def test_full_forms_are_accepted(addr):
    assert Settings(metrics_addr=addr).validate().metrics_addr == addr


def test_the_exporter_refuses_a_cap_out_of_range(capsys):
    assert main(["exporter", "--once", "--backend", "null", "--max-connections", "0"]) == 2
    assert "1 to 4096" in capsys.readouterr().err


def test_the_exporter_passes_its_cap_to_the_server(monkeypatch, capsys):
    seen = {}

    def serve_registry(addr, port, registry, **kwargs):
        seen.update(kwargs)
        raise OSError(98, "stop here: the test does not serve")

    monkeypatch.setattr(prom, "serve_registry", serve_registry)
    assert main(["exporter", "--backend", "null", "--port", "0", "--max-connections", "5"]) == 1
    assert seen == {"max_connections": 5}
