"""`ecoguard mcp` through a real MCP client session: the SDK's stdio client starts the server as
a subprocess, exactly as Claude Code or Claude Desktop would, and every tool is called with
valid input (compared with the library call it wraps) and invalid input (a tool error with a
useful message, after which the server still answers).

No __init__.py in this directory on purpose: a package named ``mcp`` here would shadow the SDK.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp.server.mcpserver", reason="needs the mcp extra, SDK 2.x")

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from ecoguard.config import Settings

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]
TOOL_NAMES = {
    "optimize",
    "compare",
    "estimate",
    "diagnose",
    "advise",
    "audit_code",
    "explain_trap",
    "lookup_data",
}
# Each call answers in well under a second; a generous bound so a loaded CI box does not flake,
# while a hung server still fails the test instead of the whole run.
CALL_TIMEOUT_S = 60.0

TRAPPY_SOURCE = """\
from transformers import AutoModelForCausalLM, BitsAndBytesConfig

config = BitsAndBytesConfig(load_in_8bit=True)
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-7B-Instruct", quantization_config=config)

def serve(prompts, tokenizer):
    outputs = []
    for prompt in prompts:
        inputs = tokenizer(prompt, return_tensors="pt")
        outputs.append(model.generate(**inputs, max_new_tokens=128))
    return outputs
"""


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def server_env(tmp_path_factory) -> dict[str, str]:
    """The server's environment: no ECOGUARD_* from the developer, a throwaway ledger, and the
    venv's bin first on PATH (where the `ecoguard` entry point lives)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ECOGUARD_")}
    env["ECOGUARD_LEDGER"] = str(tmp_path_factory.mktemp("mcp") / "ledger.sqlite")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


@pytest.fixture(scope="module")
async def session(server_env):
    """One server process for the module: also shows it keeps serving across every error."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "ecoguard", "mcp"], env=server_env, cwd=str(REPO)
    )
    async with connect(params) as client:
        yield client


@pytest.fixture(scope="module")
def settings(server_env) -> Settings:
    """What the server reads from its environment at start."""
    return Settings.from_env(server_env)


@asynccontextmanager
async def connect(params: StdioServerParameters) -> AsyncIterator[ClientSession]:
    """A client session with the server started from ``params``, initialized."""
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT_S) as client,
    ):
        await client.initialize()
        yield client


def plain(value: Any) -> Any:
    """The library's dict as it travels as JSON (tuples become lists)."""
    return json.loads(json.dumps(value, default=str))


async def call_ok(client: ClientSession, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} failed: {_text(result)}"
    assert isinstance(result.structured_content, dict)
    # The text content mirrors the structured result for clients that read only text.
    assert json.loads(_text(result)) == result.structured_content
    return result.structured_content


async def call_error(client: ClientSession, tool: str, arguments: dict[str, Any]) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} accepted {arguments!r}"
    text = _text(result)
    assert "Traceback" not in text
    return text


def _text(result: Any) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


# ---------------------------------------------------------------------------------------------
# Listing


async def test_lists_every_tool_with_schemas(session):
    tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert set(tools) == TOOL_NAMES
    for tool in tools.values():
        schema = tool.input_schema
        assert schema["type"] == "object" and schema["properties"], tool.name
        assert schema.get("additionalProperties") is False, tool.name
        assert tool.output_schema and tool.output_schema["type"] == "object", tool.name
        assert tool.description and len(tool.description) > 40, tool.name
        assert tool.annotations and tool.annotations.read_only_hint is True
    optimize = tools["optimize"].input_schema
    assert optimize["required"] == ["model"]
    batch = optimize["properties"]["batch_size"]["anyOf"][0]
    assert (batch["minimum"], batch["maximum"]) == (1, 4096)
    assert optimize["properties"]["use"]["anyOf"][0]["enum"] == ["chat", "api", "batch"]
    from ecoguard.findings import RULE_IDS

    assert tools["explain_trap"].input_schema["properties"]["rule_id"]["enum"] == list(RULE_IDS)
    tier = tools["lookup_data"].input_schema["properties"]["tier"]["anyOf"][0]
    assert tier["enum"] == ["measured", "reported", "local"]


async def test_the_tools_table_is_what_the_server_lists():
    """Every tool comes from TOOLS and nothing else: names in order, each argument's name,
    whether it is required and its default, the description (the function's docstring) and
    the read-only annotations. A tool registered outside the table fails this."""
    import inspect

    from ecoguard.mcp.server import build_server
    from ecoguard.mcp.tools import TOOLS

    server = build_server(settings=Settings(ledger_path=None))
    listed = await server.list_tools()
    assert [tool.name for tool in listed] == [spec.name for spec in TOOLS]
    assert {spec.name for spec in TOOLS} == TOOL_NAMES
    for tool, spec in zip(listed, TOOLS, strict=True):
        properties = tool.input_schema["properties"]
        assert list(properties) == [a.name for a in spec.arguments], spec.name
        required = [a.name for a in spec.arguments if a.required]
        assert tool.input_schema.get("required", []) == required, spec.name
        for argument in spec.arguments:
            if not argument.required:
                assert properties[argument.name]["default"] == argument.default
        assert tool.description == inspect.getdoc(spec.function), spec.name
        assert tool.annotations.read_only_hint is True


def test_deployment_tools_take_only_deployment_facts():
    """The four deployment tools hand every argument to Question.from_flags (the record the CLI
    flags and free text make too); one it has no keyword for is a TypeError, so the table and
    the record cannot drift apart unnoticed."""
    from ecoguard.advisor.question import Question
    from ecoguard.mcp import tools

    deployment_tools = (tools.optimize, tools.compare, tools.estimate, tools.diagnose)
    specs = [spec for spec in tools.TOOLS if spec.function in deployment_tools]
    assert len(specs) == 4
    for spec in specs:
        defaults = {a.name: a.default for a in spec.arguments}
        question = Question.from_flags(spec.name, **defaults)
        assert question.language == "en" and question.model is None
    with pytest.raises(TypeError, match="batchsize"):
        Question.from_flags("optimize", model="7B", batchsize=8)


async def test_region_schema_names_the_servers_default_region():
    from ecoguard.mcp.server import build_server

    for region in ("us", "eu"):
        server = build_server(settings=Settings(ledger_path=None, region=region))
        tools = {tool.name: tool for tool in await server.list_tools()}
        for name in ("optimize", "compare", "estimate", "diagnose"):
            described = tools[name].input_schema["properties"]["region"]["description"]
            assert described.endswith(f"(default {region})"), (name, described)


# ---------------------------------------------------------------------------------------------
# Valid calls: the structured result is the library's answer


def _library(tool: str, settings: Settings, **facts: Any) -> dict[str, Any]:
    """The library's answer to the same facts: the one assembly path every door uses."""
    from ecoguard.advisor.answers import answer
    from ecoguard.advisor.question import Question

    return plain(answer(Question.from_flags(tool, **facts), settings).to_dict())


async def test_optimize_matches_library(session, settings):
    args = {"model": "Qwen2.5-3B", "gpu": "5090", "use": "api"}
    out = await call_ok(session, "optimize", args)
    assert out == _library("optimize", settings, **args)
    assert out["protocol"] == "optimize"
    assert out["recommendation"]["precision"]
    assert {d["field"] for d in out["defaults"]} >= {"precision", "batch_size"}
    assert out["settings"]["region"] == settings.region


async def test_optimize_without_a_use_is_served_as_in_every_door(session, settings):
    """No stated use means a service from many users, in the CLI, the text and this tool alike
    (the tool used to default to a one-user chat)."""
    out = await call_ok(session, "optimize", {"model": "Qwen2.5-7B", "gpu": "a800"})
    assert out["deployment"]["use"] == "api"
    assert "use" in {d["field"] for d in out["defaults"]}
    assert out == _library("optimize", settings, model="Qwen2.5-7B", gpu="a800")


async def test_compare_matches_library(session, settings):
    args = {"model": "Mistral-7B", "gpu": "a800", "requests_per_month": 250_000}
    out = await call_ok(session, "compare", args)
    assert out == _library("compare", settings, **args)
    assert len(out["rows"]) >= 3
    assert all(row.get("tier") for row in out["rows"])


async def test_estimate_matches_library(session, settings):
    args = {
        "model": "Qwen2.5-7B",
        "gpu": "a800",
        "precision": "nf4",
        "region": "eu",
        "requests_per_month": 100_000,
        "cny_per_usd": 7.2,
    }
    out = await call_ok(session, "estimate", args)
    assert out == _library("estimate", settings, **args)
    assert out["current"]["tier"] != "none"
    assert out["money"]["current"]["requests"] == 100_000
    assert out["money"]["current"]["cost_cny"] is not None
    assert out["settings"]["region"] == "eu"


async def test_diagnose_matches_library(session, settings):
    args = {"model": "Mistral-7B", "gpu": "a800", "observed_throughput_tok_s": 10.0}
    out = await call_ok(session, "diagnose", args)
    assert out == _library("diagnose", settings, **args)
    assert out["protocol"] == "diagnose"


async def test_advise_matches_library(session, settings):
    from ecoguard.advisor import advise

    question = "What is the greenest config for Qwen2.5-3B on an RTX 5090?"
    out = await call_ok(session, "advise", {"question": question})
    assert out == plain(advise(question, settings=settings).to_dict())
    assert out["parsed"]


async def test_advise_audits_pasted_code_as_text(session, settings):
    from ecoguard.advisor import advise

    question = (
        "audit my code: model = AutoModelForCausalLM.from_pretrained('mistralai/Mistral-7B-v0.1', "
        "load_in_8bit=True)"
    )
    out = await call_ok(session, "advise", {"question": question})
    assert out == plain(advise(question, settings=settings).to_dict())
    assert "int8-mixed" in json.dumps(out)


async def test_audit_code_matches_library_and_never_runs_the_code(session, tmp_path):
    from ecoguard.audit import audit_source

    out = await call_ok(
        session, "audit_code", {"source": TRAPPY_SOURCE, "filename": "serve.py", "gpu": "T4"}
    )
    assert out == plain(audit_source(TRAPPY_SOURCE, "serve.py", gpu="T4").to_dict())
    rules = {f["rule"] for f in out["findings"]}
    assert {"int8-mixed", "batch-size-one"} <= rules
    assert all(f["location"]["path"] == "serve.py" for f in out["findings"])

    # Code that would leave a mark if it ran: it is only parsed.
    marker = tmp_path / "ran"
    hostile = f"open({str(marker)!r}, 'w').write('x')\nimport os\nos._exit(3)\n"
    out = await call_ok(session, "audit_code", {"source": hostile})
    assert out["findings"] == [] and out["errors"] == []
    assert not marker.exists()


async def test_audit_code_reports_syntax_errors_in_the_result(session):
    out = await call_ok(session, "audit_code", {"source": "def broken(:\n"})
    assert out["findings"] == []
    assert out["errors"] and out["errors"][0]["kind"] == "syntax-error"


async def test_explain_trap_matches_library(session):
    from ecoguard.rules import explain

    out = await call_ok(session, "explain_trap", {"rule_id": "int8-mixed"})
    assert out == plain(explain("int8-mixed"))
    assert out["fix"] and out["evidence"]
    assert all(row["tier"] in ("measured", "reported") and row["source"] for row in out["evidence"])


async def test_lookup_data_matches_library(session):
    from ecoguard.knowledge import find_rows

    args = {"gpu": "a800", "precision": "int8_pure", "limit": 3}
    out = await call_ok(session, "lookup_data", args)
    rows = find_rows(gpu="a800", precision="int8_pure")
    assert out["total"] == len(rows) and len(rows) > 3
    assert out["returned"] == 3 and out["truncated"] is True
    assert out["rows"] == plain([row.to_dict() for row in rows[:3]])
    assert all(row["tier"] and row["source"] for row in out["rows"])
    assert "10.5281/zenodo.19647290" in out["attribution"]

    out = await call_ok(session, "lookup_data", {"gpu": "a800", "tier": "reported", "limit": 500})
    assert out["rows"] == plain([r.to_dict() for r in find_rows(gpu="a800", tier="reported")])
    assert out["truncated"] is False


# ---------------------------------------------------------------------------------------------
# Invalid calls: a tool error that says what was wrong and what is accepted


@pytest.mark.parametrize(
    ("tool", "arguments", "expected"),
    [
        ("optimize", {"gpu": "5090"}, r"model\s+Field required"),
        (
            "optimize",
            {"model": "Qwen2.5-3B", "gpu": "RTX 9999"},
            r"unknown GPU 'RTX 9999'\. Did you mean: rtx",
        ),
        ("optimize", {"model": "Qwen2.5-3B", "batch_size": 0}, r"greater than or equal to 1"),
        ("optimize", {"model": "Qwen2.5-3B", "batch_size": "many"}, r"valid integer"),
        ("optimize", {"model": "Qwen2.5-3B", "use": "stream"}, r"'chat', 'api' or 'batch'"),
        ("optimize", {"model": "Qwen2.5-3B", "batchsize": 8}, r"unknown argument.*'batchsize'"),
        ("compare", {"model": "Qwen2.5-3B", "precision": "int3"}, r"unknown precision 'int3'"),
        ("compare", {"model": "no size here", "gpu": "a800"}, r"(?i)model"),
        ("estimate", {"model": "7B", "region": "mars"}, r"(?i)region.*'mars'|'mars'.*region"),
        ("estimate", {"model": "7B", "price_usd_per_kwh": -1}, r"greater than 0"),
        ("estimate", {"model": "7B", "prompt_tokens": 2_000_000}, r"less than or equal"),
        ("diagnose", {"model": "7B", "observed_power_w": -5}, r"greater than 0"),
        ("advise", {"question": ""}, r"at least 1 character"),
        ("advise", {"question": "audit serve.py for traps"}, r"audit_code"),
        ("audit_code", {"source": "x = 1\n", "gpu": "RTX 9999"}, r"unknown GPU"),
        ("audit_code", {"source": "x = 1\n", "filename": "nb.ipynb"}, r"notebook"),
        ("audit_code", {}, r"source\s+Field required"),
        ("explain_trap", {"rule_id": "no-such-rule"}, r"'int8-mixed'"),
        ("lookup_data", {"tier": "guessed"}, r"'measured', 'reported' or 'local'"),
        ("lookup_data", {"limit": 0}, r"greater than or equal to 1"),
        ("lookup_data", {"limit": 501}, r"less than or equal to 500"),
        ("lookup_data", {"gpu": "RTX 9999"}, r"Did you mean|unknown GPU"),
        ("no_such_tool", {}, r"no_such_tool"),
    ],
)
async def test_invalid_input_is_a_tool_error(session, tool, arguments, expected):
    message = await call_error(session, tool, arguments)
    assert re.search(expected, message), message


async def test_audit_code_refuses_sources_over_one_mib(session):
    # Under the character bound but over 1 MiB of UTF-8: the byte check answers.
    message = await call_error(session, "audit_code", {"source": "é" * 600_000})
    assert "1,048,576 bytes" in message
    # Over the character bound: the schema answers.
    message = await call_error(session, "audit_code", {"source": "#" * 1_100_000})
    assert "1048576" in message


async def test_server_keeps_serving_after_errors(session):
    await call_error(session, "estimate", {"model": "7B", "gpu": "RTX 9999"})
    await call_error(session, "explain_trap", {"rule_id": 42})
    out = await call_ok(session, "explain_trap", {"rule_id": "fp8-eager"})
    assert out["id"] == "fp8-eager"
    out = await call_ok(session, "estimate", {"model": "7B", "gpu": "a800"})
    assert out["protocol"] == "estimate"


# ---------------------------------------------------------------------------------------------
# Resources


async def test_provenance_resource_is_the_data_readme(session):
    from ecoguard._paths import data_dir

    listed = {str(r.uri) for r in (await session.list_resources()).resources}
    assert {"ecoguard://data/provenance", "ecoguard://rules", "ecoguard://data/gpus"} <= listed
    result = await session.read_resource("ecoguard://data/provenance")
    (content,) = result.contents
    assert content.mime_type == "text/markdown"
    assert content.text == (data_dir() / "README.md").read_text(encoding="utf-8")
    assert "10.5281/zenodo.19647290" in content.text


async def test_rules_and_gpus_resources(session):
    from ecoguard.findings import RULE_IDS
    from ecoguard.knowledge import gpu_profiles

    (rules,) = (await session.read_resource("ecoguard://rules")).contents
    assert [r["id"] for r in json.loads(rules.text)["rules"]] == list(RULE_IDS)
    (gpus,) = (await session.read_resource("ecoguard://data/gpus")).contents
    assert [g["key"] for g in json.loads(gpus.text)["gpus"]] == list(gpu_profiles())


# ---------------------------------------------------------------------------------------------
# The documented client configuration works as written


def _documented_config() -> dict[str, Any]:
    text = (REPO / "docs" / "mcp.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```json\n(.*?)```", text, flags=re.S)
    configs = [json.loads(b) for b in blocks if '"mcpServers"' in b]
    assert len(configs) == 1, "docs/mcp.md should show one mcpServers snippet"
    return configs[0]["mcpServers"]["ecoguard"]


async def test_documented_client_config_starts_the_server(server_env):
    entry = _documented_config()
    command = shutil.which(entry["command"], path=server_env["PATH"])
    if command is None:
        pytest.skip(f"{entry['command']!r} is not installed on PATH (pip install -e .)")
    params = StdioServerParameters(
        command=entry["command"], args=entry.get("args", []), env=server_env
    )
    async with connect(params) as client:
        assert client.server_info.name == "ecoguard"
        assert "tier" in (client.instructions or "")
        assert {t.name for t in (await client.list_tools()).tools} == TOOL_NAMES
        out = await call_ok(client, "explain_trap", {"rule_id": "batch-size-one"})
        assert out["id"] == "batch-size-one"


async def test_bad_environment_fails_at_start_with_a_message(server_env, tmp_path):
    """A bad ECOGUARD_* value is said on stderr at start, not on the first call."""
    import subprocess

    env = dict(server_env, ECOGUARD_REGION="atlantis")
    proc = subprocess.run(
        [sys.executable, "-m", "ecoguard", "mcp"],
        env=env,
        input="",
        capture_output=True,
        text=True,
        timeout=CALL_TIMEOUT_S,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "atlantis" in proc.stderr and "Traceback" not in proc.stderr


async def test_optimize_result_is_the_cli_json(session, server_env):
    """docs/mcp.md promises the same JSON as `ecoguard optimize --json` for the same facts."""
    import subprocess

    argv = ["optimize", "--model", "Qwen2.5-3B", "--gpu", "5090", "--use", "api", "--json"]
    proc = subprocess.run(
        [sys.executable, "-m", "ecoguard", *argv],
        env=server_env,
        capture_output=True,
        text=True,
        timeout=CALL_TIMEOUT_S,
        check=True,
    )
    out = await call_ok(session, "optimize", {"model": "Qwen2.5-3B", "gpu": "5090", "use": "api"})
    assert out == json.loads(proc.stdout)


def test_module_import_stays_light():
    """`ecoguard --help` imports every command module: this one must not pull in the SDK."""
    import subprocess

    code = (
        "import sys, ecoguard.mcp, ecoguard.cli; ecoguard.cli.build_parser('mcp'); "
        "print(sorted(m for m in ('mcp', 'pydantic', 'anyio', 'torch') if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert proc.stdout.strip() == "[]"


def test_without_the_sdk_the_command_names_the_extra():
    """`ecoguard mcp` where the `mcp` extra is missing: exit 2 and a line saying how to
    install it, not a traceback (the SDK is hidden from the child's imports)."""
    import subprocess

    code = (
        "import sys; sys.modules['mcp'] = None; "
        "from ecoguard.cli import main; sys.exit(main(['mcp']))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], input="", capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert "pip install -e '.[mcp]'" in proc.stderr and "Traceback" not in proc.stderr


async def test_an_internal_failure_is_a_tool_error_naming_it(monkeypatch):
    """A bug inside ecoguard comes back as a tool error with the exception named (the SDK alone
    would say only 'Error executing tool'); the traceback goes to the log, not the client."""
    from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError

    import ecoguard.mcp.server as mcp_server
    import ecoguard.mcp.tools as mcp_tools

    def broken(rule_id: str) -> dict[str, Any]:
        raise RuntimeError(f"boom on {rule_id}")

    server = mcp_server.build_server(settings=Settings())
    with monkeypatch.context() as patch:
        patch.setattr(mcp_tools, "explain", broken)
        with pytest.raises(ToolError) as caught:
            await server.call_tool("explain_trap", {"rule_id": "int8-mixed"}, None)
    assert not isinstance(caught.value, UnexpectedToolError)
    assert "internal error in explain_trap: RuntimeError: boom on int8-mixed" in str(caught.value)
    result = await server.call_tool("explain_trap", {"rule_id": "int8-mixed"}, None)
    assert result.structured_content["id"] == "int8-mixed"
