"""Security: what the metrics endpoint accepts, what leaks, what the audit touches, how much the
advisor's parser can be made to work, the MCP tools' input checks, and known vulnerabilities.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import warnings
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from ecoguard.config import Settings
from ecoguard.errors import UsageError

# ------------------------------------------------------------------ the metrics endpoint


@pytest.fixture
def metrics_server():
    from ecoguard.export.prometheus import start_metrics_server, stop_metrics_server

    server = start_metrics_server(Settings(metrics_port=0, ledger_path=None))
    assert server is not None
    yield server
    stop_metrics_server()


@pytest.fixture(scope="module")
def shared_server():
    """One server for the many request cases: the same handler as ``start_metrics_server``
    behind ``serve_registry`` (the process-wide server is reset around every test)."""
    from prometheus_client import CollectorRegistry

    from ecoguard.export.prometheus import EcoguardCollector, GenerationAggregates, serve_registry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        EcoguardCollector(aggregates=GenerationAggregates(), meter=None, settings=Settings())
    )
    server = serve_registry("127.0.0.1", 0, registry)
    yield server
    server.stop()


def raw_request(port: int, payload: bytes, *, timeout_s: float = 5.0) -> bytes:
    """Send raw bytes, return everything the server answers before closing."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def status_of(answer: bytes) -> int:
    """The status code; for a request it cannot even parse as HTTP/1.x, http.server answers
    with a bare HTML error page (HTTP/0.9 style), whose code is in the text."""
    if answer.startswith(b"HTTP/"):
        return int(answer.split(b"\r\n", 1)[0].split()[1])
    import re

    found = re.search(rb"Error code: (\d{3})", answer)
    return int(found.group(1)) if found else 0


def get_metrics(port: int) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        return reply.status, reply.read().decode()


def test_metrics_server_binds_loopback_by_default(metrics_server):
    assert Settings().metrics_addr == "127.0.0.1"
    assert Settings.from_env(environ={}).metrics_addr == "127.0.0.1"
    assert metrics_server.addr == "127.0.0.1"
    # Nothing answers on this host's other addresses.
    for address in _non_loopback_addresses():
        with pytest.raises(OSError):
            socket.create_connection((address, metrics_server.port), timeout=1).close()


def _non_loopback_addresses() -> list[str]:
    found = set()
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            found.add(info[4][0])
    except OSError:
        pass
    try:  # the address of the default route's interface (no packet is sent)
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        probe.connect(("192.0.2.1", 9))
        found.add(probe.getsockname()[0])
        probe.close()
    except OSError:
        pass
    return sorted(a for a in found if not a.startswith("127."))


def test_install_with_a_port_binds_loopback_too():
    from ecoguard.export.prometheus import get_metrics_server
    from ecoguard.guard.install import install

    install(metrics_port=0, measure=False)
    server = get_metrics_server()
    assert server is not None and server.addr == "127.0.0.1"


@pytest.mark.parametrize(
    ("request_bytes", "expected"),
    [
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 200),
        (b"HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 200),
        (b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", 405),
        (b"PUT /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 405),
        (b"DELETE /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 405),
        (b"PATCH /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 405),
        (b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 405),
        (b"TRACE /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 501),
        (b"CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: x\r\n\r\n", 501),
        (b"BREW /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 501),
        (b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404),
        (b"GET /admin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404),
        (b"GET /metrics/../../etc/passwd HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404),
        # http.server folds leading slashes (CVE-2021-28861 hardening): still /metrics.
        (b"GET //metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 200),
        (b"GET /metricsX HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404),
        (b"GET http://evil.example/metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404),
        (b"GET /metrics HTTP/9.9\r\nHost: x\r\n\r\n", 505),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64, 400),  # a TLS hello
        (b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", 431),
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414),
        (
            b"GET /metrics HTTP/1.1\r\n"
            + b"".join(b"X-%d: y\r\n" % i for i in range(150))
            + b"\r\n",
            431,
        ),
    ],
    ids=lambda value: value if isinstance(value, int) else value[:24].decode("latin-1"),
)
def test_metrics_server_answers_only_get_and_head_on_metrics(
    shared_server, request_bytes, expected
):
    metrics_server = shared_server
    answer = raw_request(metrics_server.port, request_bytes)
    assert status_of(answer) == expected, answer[:200]
    if expected == 200 and request_bytes.startswith(b"HEAD"):
        assert answer.endswith(b"\r\n\r\n")  # HEAD: headers only
    if expected != 200:
        assert b"ecoguard_" not in answer  # no metrics served outside GET/HEAD /metrics
    assert get_metrics(metrics_server.port)[0] == 200  # and the server is still fine


def test_idle_connections_do_not_block_scrapes(shared_server):
    metrics_server = shared_server
    """Connections that open and say nothing (slowloris-style) do not stop a scrape."""
    idle = [socket.create_connection(("127.0.0.1", metrics_server.port)) for _ in range(32)]
    try:
        started = time.monotonic()
        assert get_metrics(metrics_server.port)[0] == 200
        assert time.monotonic() - started < 2.0
    finally:
        for sock in idle:
            sock.close()


def test_idle_connections_are_closed_after_the_read_timeout(shared_server, monkeypatch):
    """A connection that never sends a request is dropped, freeing its thread."""
    from ecoguard.export.prometheus import server as prom

    monkeypatch.setattr(prom._MetricsHandler, "timeout", 0.3)
    with socket.create_connection(("127.0.0.1", shared_server.port), timeout=5) as sock:
        started = time.monotonic()
        assert sock.recv(1) == b""  # the server closed it
        assert time.monotonic() - started < 4.0


# ------------------------------------------------------------------ no prompt text anywhere

CANARY_IDS = [211, 223, 237, 241, 251]
CANARY_TEXT = "CANARYxQ7zK"


def _canary_forms() -> list[str]:
    ids = CANARY_IDS
    forms = [CANARY_TEXT, CANARY_TEXT.lower()]
    for k in range(3, len(ids) + 1):
        for start in range(len(ids) - k + 1):
            window = ids[start : start + k]
            forms += [
                ", ".join(map(str, window)),
                ",".join(map(str, window)),
                " ".join(map(str, window)),
            ]
    forms += [" ".join(f"w{i}" for i in ids[:3])]
    return forms


def _tiny_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, 256)}}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<pad>",
    )


class _Everything(logging.Handler):
    """Every log record of every logger, formatted with its traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def test_no_prompt_text_in_logs_metrics_ledger_records_or_findings(
    tiny_llama_dir, tmp_path, monkeypatch
):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from ecoguard import events
    from ecoguard.export.ledger import get_ledger, read_rows
    from ecoguard.export.prometheus import get_metrics_server
    from ecoguard.guard import wrappers
    from ecoguard.guard.install import install
    from ecoguard.rules import BS1_SUSTAINED_CALLS

    monkeypatch.setattr(wrappers, "is_interactive", lambda: False)  # let batch-size-one fire
    handler = _Everything()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    seen_records: list[Any] = []
    seen_findings: list[Any] = []
    unsubscribe = [
        events.records.subscribe(seen_records.append),
        events.findings.subscribe(seen_findings.append),
    ]
    ledger_path = tmp_path / "ledger.sqlite"
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            install(
                mode="warn",
                measure=True,
                backend="simulated",
                ledger_path=ledger_path,
                metrics_port=0,
                rules="batch-size-one:warn",
            )
            model = transformers.AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
            tokenizer = _tiny_tokenizer()
            prompt = " ".join(f"w{i}" for i in CANARY_IDS)
            ids = tokenizer(prompt, return_tensors="pt").input_ids
            assert ids[0].tolist() == CANARY_IDS
            for _ in range(BS1_SUSTAINED_CALLS + 1):  # a batch-size-one streak: a finding
                model.generate(input_ids=ids, max_new_tokens=2, do_sample=False)
            with pytest.raises(ValueError):  # the user's own error names the canary...
                model.generate(input_ids=ids, max_new_tokens=2, **{CANARY_TEXT: 1})
            with pytest.raises(IndexError):
                model.generate(input_ids=torch.tensor([[*CANARY_IDS, 99_999]]), max_new_tokens=1)
            ledger = get_ledger()
            assert ledger is not None and ledger.flush(5.0)
            server = get_metrics_server()
            assert server is not None
            scrape = get_metrics(server.port)[1]
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        for undo in unsubscribe:
            undo()
    assert seen_findings, "no finding was raised: the finding path was not exercised"
    assert len(seen_records) >= BS1_SUSTAINED_CALLS + 3
    haystacks = {
        "log": "\n".join(handler.lines),
        "warnings": "\n".join(str(w.message) for w in caught),
        "metrics": scrape,
        "ledger": json.dumps(read_rows(ledger_path)),
        "records": "\n".join(repr(r) for r in seen_records),
        "findings": "\n".join(repr(f) for f in seen_findings),
    }
    assert "ecoguard_generation_tokens_total" in haystacks["metrics"]
    for where, text in haystacks.items():
        for form in _canary_forms():
            assert form not in text, f"prompt data {form!r} found in {where}"


# ------------------------------------------------------------------ audit touches nothing

_MARKER_CODE = "open({marker!r}, 'w').write('ran')\n"


def _hostile_tree(root: Path, marker: Path, outside: Path) -> Path:
    tree = root / "project"
    tree.mkdir()
    trap = (
        "from transformers import AutoModelForCausalLM, BitsAndBytesConfig\n"
        "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-2-7b-hf', "
        "quantization_config=BitsAndBytesConfig(load_in_8bit=True))\n"
    )
    run_me = _MARKER_CODE.format(marker=str(marker))
    (tree / "serve.py").write_text(
        "import os\nimport ecoguard_reliability_canary\n"
        + run_me
        + "os.system('touch "
        + str(marker)
        + "')\n"
        + trap
        + "if __name__ == '__main__':\n    "
        + run_me
    )
    (tree / "ecoguard_reliability_canary.py").write_text(run_me)
    (tree / "conftest.py").write_text(run_me)
    (tree / "setup.py").write_text(run_me)
    (tree / "sitecustomize.py").write_text(run_me)
    (tree / "__init__.py").write_text(run_me)
    pkg = tree / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(run_me)
    (pkg / "__main__.py").write_text(run_me)
    notebook = {
        "cells": [
            {
                "cell_type": "code",
                "metadata": {},
                "outputs": [],
                "execution_count": None,
                "source": [run_me, trap],
            }
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (tree / "nb.ipynb").write_text(json.dumps(notebook))
    # Links out of the tree: a directory and a file holding traps the audit must not report.
    outside.mkdir()
    (outside / "secret_trap.py").write_text(trap + run_me)
    (tree / "linked_dir").symlink_to(outside, target_is_directory=True)
    (tree / "linked_file.py").symlink_to(outside / "secret_trap.py")
    (tree / "loop").symlink_to(tree, target_is_directory=True)
    return tree


def test_audit_never_runs_imports_or_leaves_the_tree(tmp_path):
    from ecoguard.audit import audit_paths

    marker = tmp_path / "MARKER"
    outside = tmp_path / "outside"
    tree = _hostile_tree(tmp_path, marker, outside)
    opened: list[str] = []
    forbidden: list[tuple[str, str]] = []
    watching = threading.Event()
    outside_text = str(outside)

    def hook(event: str, args: tuple) -> None:
        if not watching.is_set():
            return
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            opened.append(os.fsdecode(args[0]))
        elif event in (
            "exec",
            "import",
            "subprocess.Popen",
            "os.system",
            "os.exec",
            "os.posix_spawn",
            "ctypes.dlopen",
        ):
            detail = args[0] if args else ""
            if event == "exec":
                detail = getattr(detail, "co_filename", "")
                if str(tree) in detail or outside_text in detail:
                    forbidden.append((event, detail))
            elif event == "import":
                if "ecoguard_reliability_canary" in str(detail) or str(tree) in str(args):
                    forbidden.append((event, str(detail)))
            else:
                forbidden.append((event, str(detail)))

    sys.addaudithook(hook)  # audit hooks cannot be removed; this one is gated by `watching`
    watching.set()
    try:
        result = audit_paths([str(tree)])
        from ecoguard.cli import main

        exit_code = main(["audit", str(tree), "--json"])
    finally:
        watching.clear()
    assert exit_code in (0, 1)
    assert not marker.exists(), "audited code was executed"
    assert "ecoguard_reliability_canary" not in sys.modules
    assert forbidden == []
    leaked = [p for p in opened if os.path.realpath(p).startswith(os.path.realpath(outside))]
    assert leaked == [], f"the audit opened files outside the tree: {leaked}"
    files = {Path(f.location.path).name for f in result.findings if f.location}
    assert "serve.py" in files and "nb.ipynb" in files  # the traps inside were found
    assert "secret_trap.py" not in files and "linked_file.py" not in files
    kinds = {p.kind for p in result.problems}
    assert "symlink-outside" in kinds


# ------------------------------------------------------------------ advisor parser fuzz

_FRAGMENTS = st.sampled_from(
    [
        "Qwen2.5-7B",
        "on RTX 4090",
        "int8",
        "nf4",
        "batch 8",
        "bs=1",
        "A800",
        "7b",
        "70B",
        "1.5b",
        "fp8",
        "H100",
        "greenest config for",
        "compare",
        "vs",
        "how much energy",
        "diagnose",
        "在 RTX 5090 上",
        "用 INT8",
        "批量 16",
        "每月 100 万次请求",
        "$0.12/kWh",
        "1e6 requests per month",
        "mistral-7b",
        "4-bit",
        "llama 3 8b",
        "batch size 64",
        "path/to/serve.py",
        "../../../../etc/passwd",
        "%s%n",
        "' OR 1=1 --",
        "\u202e",
    ]
)
_JUNK = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=0, max_size=2000)
_QUESTION = st.lists(st.one_of(_FRAGMENTS, _JUNK), min_size=1, max_size=12).map(" ".join)
_PATHOLOGICAL = st.sampled_from(
    [
        "1" * 10_000,
        "7b" * 5_000,
        "." * 10_000,
        "int8 " * 2_000,
        "batch " * 1_700,
        "a-" * 5_000,
        "Qwen2.5-" * 1_250,
        " " * 9_000 + "x",
        "1." * 5_000,
        "1e" * 5_000,
        "RTX " * 2_500,
        "(" * 10_000,
        "0x" + "f" * 9_990,
        "中" * 3_400,
        "\U0001f99e" * 2_560,
        "b" * 10_241,
        "1" * 200_000,
    ]
)


def _parse_within_budget(text: str) -> None:
    from ecoguard.advisor import parse_question

    started = time.perf_counter()
    try:
        parse_question(text)
    except UsageError:
        pass
    elapsed = time.perf_counter() - started
    # A generous bound (a quadratic pattern takes many seconds); 0.5 s failed at 0.69 s on a
    # loaded CI machine.
    assert elapsed < 2.0, f"parse took {elapsed:.2f} s on {len(text)} chars: {text[:80]!r}"


@hsettings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(text=st.one_of(_QUESTION, _JUNK, _PATHOLOGICAL))
def test_advisor_parser_is_bounded_in_time_and_raises_only_usage_errors(text):
    _parse_within_budget(text)


@pytest.mark.parametrize(
    "text",
    [
        b"\xff\xfe binary",
        12345,
        None,
        ["list"],
        "\x00" * 10,
        "\x01\x02\x03" * 100,
        "",
    ],
)
def test_advisor_rejects_non_questions_with_usage_error(text):
    from ecoguard.advisor import parse_question

    with pytest.raises(UsageError):
        parse_question(text)


@hsettings(
    max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(text=_QUESTION)
def test_full_advise_answers_or_refuses_cleanly(text):
    """The whole answer path (parse, protocols, rendering), not just the parser."""
    from ecoguard.advisor import advise

    started = time.perf_counter()
    try:
        advise(text)
        hypothesis.event("answered")
    except UsageError:
        hypothesis.event("refused (UsageError)")
    assert time.perf_counter() - started < 2.0


# ------------------------------------------------------------------ MCP tools


_MCP_TEXT = st.one_of(
    st.sampled_from(
        [
            "Qwen2.5-7B",
            "7B",
            "1.5b",
            "mistral-7b",
            "a800",
            "5090",
            "RTX 9999",
            "T4",
            "H100",
            "int8",
            "nf4",
            "fp16",
            "int3",
            "us",
            "china",
            "mars",
            "chat",
            "api",
            "batch",
            "en",
            "zh",
            "int8-mixed",
            "no-such-rule",
            "measured",
            "guessed",
            "serve.py",
            "nb.ipynb",
            "../../etc/passwd",
            "",
            " ",
            "\x00",
            "中文问题",
            "x" * 300,
        ]
    ),
    st.text(max_size=200),
)
_MCP_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([0, 1, -1, 8, 4096, 4097, 10**12, 10**13, 2**63, -(2**63)]),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    _MCP_TEXT,
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)
_MCP_SOURCE = st.one_of(
    st.sampled_from(
        [
            "import os\nos.system('touch /tmp/ecoguard-mcp-ran')\n",
            "from transformers import AutoModelForCausalLM, BitsAndBytesConfig\n"
            "m = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-7B', "
            "quantization_config=BitsAndBytesConfig(load_in_8bit=True))\n",
            "def f(:\n",
            "(" * 5000,
            "\x00\x01",
            "{}",
        ]
    ),
    st.text(max_size=2000),
)


_INT = st.integers
_MCP_PLAUSIBLE: dict[str, Any] = {
    "model": st.sampled_from(["Qwen2.5-7B", "7B", "mistral-7b", "1.5b", "Qwen/Qwen2.5-3B"]),
    "gpu": st.sampled_from(["a800", "5090", "T4", "H100", "rtx4090d", "4090D"]),
    "precision": st.sampled_from(["int8", "nf4", "fp16", "bf16", "fp8", "int8_pure", "4bit"]),
    "batch_size": _INT(1, 64),
    "prompt_tokens": _INT(0, 4096),
    "generation_tokens": _INT(1, 2048),
    "requests_per_month": _INT(0, 10**9),
    "region": st.sampled_from(["us", "china", "cn", "eu", "de", "jp"]),
    "use": st.sampled_from(["chat", "api", "batch"]),
    "language": st.sampled_from(["en", "zh"]),
    "price_usd_per_kwh": st.floats(0.01, 1.0),
    "cny_per_usd": st.floats(1.0, 10.0),
    "observed_throughput_tok_s": st.floats(0.1, 10_000.0),
    "observed_power_w": st.floats(1.0, 1000.0),
    "observed_energy_j_per_1k": st.floats(1.0, 100_000.0),
    "question": st.lists(_FRAGMENTS, min_size=1, max_size=6).map(" ".join),
    "filename": st.sampled_from(["serve.py", "nb.ipynb", "x.py", "../../etc/passwd"]),
    "rule_id": st.sampled_from(["int8-mixed", "small-model-quant", "fp8-eager", "vram-overflow"]),
    "tier": st.sampled_from(["measured", "reported", "local"]),
    "limit": _INT(1, 500),
}


@pytest.fixture(scope="module")
def mcp_server():
    try:
        import ecoguard.mcp.server as module
    except ImportError as exc:
        pytest.skip(f"the MCP server (ecoguard/mcp/server.py) is not there: {exc}")
    try:
        return module.build_server(settings=Settings(ledger_path=None))
    except UsageError as exc:
        pytest.skip(f"the mcp extra is not installed: {exc}")


@pytest.fixture(scope="module")
def mcp_tool_properties(mcp_server) -> dict[str, list[str]]:
    import asyncio

    tools = asyncio.run(mcp_server.list_tools())
    return {t.name: list(t.input_schema.get("properties", {})) for t in tools}


@hsettings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_mcp_tools_validate_any_input(mcp_server, mcp_tool_properties, data):
    """Random arguments of every JSON type, boundary numbers, NaN/inf, unknown keys, hostile
    sources: every tool answers or refuses with a tool error that says what was wrong. An
    "internal error" (an exception the tool did not anticipate) is an ecoguard bug; so is a
    call taking over 2 s, or audited source being run."""
    import asyncio

    from mcp.server.mcpserver.exceptions import ToolError

    from ecoguard.faults import fault_counts

    tool = data.draw(st.sampled_from(sorted(mcp_tool_properties)))
    names = mcp_tool_properties[tool]
    chosen = data.draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names)))
    # The required argument, most of the time, so the tools' own code runs too.
    wants_required = data.draw(st.sampled_from((True, True, True, False)), label="required")
    if wants_required and names and names[0] in ("model", "source", "question", "rule_id"):
        chosen = [names[0], *(n for n in chosen if n != names[0])]
    arguments: dict[str, Any] = {}
    for name in chosen:
        if name == "source":
            strategy = _MCP_SOURCE
        else:
            plausible = _MCP_PLAUSIBLE.get(name, _MCP_TEXT)
            strategy = st.one_of(plausible, plausible, plausible, _MCP_TEXT, _MCP_VALUE)
        arguments[name] = data.draw(strategy, label=name)
    before = {k: v for k, v in fault_counts().items() if k.startswith("mcp.")}
    started = time.perf_counter()
    try:
        asyncio.run(mcp_server.call_tool(tool, arguments, None))
        hypothesis.event(f"{tool}: answered")
    except ToolError as exc:
        hypothesis.event(f"{tool}: refused")
        assert "internal error" not in str(exc), f"{tool}({arguments!r}): {exc}"
        assert "Traceback" not in str(exc)
    elapsed = time.perf_counter() - started
    assert elapsed < 2.0, f"{tool}({arguments!r}) took {elapsed:.2f} s"
    after = {k: v for k, v in fault_counts().items() if k.startswith("mcp.")}
    assert after == before, f"{tool}({arguments!r}) hit an internal error"
    assert not Path("/tmp/ecoguard-mcp-ran").exists(), "audit_code ran the audited source"


# ------------------------------------------------------------------ known vulnerabilities


@pytest.mark.skipif(
    os.environ.get("ECOGUARD_PIP_AUDIT") != "1",
    reason="pip-audit needs PyPI's or OSV's vulnerability API over the network; "
    "opt in with ECOGUARD_PIP_AUDIT=1 where it is reachable",
)
def test_pip_audit_reports_no_known_vulnerabilities():
    tool = shutil.which("pip-audit")
    if tool is None:
        pytest.fail("ECOGUARD_PIP_AUDIT=1 but pip-audit is not installed (pip install pip-audit)")
    done = subprocess.run(
        [tool, "--strict", "--progress-spinner", "off", "--desc", "on"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_python_source_uses_eval_exec_or_shell():
    """ecoguard's own code never evaluates strings or starts shells (a static check)."""
    package = Path(__file__).resolve().parents[2] / "ecoguard"
    offenders = []
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                owner = getattr(getattr(func, "value", None), "id", "")
                if isinstance(func, ast.Name) and name in ("eval", "exec"):
                    offenders.append(f"{path.name}:{node.lineno} {name}")  # builtins only:
                    # ``model.eval()`` is torch's inference mode, not string evaluation
                if owner == "os" and name in ("system", "popen"):
                    offenders.append(f"{path.name}:{node.lineno} os.{name}")
                if name in ("run", "Popen", "call", "check_output", "check_call"):
                    for keyword in node.keywords:
                        if keyword.arg == "shell" and getattr(keyword.value, "value", False):
                            offenders.append(f"{path.name}:{node.lineno} shell=True")
                if name == "load" and owner == "pickle":
                    offenders.append(f"{path.name}:{node.lineno} pickle.load")
    assert offenders == []
