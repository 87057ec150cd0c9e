"""Facts from from_pretrained arguments and loaded models."""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from ecoguard.guard import extract  # noqa: E402


def test_quant_configs():
    from transformers import BitsAndBytesConfig, TorchAoConfig

    read = extract.quant_from_config
    assert read(BitsAndBytesConfig(load_in_8bit=True)).precision == "int8_mixed"
    facts = read(BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0))
    assert (facts.precision, facts.quant.int8_threshold) == ("int8_pure", 0.0)
    facts = read(
        BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16,
        )
    )
    assert (facts.precision, facts.quant.bits, facts.quant.compute_dtype) == ("nf4_dq", 4, "bf16")
    from torchao.quantization import (
        Float8DynamicActivationFloat8WeightConfig,
        Float8WeightOnlyConfig,
    )

    assert read(TorchAoConfig(Float8WeightOnlyConfig())).precision == "fp8_weight_only"
    dynamic = TorchAoConfig(Float8DynamicActivationFloat8WeightConfig())
    assert read(dynamic).precision == "fp8_dynamic"
    # dict forms, as in config.json
    assert read({"quant_method": "bitsandbytes", "load_in_8bit": True}).precision == "int8_mixed"
    serialized = TorchAoConfig(Float8WeightOnlyConfig()).to_dict()
    assert read(serialized).precision == "fp8_weight_only"
    assert read({"quant_method": "gptq", "bits": 4}).quant.method == "gptq"


def test_dtype_names():
    assert extract.dtype_name(torch.float16) == "fp16"
    assert extract.dtype_name("bfloat16") == "bf16"
    assert extract.dtype_name("auto") is None


def test_load_call_facts_read_local_config(tiny_llama_dir):
    facts = extract.facts_from_load_call((tiny_llama_dir,), {"torch_dtype": torch.float16})
    deployment = facts.deployment
    assert deployment.dtype == "fp16" and deployment.precision == "fp16"
    assert deployment.model.family == "llama" and deployment.model.layers == 2
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    assert deployment.model.params_b * 1e9 == pytest.approx(model.num_parameters(), rel=0.01)


def test_generate_facts():
    class M:
        config = type("C", (), {"is_encoder_decoder": False})()
        generation_config = type("G", (), {"max_new_tokens": 7})()

    ids = torch.ones(3, 5, dtype=torch.long)
    mask = torch.ones(3, 5, dtype=torch.long)
    mask[0, :2] = 0
    facts = extract.facts_from_generate(M(), (ids,), {"attention_mask": mask})
    assert (facts.batch_size, facts.prompt_width, facts.prompt_tokens, facts.max_new_tokens) == (
        3,
        5,
        4,
        7,
    )
    facts = extract.facts_from_generate(
        M(), (), {"inputs_embeds": torch.ones(2, 4, 8), "max_new_tokens": 3}
    )
    assert (facts.batch_size, facts.prompt_width, facts.max_new_tokens) == (2, 0, 3)
