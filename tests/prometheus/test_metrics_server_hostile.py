"""The /metrics server under load and odd requests (issue 21): 200 simultaneous scrapes are all
answered (the listen backlog was socketserver's 5), and a body sent with a GET is consumed
instead of being parsed as a second request on a kept-alive connection.

Servers listen on 127.0.0.1, on a free port, and are stopped by each test. The client side uses
one thread and non-blocking sockets, however many connections it opens.
"""

from __future__ import annotations

import selectors
import socket
import time

import pytest

pytest.importorskip("prometheus_client")

from prometheus_client import CollectorRegistry, Counter

from ecoguard.export import prometheus as prom
from ecoguard.export.prometheus.server import _MetricsHTTPServer

SCRAPES = 200
DEADLINE_S = 60.0  # generous: a failure is a missing answer, not a slow one


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    Counter("hostile_probe", "a series so the body is not empty", registry=registry).inc()
    return registry


@pytest.fixture
def idle_server():
    """A bound, listening server whose accept loop has not started yet (start() starts it)."""
    httpd = _MetricsHTTPServer(("127.0.0.1", 0), _registry())
    holder: dict[str, prom.MetricsServer] = {}

    def start() -> prom.MetricsServer:
        holder["server"] = prom.MetricsServer(httpd, httpd.registry, None)
        return holder["server"]

    yield httpd, start
    if "server" in holder:
        holder["server"].stop()
    else:
        httpd.server_close()


def test_200_simultaneous_scrapes_are_all_answered(idle_server):
    httpd, start = idle_server
    port = httpd.server_address[1]
    selector = selectors.DefaultSelector()
    sockets: list[socket.socket] = []
    try:
        # Every connection arrives before the server accepts one: they wait in the listen
        # backlog. With a backlog of 5, the kernel dropped the rest of the handshakes.
        for _ in range(SCRAPES):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
            sockets.append(sock)
            selector.register(sock, selectors.EVENT_WRITE)
        established: set[socket.socket] = set()
        # Loopback handshakes take microseconds; a dropped SYN is retried only after 1 s.
        deadline = time.monotonic() + 0.5
        while len(established) < SCRAPES and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=0.05):
                sock = key.fileobj
                selector.unregister(sock)
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    established.add(sock)
        assert len(established) == SCRAPES, "connections dropped from the listen backlog"

        start()
        request = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        replies: dict[socket.socket, bytes] = {}
        for sock in sockets:
            sock.setblocking(True)
            sock.sendall(request)
            sock.setblocking(False)
            replies[sock] = b""
            selector.register(sock, selectors.EVENT_READ)
        open_count = len(sockets)
        deadline = time.monotonic() + DEADLINE_S
        while open_count and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=0.5):
                sock = key.fileobj
                chunk = sock.recv(65536)
                if chunk:
                    replies[sock] += chunk
                else:
                    selector.unregister(sock)
                    open_count -= 1
        answered = [r for r in replies.values() if r.startswith(b"HTTP/1.1 200 ")]
        assert len(answered) == SCRAPES
        assert all(b"hostile_probe_total 1.0" in r for r in answered)
    finally:
        selector.close()
        for sock in sockets:
            sock.close()


def _read_response(sock: socket.socket) -> tuple[int, bytes] | None:
    """One HTTP response (status, body) from a blocking socket; None at EOF."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length = next(
        int(line.split(b":", 1)[1]) for line in lines if line.lower().startswith(b"content-length")
    )
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    sock_buffer[sock] = rest[length:]
    return status, rest[:length]


sock_buffer: dict[socket.socket, bytes] = {}


def _no_more_data(sock: socket.socket, wait_s: float = 0.5) -> bool:
    sock.settimeout(wait_s)
    try:
        return sock.recv(65536) == b"" and not sock_buffer.get(sock)
    except TimeoutError:
        return not sock_buffer.get(sock)  # still open, nothing sent: no second response
    finally:
        sock.settimeout(10)


def test_a_get_body_is_consumed_not_parsed_as_a_second_request(idle_server):
    httpd, start = idle_server
    start()
    smuggled = b"GET /not-metrics HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", httpd.server_address[1]), timeout=10) as sock:
        sock.sendall(
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: "
            + str(len(smuggled)).encode()
            + b"\r\n\r\n"
            + smuggled
        )
        status, body = _read_response(sock)
        assert status == 200 and b"hostile_probe_total" in body
        # the body was read and dropped: no 404 for the "request" inside it
        assert _no_more_data(sock)
        # and the kept-alive connection still serves the next real request
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _read_response(sock)[0] == 200


@pytest.mark.parametrize(
    "headers",
    [
        b"Transfer-Encoding: chunked\r\n",
        b"Content-Length: 99999999\r\n",
        b"Content-Length: nonsense\r\n",
    ],
    ids=["chunked", "huge", "bad-length"],
)
def test_a_body_that_cannot_be_skipped_closes_the_connection(idle_server, headers):
    httpd, start = idle_server
    start()
    with socket.create_connection(("127.0.0.1", httpd.server_address[1]), timeout=10) as sock:
        sock.sendall(
            b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\nGET / HTTP/1.1\r\n\r\n"
        )
        reply = _read_response(sock)
        assert reply is not None and reply[0] in (200, 400)
        assert _no_more_data(sock)  # closed after the reply; nothing parsed from the body


def test_an_unresolvable_address_is_logged_as_the_address_not_the_port(caplog, clean_metrics):
    """install() with ECOGUARD_METRICS_ADDR naming no host: the app goes on without /metrics,
    and the log points at the address (it used to say 'choose another port')."""
    from ecoguard.config import Settings

    with caplog.at_level("ERROR", logger="ecoguard"):
        server = prom.start_metrics_server(
            Settings(metrics_port=0, metrics_addr="no-such-host.invalid"),
            registry=CollectorRegistry(auto_describe=False),
            aggregates=prom.GenerationAggregates(),
        )
    assert server is None
    assert "ECOGUARD_METRICS_ADDR" in caplog.text and "another port" not in caplog.text
