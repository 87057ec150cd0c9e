"""from_pretrained under the guard with real bitsandbytes and torchao loads on CPU."""

from __future__ import annotations

import shutil
import warnings

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("bitsandbytes")
torch = pytest.importorskip("torch")

from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    BitsAndBytesConfig,
    LlamaForCausalLM,
    TorchAoConfig,
)

from ecoguard.errors import EnergyTrapError, EnergyTrapWarning  # noqa: E402
from ecoguard.guard.install import install, uninstall  # noqa: E402


def int8_thresholds(model):
    return {m.state.threshold for m in model.modules() if type(m).__name__ == "Linear8bitLt"}


def by_rule(events):
    return {e.finding.rule: e for e in events}


def test_acceptance_fix_mode_sets_threshold_zero(tiny_llama_dir, captured_events, ecoguard_log):
    # The tiny model also trips small-model-quant; keep that one at warn to see the INT8 fix.
    install(mode="fix", rules="small-model-quant:warn", measure=False)
    config = BitsAndBytesConfig(load_in_8bit=True)
    with pytest.warns(EnergyTrapWarning, match="small-model-quant"):
        model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, quantization_config=config)
    assert int8_thresholds(model) == {0.0}
    assert config.llm_int8_threshold == 6.0  # the caller's object is untouched
    event = by_rule(captured_events)["int8-mixed"]
    assert event.action == "fix" and event.source == "load"
    assert "llm_int8_threshold=6 -> 0.0" in event.changed
    assert "int8-mixed" in ecoguard_log.text and "llm_int8_threshold=6 -> 0.0" in ecoguard_log.text
    assert "outputs may change" in ecoguard_log.text
    assert event.call_site.path == __file__


def test_warn_mode_leaves_model_and_warns_once(tiny_llama_dir, captured_events):
    install(mode="warn", rules="small-model-quant:off", measure=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):  # same call site twice: one warning
            model = AutoModelForCausalLM.from_pretrained(
                tiny_llama_dir, quantization_config=BitsAndBytesConfig(load_in_8bit=True)
            )
    ours = [w for w in caught if issubclass(w.category, EnergyTrapWarning)]
    assert len(ours) == 1 and "int8-mixed" in str(ours[0].message)
    assert ours[0].filename == __file__
    assert int8_thresholds(model) == {6.0}
    assert [e.action for e in captured_events] == ["warn", "warn"]  # every firing is counted


def test_strict_refuses_before_any_weights_load(tiny_llama_dir, tmp_path, captured_events):
    # A checkpoint without its weights file: only a refusal *before* loading weights can
    # produce EnergyTrapError here rather than a missing-file error.
    no_weights = tmp_path / "no-weights"
    no_weights.mkdir()
    shutil.copy(tiny_llama_dir / "config.json", no_weights / "config.json")
    install(mode="strict", measure=False)
    with pytest.raises(EnergyTrapError, match="int8-mixed") as info:
        AutoModelForCausalLM.from_pretrained(
            no_weights, quantization_config=BitsAndBytesConfig(load_in_8bit=True)
        )
    assert {f.rule for f in info.value.findings} == {"int8-mixed", "small-model-quant"}
    assert {e.action for e in captured_events} == {"strict"}
    uninstall()
    with pytest.raises(OSError):
        AutoModelForCausalLM.from_pretrained(
            no_weights, quantization_config=BitsAndBytesConfig(load_in_8bit=True)
        )


def test_fix_mode_drops_quantization_of_a_small_model(tiny_llama_dir, captured_events):
    install(mode="fix", measure=False)
    with pytest.warns(EnergyTrapWarning, match="int8-mixed"):  # superseded fix: reported as warn
        model = AutoModelForCausalLM.from_pretrained(
            tiny_llama_dir, quantization_config=BitsAndBytesConfig(load_in_8bit=True)
        )
    assert not int8_thresholds(model)  # no Linear8bitLt at all
    assert getattr(model, "hf_quantizer", None) is None
    events = by_rule(captured_events)
    assert events["small-model-quant"].action == "fix"
    assert "no GPU is known" in events["small-model-quant"].changed
    assert events["int8-mixed"].action == "warn"
    assert "superseded" in events["int8-mixed"].finding.fix_summary


def test_nf4_load_warns_small_model(tiny_qwen2_dir, captured_events):
    install(mode="warn", measure=False)
    with pytest.warns(EnergyTrapWarning, match="small-model-quant"):
        model = AutoModelForCausalLM.from_pretrained(
            tiny_qwen2_dir,
            quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4"),
        )
    assert any(type(m).__name__ == "Linear4bit" for m in model.modules())
    event = by_rule(captured_events)["small-model-quant"]
    assert event.deployment.precision == "nf4"
    assert event.deployment.model.family == "qwen2"


def test_torchao_float8_eager(tiny_llama_dir, captured_events):
    from torchao.quantization import Float8WeightOnlyConfig

    install(mode="warn", measure=False)
    with pytest.warns(EnergyTrapWarning, match="fp8-eager"):
        AutoModelForCausalLM.from_pretrained(
            tiny_llama_dir,
            quantization_config=TorchAoConfig(Float8WeightOnlyConfig()),
            dtype=torch.bfloat16,
        )
    assert by_rule(captured_events)["fp8-eager"].finding.mood.value == "red"
    captured_events.clear()
    install(mode="fix", measure=False)
    model = AutoModelForCausalLM.from_pretrained(
        tiny_llama_dir,
        quantization_config=TorchAoConfig(Float8WeightOnlyConfig()),
        dtype=torch.bfloat16,
    )
    assert getattr(model.config, "quantization_config", None) is None
    assert model.dtype == torch.bfloat16  # no GPU known: the caller's dtype is kept
    assert by_rule(captured_events)["fp8-eager"].action == "fix"


def test_pre_quantized_checkpoint(tiny_llama_dir, tmp_path, captured_events):
    saved = tmp_path / "int8-checkpoint"
    AutoModelForCausalLM.from_pretrained(
        tiny_llama_dir, quantization_config=BitsAndBytesConfig(load_in_8bit=True)
    ).save_pretrained(saved)
    install(mode="fix", rules="small-model-quant:warn", measure=False)
    with pytest.warns(EnergyTrapWarning, match="small-model-quant"):
        model = LlamaForCausalLM.from_pretrained(saved)  # a direct class, no kwargs
    assert int8_thresholds(model) == {0.0}
    assert model.config.quantization_config.llm_int8_threshold == 0.0
    event = by_rule(captured_events)["int8-mixed"]
    assert event.action == "fix" and "pre-quantized" in event.changed
    assert event.deployment.quant.pre_quantized is True
    # small-model-quant cannot be fixed by load arguments for a quantized checkpoint
    captured_events.clear()
    install(mode="fix", measure=False)
    with pytest.warns(EnergyTrapWarning, match="small-model-quant"):
        LlamaForCausalLM.from_pretrained(saved)
    event = by_rule(captured_events)["small-model-quant"]
    assert event.action == "warn" and "checkpoint itself is quantized" in event.finding.fix_summary


def test_plain_fp32_load_is_quiet(tiny_qwen2_dir, captured_events):
    install(mode="strict", measure=False)
    AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir)
    assert captured_events == []


def test_fail_open_when_extraction_raises(tiny_llama_dir, monkeypatch):
    from ecoguard.faults import fault_counts
    from ecoguard.guard import extract

    def boom(*args, **kwargs):
        raise RuntimeError("injected")

    monkeypatch.setattr(extract, "facts_from_load_call", boom)
    monkeypatch.setattr(extract, "facts_from_model", boom)
    install(mode="strict", measure=False)
    config = BitsAndBytesConfig(load_in_8bit=True)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, quantization_config=config)
    assert int8_thresholds(model) == {6.0}  # loaded exactly as asked
    assert fault_counts()["guard.load"] == 1
