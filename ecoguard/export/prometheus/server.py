"""The in-process /metrics endpoint: a tiny ``http.server`` on a named daemon thread.

:func:`start_metrics_server` serves this process' metrics (127.0.0.1 by default). A port already
in use is logged clearly and the application goes on without metrics. One server per process;
a forked child forgets its parent's server (the fork hook ``metrics``) and may start its own.

Bounds (the in-process server and ``ecoguard exporter`` alike; RELIABILITY.md): at most
``max_connections`` connections are served at once (default :data:`DEFAULT_MAX_CONNECTIONS`, one
thread and one descriptor each); further ones wait in the kernel's listen backlog, costing this
process nothing, until one closes. A request must arrive whole, and its reply be sent, within
:data:`REQUEST_DEADLINE_S` of its first byte (of the connection, for the first request), however
slowly its bytes trickle in; a connection past that is cut. Between requests a kept-alive
connection may idle :data:`IDLE_TIMEOUT_S`. When every slot is taken, idle connections are
closed and requests older than :data:`PRESSURE_GRACE_S` are cut, so the queue moves and a real
scrape gets a slot.
"""

from __future__ import annotations

import errno
import http.server
import logging
import socket
import threading
import time
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ecoguard.config import (
    DEFAULT_METRICS_MAX_CONNECTIONS,
    METRICS_MAX_CONNECTIONS_RANGE,
    Settings,
)
from ecoguard.export.prometheus import multiprocess
from ecoguard.export.prometheus.aggregates import GenerationAggregates
from ecoguard.export.prometheus.collector import EcoguardCollector, MeterSource
from ecoguard.export.prometheus.text import render_text
from ecoguard.faults import record_fault
from ecoguard.forking import register_fork_hooks

_log = logging.getLogger("ecoguard.metrics")

# The port used when none is configured (the example in the docs and the sidecar's default).
DEFAULT_PORT = 9464

# See _MetricsHTTPServer.request_queue_size and _MetricsHandler._discard_request_body.
LISTEN_BACKLOG = 1024
MAX_DISCARDED_BODY_BYTES = 65536

# Connections served at once (one thread and one file descriptor each); more wait in the listen
# backlog. A fleet's Prometheus replicas keep one connection each; 64 leaves room for bursts.
# Settings.metrics_max_connections (ECOGUARD_METRICS_MAX_CONNECTIONS) sets it.
DEFAULT_MAX_CONNECTIONS = DEFAULT_METRICS_MAX_CONNECTIONS
# Seconds from a request's first byte (the connection's accept, for its first request) until
# its reply is sent. Prometheus' own scrape timeout defaults to 10 s; a scrape takes ms.
REQUEST_DEADLINE_S = 10.0
# At the cap (connections waiting in the backlog), a request still unanswered after this many
# seconds is cut without waiting for its deadline: a scrape is answered in milliseconds, so the
# slots go to the queue instead of to connections that trickle.
PRESSURE_GRACE_S = 0.5
# Seconds a kept-alive connection may wait for its next request (a scrape interval is 15-60 s;
# Prometheus reconnects when it finds the connection closed).
IDLE_TIMEOUT_S = 30.0
# How long the accept loop waits for a free slot before it looks at its deadlines again.
_SLOT_WAIT_S = 0.25
# Pause after accept() fails for want of descriptors or memory, so the loop does not spin on a
# listening socket that stays readable.
_ACCEPT_RETRY_S = 0.1
_RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class _MetricsHandler(http.server.BaseHTTPRequestHandler):
    """Answers GET and HEAD on /metrics (query string ignored); 404 elsewhere, 405 otherwise."""

    server: _MetricsHTTPServer
    server_version = "ecoguard-metrics"
    protocol_version = "HTTP/1.1"
    # The socket timeout: the longest one read may wait, so a kept-alive connection idles at
    # most this long. A request trickled in byte by byte is cut by the server's deadline.
    timeout = IDLE_TIMEOUT_S

    def handle(self) -> None:
        """``BaseHTTPRequestHandler.handle``, with each request's deadline started at its first
        byte and the connection marked idle while it waits for the next one."""
        self.close_connection = True
        self.handle_one_request()
        while not self.close_connection:
            self.server.note_idle(self.connection)
            if not self._next_request_arrives():
                return
            self.server.note_busy(self.connection)
            self.handle_one_request()

    def _next_request_arrives(self) -> bool:
        """Wait (at most the socket timeout) for the first byte of another request; False at
        EOF, timeout or a cut connection."""
        try:
            return bool(self.rfile.peek(1))
        except (OSError, ValueError):
            return False

    def _is_metrics_path(self) -> bool:
        return self.path.split("?", 1)[0] in ("/metrics", "/metrics/")

    def _reply(self, code: int, body: bytes, content_type: str, *, head: bool = False) -> None:
        self._discard_request_body()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if code == 405:
            self.send_header("Allow", "GET, HEAD")
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _discard_request_body(self) -> None:
        """Read and drop a body sent with the request (a GET may carry one), so it is not
        parsed as the next request on a kept-alive connection. A body that cannot be read
        cheaply (chunked, a bad or large length) closes the connection after the reply."""
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            return
        raw = self.headers.get("Content-Length")
        if raw is None:
            return
        try:
            length = int(raw)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_DISCARDED_BODY_BYTES:
            self.close_connection = True
            return
        while length > 0:
            chunk = self.rfile.read(min(length, 65536))
            if not chunk:
                self.close_connection = True
                return
            length -= len(chunk)

    def _serve(self, *, head: bool) -> None:
        if not self._is_metrics_path():
            self._reply(404, b"not found; metrics are at /metrics\n", "text/plain", head=head)
            return
        try:
            body = render_text(self.server.registry)
        except Exception as exc:
            record_fault("metrics.serve", exc)
            self._reply(500, b"ecoguard: metrics collection failed\n", "text/plain", head=head)
            return
        self._reply(200, body, CONTENT_TYPE_LATEST, head=head)

    def do_GET(self) -> None:
        self._serve(head=False)

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def _not_allowed(self) -> None:
        self._reply(405, b"method not allowed\n", "text/plain")

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("metrics %s - " + format, self.address_string(), *args)


class _MetricsHTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # The listen backlog: socketserver's default of 5 dropped most of 200 simultaneous scrapes
    # (a fleet's Prometheus replicas, a burst after a restart). The kernel caps it at
    # net.core.somaxconn (4096 on current Linux). Connections past max_connections wait here.
    request_queue_size = LISTEN_BACKLOG

    def __init__(
        self,
        address: tuple[str, int],
        registry: CollectorRegistry,
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        request_deadline_s: float | None = None,
    ) -> None:
        self.registry = registry
        self.max_connections = check_max_connections(max_connections, "max_connections")
        self.request_deadline_s = (
            REQUEST_DEADLINE_S if request_deadline_s is None else float(request_deadline_s)
        )
        self._slots = threading.BoundedSemaphore(self.max_connections)
        # Open client connections -> the monotonic time the request each is in started (None:
        # idle between requests; inf: already cut). stop() closes kept-alive ones: Prometheus reuses its
        # connection, and a handler thread would otherwise go on answering it after shutdown().
        self._connections: dict[socket.socket, float | None] = {}
        self._connections_lock = threading.Lock()
        self._full = False  # the accept loop found every slot taken since the last sweep
        self._counts = {"at_capacity": 0, "cut_at_deadline": 0, "idle_closed": 0, "peak_open": 0}
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _MetricsHandler)
        # Non-blocking accept: a connection the client dropped while we waited for a slot must
        # not block the loop (and shutdown()) in accept() until another one comes.
        self.socket.setblocking(False)

    def _handle_request_noblock(self) -> None:
        """socketserver's accept step behind the connection cap: at the cap the connection is
        left in the listen backlog (no thread, no descriptor here) until a slot frees."""
        if not self._slots.acquire(timeout=_SLOT_WAIT_S):
            self._full = True
            return
        try:
            request, client_address = self.get_request()
        except OSError as exc:
            self._slots.release()
            if exc.errno in _RESOURCE_ERRNOS:
                record_fault("metrics.accept", exc)
                time.sleep(_ACCEPT_RETRY_S)
            return
        try:
            self.process_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
            self.shutdown_request(request)
        except BaseException:
            self.shutdown_request(request)
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            # The first request's deadline runs from the accept: a connection that sends
            # nothing holds its slot no longer than one that sends slowly.
            self._connections[request] = time.monotonic()
            self._counts["peak_open"] = max(self._counts["peak_open"], len(self._connections))
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            tracked = self._connections.pop(request, False) is not False
        try:
            super().shutdown_request(request)
        finally:
            if tracked:
                self._slots.release()

    def note_busy(self, request: socket.socket) -> None:
        """A request's first byte arrived on ``request``: its deadline starts now."""
        with self._connections_lock:
            if request in self._connections:
                self._connections[request] = time.monotonic()

    def note_idle(self, request: socket.socket) -> None:
        """``request`` answered and waits for the next request (kept alive)."""
        with self._connections_lock:
            if request in self._connections:
                self._connections[request] = None

    def service_actions(self) -> None:
        """Once per turn of the accept loop (every poll interval at least): cut connections
        past their request deadline and, when every slot was taken, idle kept-alive ones and
        requests older than the pressure grace."""
        full, self._full = self._full, False
        allowed = self.request_deadline_s
        if full:
            allowed = min(allowed, PRESSURE_GRACE_S)
        cutoff = time.monotonic() - allowed
        with self._connections_lock:
            items = self._connections.items()
            late = [c for c, start in items if start is not None and start <= cutoff]
            idle = [c for c, start in items if start is None] if full else []
            for connection in late + idle:
                self._connections[connection] = float("inf")  # cut once, counted once
            self._counts["at_capacity"] += full
            self._counts["cut_at_deadline"] += len(late)
            self._counts["idle_closed"] += len(idle)
        if late and self._counts["cut_at_deadline"] == len(late):
            _log.warning(
                "ecoguard: /metrics cut a connection that had not sent its request and received "
                "its reply within %g s (a client stalled or trickling bytes%s); further ones are "
                "counted in connection_stats()",
                allowed,
                ", with every connection slot taken" if full else "",
            )
        for connection in late + idle:
            _cut(connection)

    def connection_stats(self) -> dict[str, int]:
        """Open connections, the cap, and what the bounds did so far (counts)."""
        with self._connections_lock:
            return {
                "open": len(self._connections),
                "max_connections": self.max_connections,
                **self._counts,
            }

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver prints a traceback to stderr; a scraper dropping its connection (or
        # stop() cutting it) is no news for the application's console.
        _log.debug("metrics connection from %s failed", client_address, exc_info=True)

    def close_connections(self) -> None:
        """Cut every open client connection; its handler thread then sees EOF and ends."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            _cut(connection)


def _cut(connection: socket.socket) -> None:
    """Shut ``connection`` down both ways: its handler's pending read or write ends at once."""
    try:
        connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed by the client


def check_max_connections(value: Any, name: str) -> int:
    """``value`` as a connection cap, or ValueError naming ``name`` and the accepted range."""
    low, high = METRICS_MAX_CONNECTIONS_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be a whole number from {low} to {high}, got {value!r}")
    return value


class MetricsServer:
    """A running /metrics endpoint. ``port`` is the bound port (useful when 0 was asked)."""

    def __init__(
        self,
        httpd: _MetricsHTTPServer,
        registry: CollectorRegistry,
        collector: EcoguardCollector | None,
    ) -> None:
        self._httpd = httpd
        self.registry = registry
        self.collector = collector
        self.addr: str = httpd.server_address[0]
        self.port: int = httpd.server_address[1]
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.5},
            name=f"ecoguard-metrics-{self.port}",
            daemon=True,
        )
        self._stopped = False
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/metrics"

    @property
    def running(self) -> bool:
        return not self._stopped and self._thread.is_alive()

    def stop(self) -> None:
        """Stop serving and close the socket. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._httpd.close_connections()
        self._thread.join(timeout=5)

    def connection_stats(self) -> dict[str, int]:
        """Open connections, the cap, and what the bounds did so far (see the module doc)."""
        return self._httpd.connection_stats()

    def __repr__(self) -> str:
        return f"MetricsServer({self.url!r}, running={self.running})"

    def _abandon_in_child(self) -> None:
        """In a forked child: the serving thread is the parent's, so only close this process'
        copies of the sockets (the port and the scrapers' connections stay the parent's: a
        shutdown() here would cut them for the parent too) and mark it stopped. The lock is
        not taken: a parent thread may have held it at the fork."""
        self._stopped = True
        for sock in [self._httpd.socket, *list(self._httpd._connections)]:
            try:
                sock.close()
            except OSError:
                pass


def serve_registry(
    addr: str,
    port: int,
    registry: CollectorRegistry,
    *,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    request_deadline_s: float | None = None,
) -> MetricsServer:
    """Serve ``registry`` on ``addr:port`` (0: any free port), at most ``max_connections`` at
    once, each request within ``request_deadline_s`` (default :data:`REQUEST_DEADLINE_S`).
    Raises OSError if it cannot bind."""
    httpd = _MetricsHTTPServer(
        (addr, port),
        registry,
        max_connections=max_connections,
        request_deadline_s=request_deadline_s,
    )
    return MetricsServer(httpd, registry, None)


_server_lock = threading.Lock()
# One starter at a time (see start_metrics_server); separate from _server_lock, which a stop
# inside a start takes again.
_start_lock = threading.Lock()
_server: MetricsServer | None = None
_aggregates: GenerationAggregates | None = None


def _register_fork_hook() -> None:
    """Once per process, when metrics start (never at import)."""
    register_fork_hooks("metrics", after_in_child=_after_fork_in_child)


def _after_fork_in_child() -> None:
    """A forked child of a process with metrics: fresh locks (one held by a parent thread at
    the fork would deadlock the child's first record or install()), the parent's server
    forgotten and its listening socket closed here, so install(metrics_port=...) in the child
    starts its own and uninstall() never waits for a thread the child does not have."""
    global _server_lock, _start_lock, _server
    _server_lock = threading.Lock()
    _start_lock = threading.Lock()
    multiprocess.relock_after_fork()
    server, _server = _server, None
    if server is not None:
        server._abandon_in_child()
    if _aggregates is not None:
        _aggregates.relock()


def process_aggregates() -> GenerationAggregates:
    """The process-wide aggregates behind the in-process /metrics, subscribed on first use."""
    global _aggregates
    _register_fork_hook()
    with _server_lock:
        if _aggregates is None:
            _aggregates = GenerationAggregates()
        _aggregates.subscribe()
        return _aggregates


def start_metrics_server(
    settings: Settings,
    *,
    meter: MeterSource = None,
    registry: CollectorRegistry | None = None,
    aggregates: GenerationAggregates | None = None,
) -> MetricsServer | None:
    """Serve this process' ecoguard metrics on ``settings.metrics_addr:settings.metrics_port``.

    ``metrics_port`` 0 binds any free port (read it from ``.port``); None means
    :data:`DEFAULT_PORT`. One server per
    process: calling again with the same address updates the settings and meter and returns the
    running server; another address replaces it. ``meter`` defaults to the running meter at each
    scrape. ``registry``/``aggregates`` are injected by tests (fresh objects each).

    A port already in use (or any other bind failure) is logged as an error naming the address
    and the way out, and returns None: metrics are an extra, never a reason for the app to stop.
    """
    _register_fork_hook()
    # One starter at a time: two concurrent callers must not both bind a server (one leaking).
    with _start_lock:
        return _start_metrics_server(settings, meter, registry, aggregates)


def _start_metrics_server(
    settings: Settings,
    meter: MeterSource,
    registry: CollectorRegistry | None,
    aggregates: GenerationAggregates | None,
) -> MetricsServer | None:
    global _server
    port = DEFAULT_PORT if settings.metrics_port is None else settings.metrics_port
    addr = settings.metrics_addr or "127.0.0.1"
    with _server_lock:
        current = _server
    if current is not None and current.running and current.collector is not None:
        if current.addr == addr and (port == 0 or current.port == port):
            current.collector.set_settings(settings)
            if meter is not None:
                current.collector.set_meter(meter)
            return current
        stop_metrics_server()
    if aggregates is None:
        aggregates = process_aggregates()
    else:
        aggregates.subscribe()
    collector = EcoguardCollector(aggregates=aggregates, meter=meter, settings=settings)
    registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        httpd = _MetricsHTTPServer(
            (addr, port), registry, max_connections=settings.metrics_max_connections
        )
    except (OSError, UnicodeError, ValueError, TypeError) as exc:
        registry.unregister(collector)
        _log_bind_failure(addr, port, exc)
        return None
    server = MetricsServer(httpd, registry, collector)
    with _server_lock:
        _server = server
    _log.info("ecoguard: serving metrics at %s", server.url)
    return server


def _log_bind_failure(addr: str, port: int, exc: Exception) -> None:
    """An error naming the address and the way out; the application goes on without metrics."""
    if isinstance(exc, socket.gaierror) or not isinstance(exc, OSError):
        # The address itself is the problem (a name that does not resolve): not the port.
        way_out = "Set ECOGUARD_METRICS_ADDR to an IP address such as 127.0.0.1"
    else:
        way_out = (
            "Choose another port with ECOGUARD_METRICS_PORT (0 picks a free one) or "
            "install(metrics_port=...)"
        )
    _log.error(
        "ecoguard: cannot serve metrics on %s:%d (%s); the application goes on without "
        "/metrics. %s.",
        addr,
        port,
        getattr(exc, "strerror", None) or exc,
        way_out,
    )
    record_fault("metrics.bind", exc)


def get_metrics_server() -> MetricsServer | None:
    with _server_lock:
        return _server


def stop_metrics_server() -> None:
    """Stop the process' metrics server, if any. Idempotent. Aggregates keep counting (a
    restarted server continues the same counters, as Prometheus expects)."""
    global _server
    with _server_lock:
        server, _server = _server, None
    if server is not None:
        server.stop()
