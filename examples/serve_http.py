"""A small text-generation HTTP service, guarded by ecoguard with one import.

    ECOGUARD_BACKEND=simulated python examples/serve_http.py --port 8000
    curl -s localhost:8000/generate -d '{"prompt": "What is the capital of France?"}'
    curl -s localhost:9464/metrics | grep ecoguard_generation

``import ecoguard.auto`` turns the guard on from ECOGUARD_* variables: every generate call is
judged (alerts on stderr) and measured (NVML, or ECOGUARD_BACKEND=simulated without a GPU), and
/metrics is served on ECOGUARD_METRICS_PORT (9464 here unless set; 0 picks a free port).
Requests are served on threads, one generate call each: the guard notices the batch-size-one
pattern, and ECOGUARD_BATCHING=1 merges concurrent requests into one batched call.

``--self-test`` starts the service on a free port, sends a few requests, reads /metrics and
prints one JSON line (the example's test uses it). ``--tiny`` uses a tiny random model.
"""

from __future__ import annotations

import os

os.environ.setdefault("ECOGUARD_METRICS_PORT", "9464")  # before the guard reads the environment

import argparse
import json
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import _model  # examples/_model.py: SmolLM2 offline, or a tiny model with --tiny

import ecoguard.auto  # the one line: guard + meter + /metrics, from ECOGUARD_* variables

MAX_NEW_TOKENS_LIMIT = 256


class GenerateHandler(BaseHTTPRequestHandler):
    """POST /generate {"prompt": str, "max_new_tokens": int} -> {"text": str}; GET /healthz."""

    model = None  # set by serve()
    tokenizer = None

    def _reply(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._reply(200, {"ok": True})
        else:
            self._reply(404, {"error": "try POST /generate or GET /healthz"})

    def do_POST(self) -> None:
        if self.path != "/generate":
            self._reply(404, {"error": "try POST /generate"})
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            request = json.loads(self.rfile.read(length) or b"{}")
            prompt = request["prompt"]
            max_new_tokens = int(request.get("max_new_tokens", 32))
            if not isinstance(prompt, str) or not 1 <= max_new_tokens <= MAX_NEW_TOKENS_LIMIT:
                raise ValueError
        except (ValueError, KeyError, TypeError):
            self._reply(
                400,
                {"error": f'send {{"prompt": "...", "max_new_tokens": 1..{MAX_NEW_TOKENS_LIMIT}}}'},
            )
            return
        # One request, one generate call: ecoguard measures it and counts its tokens.
        [text] = _model.generate(self.model, self.tokenizer, [prompt], max_new_tokens)
        self._reply(200, {"text": text})

    def log_message(self, format: str, *args: object) -> None:  # keep the demo output readable
        pass


def serve(port: int, tiny: bool) -> ThreadingHTTPServer:
    GenerateHandler.model, GenerateHandler.tokenizer = _model.load(tiny)
    server = ThreadingHTTPServer(("127.0.0.1", port), GenerateHandler)
    threading.Thread(target=server.serve_forever, daemon=True, name="http").start()
    return server


def metrics_url() -> str | None:
    from ecoguard.export.prometheus import get_metrics_server

    metrics = get_metrics_server()
    return metrics.url if metrics is not None else None


def self_test(server: ThreadingHTTPServer, requests: int, max_new_tokens: int) -> dict:
    """Send ``requests`` prompts (four at a time), then read /metrics as Prometheus would."""
    base = f"http://127.0.0.1:{server.server_address[1]}"

    def ask(i: int) -> str:
        body = json.dumps({"prompt": f"Say hello number {i}.", "max_new_tokens": max_new_tokens})
        with urllib.request.urlopen(f"{base}/generate", body.encode(), timeout=120) as response:
            return json.loads(response.read())["text"]

    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(ask, range(requests)))
    url = metrics_url()
    with urllib.request.urlopen(url, timeout=10) as response:
        metrics = response.read().decode("utf-8")
    tokens = sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("ecoguard_generation_tokens_total{")
    )
    return {"answers": len(answers), "metrics_url": url, "tokens_total": tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--tiny", action="store_true", help="a tiny random model (seconds)")
    parser.add_argument("--self-test", action="store_true", help="serve, ask, check, exit")
    parser.add_argument("--requests", type=int, default=8, help="requests in --self-test")
    parser.add_argument("--max-new-tokens", type=int, default=16, help="per request in --self-test")
    args = parser.parse_args()
    server = serve(0 if args.self_test else args.port, args.tiny)
    if args.self_test:
        try:
            print(json.dumps(self_test(server, args.requests, args.max_new_tokens)))
        finally:
            server.shutdown()
            ecoguard.uninstall()  # stops the meter, writes the ledger, closes /metrics
        return
    if _model.is_random(GenerateHandler.tokenizer):
        print("model: a tiny one with random weights (--tiny or EXAMPLE_TINY=1): answers are noise")
    print(f"serving http://127.0.0.1:{args.port}/generate; metrics at {metrics_url()}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()


if __name__ == "__main__":
    main()
