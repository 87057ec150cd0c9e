"""The WSGI app the gunicorn example serves: POST /generate, GET /healthz.

Plain WSGI (no framework) so it runs anywhere; the guard is turned on by the ``post_fork`` hook in
gunicorn.conf.py, so this file holds no ecoguard code at all: that is the point.
"""

from __future__ import annotations

import json
import os
import sys

# examples/_model.py holds the shared model loader (SmolLM2 offline, or tiny with EXAMPLE_TINY=1).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import _model

MODEL, TOKENIZER = _model.load()  # once per worker, at import


def _json(start_response, status: str, body: dict) -> list[bytes]:
    data = json.dumps(body).encode("utf-8")
    start_response(
        status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
    )
    return [data]


def application(environ, start_response):
    path, method = environ.get("PATH_INFO", "/"), environ.get("REQUEST_METHOD", "GET")
    if path == "/healthz" and method == "GET":
        return _json(start_response, "200 OK", {"ok": True, "pid": os.getpid()})
    if path != "/generate" or method != "POST":
        return _json(start_response, "404 Not Found", {"error": "try POST /generate"})
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        request = json.loads(environ["wsgi.input"].read(length) or b"{}")
        prompt, max_new_tokens = request["prompt"], int(request.get("max_new_tokens", 32))
        if not isinstance(prompt, str) or not 1 <= max_new_tokens <= 256:
            raise ValueError
    except (ValueError, KeyError, TypeError):
        return _json(
            start_response,
            "400 Bad Request",
            {"error": 'send {"prompt": "...", "max_new_tokens": 1..256}'},
        )
    [text] = _model.generate(MODEL, TOKENIZER, [prompt], max_new_tokens)
    return _json(start_response, "200 OK", {"text": text, "pid": os.getpid()})
