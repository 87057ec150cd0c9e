"""One checkpoint, one verdict (issue 34): a table of quantization configs read through the four
front doors (the guard's live config reading, the audit's syntax reading, the engines' checkpoint
config reading, the advisor's question parser) gets the same precision from each, and
``ecoguard.quantization`` is their one reading."""

from __future__ import annotations

import ast
import json

import pytest

from ecoguard.advisor.parse import parse_question
from ecoguard.audit.index import ModuleIndex
from ecoguard.audit.quant import QuantReader
from ecoguard.deployment import PRECISIONS, GpuSpec
from ecoguard.engines.engine_args import EngineConfig, engine_deployment
from ecoguard.guard.extract import quant_from_config as guard_reading
from ecoguard.quantization import config_for, dtype_name, quant_from_config

# (name, the config as config.json holds it, the source that builds it, the precision)
TABLE: list[tuple[str, dict, str, str | None]] = [
    (
        "bnb 8-bit default threshold",
        {"quant_method": "bitsandbytes", "load_in_8bit": True},
        "BitsAndBytesConfig(load_in_8bit=True)",
        "int8_mixed",
    ),
    (
        "bnb 8-bit threshold 6",
        {"quant_method": "bitsandbytes", "load_in_8bit": True, "llm_int8_threshold": 6.0},
        "BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=6.0)",
        "int8_mixed",
    ),
    (
        "bnb 8-bit threshold 0",
        {"quant_method": "bitsandbytes", "load_in_8bit": True, "llm_int8_threshold": 0.0},
        "BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0)",
        "int8_pure",
    ),
    (
        "bnb 4-bit nf4",
        {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
        'BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4")',
        "nf4",
    ),
    (
        "bnb 4-bit fp4",
        {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "fp4"},
        'BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="fp4")',
        "nf4",
    ),
    (
        "bnb 4-bit nf4 double quant, bf16 compute",
        {
            "quant_method": "bitsandbytes",
            "load_in_4bit": True,
            "bnb_4bit_quant_type": "nf4",
            "bnb_4bit_use_double_quant": True,
            "bnb_4bit_compute_dtype": "bfloat16",
        },
        'BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", '
        "bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16)",
        "nf4_dq",
    ),
    (
        "torchao float8 weight-only (new class name)",
        {"quant_method": "torchao", "quant_type": {"default": {"_type": "Float8WeightOnlyConfig"}}},
        "TorchAoConfig(Float8WeightOnlyConfig())",
        "fp8_weight_only",
    ),
    (
        "torchao float8 weight-only (old string)",
        {"quant_method": "torchao", "quant_type": "float8_weight_only"},
        'TorchAoConfig("float8_weight_only")',
        "fp8_weight_only",
    ),
    (
        "torchao bare float8",
        {"quant_method": "torchao", "quant_type": "float8"},
        'TorchAoConfig("float8")',
        "fp8_weight_only",
    ),
    (
        "torchao float8 dynamic (new class name)",
        {
            "quant_method": "torchao",
            "quant_type": {"default": {"_type": "Float8DynamicActivationFloat8WeightConfig"}},
        },
        "TorchAoConfig(Float8DynamicActivationFloat8WeightConfig())",
        "fp8_dynamic",
    ),
    (
        "torchao float8 dynamic (old string)",
        {"quant_method": "torchao", "quant_type": "float8_dynamic_activation_float8_weight"},
        'TorchAoConfig("float8_dynamic_activation_float8_weight")',
        "fp8_dynamic",
    ),
    (
        "torchao int8 weight-only",
        {"quant_method": "torchao", "quant_type": "int8_weight_only"},
        'TorchAoConfig("int8_weight_only")',
        None,
    ),
    (
        "AWQ 4-bit",
        {"quant_method": "awq", "bits": 4},
        "AwqConfig(bits=4)",
        "nf4",
    ),
    (
        "GPTQ 4-bit",
        {"quant_method": "gptq", "bits": 4},
        "GPTQConfig(bits=4)",
        "nf4",
    ),
    (
        "GPTQ 8-bit",
        {"quant_method": "gptq", "bits": 8},
        "GPTQConfig(bits=8)",
        "int8_pure",
    ),
]


def _audit(source: str) -> str | None:
    tree = ast.parse(f"import torch\ncfg = {source}\n")
    index = ModuleIndex(tree)
    expr = tree.body[-1].value  # type: ignore[attr-defined]
    facts = QuantReader(index, GpuSpec()).facts(expr)
    assert facts is not None, source
    return facts.precision


def _engine(config: dict) -> str | None:
    facts = engine_deployment(EngineConfig(engine="vllm", model="org/model", quant_config=config))
    return facts.deployment.precision


def _advisor(source: str) -> str | None:
    return parse_question(
        f"Qwen2.5-7B on an A800 loaded with {source}: is this efficient?"
    ).precision


@pytest.mark.parametrize(
    ("name", "config", "source", "precision"), TABLE, ids=[t[0] for t in TABLE]
)
def test_every_door_reads_the_same_precision(name, config, source, precision):
    assert quant_from_config(config).precision == precision
    assert guard_reading(config).precision == precision, "guard"
    assert guard_reading(json.loads(json.dumps(config))).precision == precision, "guard, json"
    assert _audit(source) == precision, "audit"
    assert _engine(config) == precision, "engines"


# The advisor reads a question, not a config: the configs a person writes in one.
ADVISOR_ROWS = [row for row in TABLE if not row[0].startswith(("AWQ", "GPTQ", "torchao int8"))]


@pytest.mark.parametrize(
    ("name", "config", "source", "precision"), ADVISOR_ROWS, ids=[t[0] for t in ADVISOR_ROWS]
)
def test_the_advisor_reads_the_same_precision_from_a_question(name, config, source, precision):
    assert _advisor(source) == precision


def test_the_guard_reads_live_config_objects_as_their_dict_form():
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    configs = [
        transformers.BitsAndBytesConfig(load_in_8bit=True),
        transformers.BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0),
        transformers.BitsAndBytesConfig(load_in_4bit=True),  # fp4, BitsAndBytesConfig's default
        transformers.BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16,
        ),
    ]
    for config in configs:
        live, stored = guard_reading(config), guard_reading(config.to_dict())
        assert live.precision == stored.precision is not None
        assert live.quant == stored.quant


def test_config_for_is_the_inverse_for_every_quantized_precision():
    for precision in PRECISIONS:
        config = config_for(precision)
        if precision in ("fp32", "fp16", "bf16"):
            assert config is None
        else:
            assert config is not None and quant_from_config(config).precision == precision


def test_one_dtype_table():
    assert [dtype_name(x) for x in ("torch.float16", "half", "bfloat16", "float32", "auto")] == [
        "fp16",
        "fp16",
        "bf16",
        "fp32",
        None,
    ]


def test_fp4_is_judged_as_nf4_and_says_so():
    facts = quant_from_config({"load_in_4bit": True})
    assert facts.precision == "nf4" and facts.quant.quant_type == "fp4"
    assert dict(facts.details)["judged_as"].startswith("nf4")


def test_an_fp8_checkpoint_runs_fused_kernels_not_the_eager_trap():
    facts = quant_from_config({"quant_method": "fp8", "activation_scheme": "dynamic"})
    assert facts.precision == "fp8_dynamic" and "fp8-eager" in facts.unknown
