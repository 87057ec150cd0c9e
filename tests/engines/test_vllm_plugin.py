"""The vLLM plugin's logic without vLLM: engine config -> rules (warn / fix / strict), and engine
steps -> meter windows. The real server runs in test_vllm_real.py."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from types import SimpleNamespace as NS

import pytest

import ecoguard
from ecoguard import events
from ecoguard.config import Settings
from ecoguard.deployment import GpuSpec
from ecoguard.engines import vllm_plugin
from ecoguard.engines.vllm_plugin import (
    StepAttributor,
    apply_fixes,
    config_from_vllm,
    engine_devices,
    judge_engine,
    observe_step,
)
from ecoguard.errors import EnergyTrapError
from ecoguard.faults import fault_counts, reset_faults


def _vllm_config(**overrides):
    model = {
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "served_model_name": "qwen7b",
        "quantization": None,
        "dtype": "torch.bfloat16",
        "enforce_eager": False,
        "hf_config": NS(),
    }
    model.update(overrides.pop("model_config", {}))
    return NS(
        model_config=NS(**model),
        scheduler_config=NS(max_num_seqs=overrides.pop("max_num_seqs", 256)),
        parallel_config=NS(tensor_parallel_size=overrides.pop("tp", 1), pipeline_parallel_size=1),
    )


@pytest.fixture
def published():
    seen: list = []
    unsubscribe = events.findings.subscribe(seen.append)
    yield seen
    unsubscribe()


def test_config_from_vllm_reads_the_resolved_config():
    quant = NS(to_dict=lambda: {"quant_method": "bitsandbytes", "load_in_8bit": True})
    config = config_from_vllm(
        _vllm_config(
            model_config={
                "quantization": "bitsandbytes",
                "hf_config": NS(quantization_config=quant),
                "served_model_name": ["a", "b"],
            },
            max_num_seqs=1,
            tp=2,
        )
    )
    assert (config.engine, config.served_model_name, config.dtype) == ("vllm", "a", "bfloat16")
    assert config.quant_config == {"quant_method": "bitsandbytes", "load_in_8bit": True}
    assert (config.max_num_seqs, config.tensor_parallel_size) == (1, 2)


@pytest.mark.parametrize(
    ("model_config", "expected"),
    [
        # A pre-quantized bitsandbytes 8-bit checkpoint at the default threshold.
        (
            {
                "model": "Qwen/Qwen2.5-1.5B-Instruct",
                "quantization": "bitsandbytes",
                "hf_config": NS(
                    quantization_config={
                        "quant_method": "bitsandbytes",
                        "load_in_8bit": True,
                        "llm_int8_threshold": 6.0,
                    }
                ),
            },
            {"int8-mixed", "small-model-quant"},
        ),
        # vLLM resolves -AWQ checkpoints to awq_marlin on a GPU.
        (
            {"model": "Qwen/Qwen2.5-0.5B-Instruct-AWQ", "quantization": "awq_marlin"},
            {"small-model-quant"},
        ),
        # torchao float8 with enforce_eager.
        (
            {
                "model": "Qwen/Qwen2.5-7B-Instruct",
                "quantization": "torchao",
                "enforce_eager": True,
                "hf_config": NS(
                    quantization_config={"quant_method": "torchao", "quant_type": "float8wo"}
                ),
            },
            {"fp8-eager"},
        ),
        ({"model": "Qwen/Qwen2.5-7B-Instruct"}, set()),
    ],
)
def test_rules_on_engine_config(model_config, expected, published):
    acted = judge_engine(
        _vllm_config(model_config=model_config), Settings(ledger_path=None), gpu=GpuSpec()
    )
    assert {finding.rule for finding, _ in acted} == expected
    assert {action for _, action in acted} <= {"warn"}
    assert {event.finding.rule for event in published} == expected
    assert {event.source for event in published} <= {"vllm"}


def test_fix_raises_max_num_seqs_and_says_so(published):
    settings = Settings(mode="fix", ledger_path=None, max_batch_size=32)
    engine_args = NS(max_num_seqs=1)
    fixed_from = apply_fixes(engine_args, settings)
    assert (fixed_from, engine_args.max_num_seqs) == (1, 32)
    acted = judge_engine(
        _vllm_config(max_num_seqs=32), settings, fixed_from=fixed_from, gpu=GpuSpec()
    )
    assert [(f.rule, action) for f, action in acted] == [("batch-size-one", "fix")]
    assert published[0].changed == "max_num_seqs 1 -> 32"
    # warn mode changes nothing; a value other than 1 is never touched.
    assert apply_fixes(NS(max_num_seqs=1), Settings(mode="warn")) is None
    assert apply_fixes(NS(max_num_seqs=8), settings) is None


def test_strict_refuses_the_engine_start():
    with pytest.raises(EnergyTrapError, match="batch-size-one") as caught:
        judge_engine(_vllm_config(max_num_seqs=1), Settings(mode="strict", ledger_path=None))
    assert [f.rule for f in caught.value.findings] == ["batch-size-one"]
    # A rule turned off is neither refused nor reported.
    settings = Settings(mode="strict", rules={"batch-size-one": "off"}, ledger_path=None)
    assert judge_engine(_vllm_config(max_num_seqs=1), settings, gpu=GpuSpec()) == []


@dataclass
class FakeMeter:
    """Windows as (begin index, end kwargs); no energy, just the bookkeeping."""

    begun: int = 0
    ended: list[dict] = field(default_factory=list)
    infos: list = field(default_factory=list)
    fail_end: bool = False

    def begin(self, *, devices, info):
        self.begun += 1
        self.infos.append(info)
        return NS(key=self.begun, devices=devices)

    def end(self, window, **kwargs):
        if self.fail_end:
            raise RuntimeError("meter broke")
        self.ended.append({"window": window.key, **kwargs})
        return NS(**kwargs)


def _step(attributor, tokens, running, waiting=0, finished=0):
    return observe_step(
        attributor,
        NS(num_running_reqs=running, num_waiting_reqs=waiting),
        NS(num_generation_tokens=tokens, finished_requests=[object()] * finished),
    )


def test_each_step_closes_a_window_with_its_tokens_and_batch():
    meter = FakeMeter()
    attributor = StepAttributor(meter, NS(model_name="m"), (0,))
    _step(attributor, 1, running=1)  # the first step after idle opens the first window
    _step(attributor, 1, running=1)
    _step(attributor, 3, running=3)
    _step(attributor, 3, running=3, finished=1)
    _step(attributor, 2, running=0, finished=2)  # drained: closed, nothing left open
    assert [(e["tokens"], e["batch_size"], e["requests"]) for e in meter.ended] == [
        (2, 1, 0),  # the opening step's token rides with the next window
        (3, 3, 0),
        (3, 3, 1),
        (2, None, 2),
    ]
    assert meter.begun == 4 and attributor._window is None
    # Idle: a stats-only step with nothing running opens nothing.
    _step(attributor, 0, running=0)
    assert meter.begun == 4
    # Every token reported is in some record, as vLLM's counter has them.
    _step(attributor, 1, running=1)
    _step(attributor, 1, running=1)
    assert sum(e["tokens"] for e in meter.ended) == 1 + 1 + 3 + 3 + 2 + 1 + 1


def test_each_window_asks_the_reference_for_the_running_batch():
    from ecoguard.deployment import Deployment
    from ecoguard.energy import CallInfo
    from ecoguard.energy.reference import configuration

    meter = FakeMeter()
    info = CallInfo(model_name="m", deployment=Deployment(precision="bf16"))
    attributor = StepAttributor(meter, info, (0,))
    _step(attributor, 1, running=1)
    _step(attributor, 4, running=4)
    _step(attributor, 2, running=2)
    assert [(i.batch_size, configuration(i, []).batch_size) for i in meter.infos] == [
        (1, 1),
        (4, 4),
        (2, 2),
    ]
    assert all(i.deployment is info.deployment for i in meter.infos)  # no copy per step
    assert info.batch_size is None  # the base info is left alone


def test_close_charges_pending_tokens():
    meter = FakeMeter()
    attributor = StepAttributor(meter, NS(), (0,))
    _step(attributor, 5, running=2)
    attributor.close()
    assert meter.ended[-1]["tokens"] == 5
    assert attributor.close() is None


def test_engine_devices_per_data_parallel_rank():
    config = NS(parallel_config=NS(tensor_parallel_size=2, pipeline_parallel_size=1))
    assert engine_devices(config, 0, 4) == (0, 1)
    assert engine_devices(config, 1, 4) == (2, 3)
    assert engine_devices(config, 3, 4) == (0,)  # beyond the visible GPUs: the first one


def test_contained_counts_and_swallows():
    reset_faults()
    with vllm_plugin.contained("vllm.record"):
        raise RuntimeError("boom")
    assert fault_counts()["vllm.record"] == 1


def test_real_meter_records_carry_vllms_model_name_and_batch():
    from ecoguard.energy import CallInfo, Meter

    meter = Meter(Settings(ledger_path=None, backend="simulated", sample_hz=50)).start()
    records: list = []
    unsubscribe = events.records.subscribe(records.append)
    try:
        assert meter.wait_ready(5.0)
        attributor = StepAttributor(meter, CallInfo(model_name="qwen7b", label="vllm"), (0,))
        for tokens, running in ((4, 4), (4, 4), (2, 2), (2, 0)):
            _step(attributor, tokens, running=running)
    finally:
        unsubscribe()
        meter.stop()
    assert [(r.tokens, r.batch_size, r.model_name) for r in records] == [
        (8, 4, "qwen7b"),
        (2, 2, "qwen7b"),
        (2, None, "qwen7b"),
    ]
    assert all(r.energy_j > 0 and r.tier == "simulated" for r in records)


@pytest.fixture
def fake_vllm(monkeypatch):
    """A stand-in ``vllm.engine.arg_utils`` for register()'s patch."""

    class EngineArgs:
        def __init__(self, max_num_seqs):
            self.max_num_seqs = max_num_seqs

        def create_engine_config(self):
            return _vllm_config(max_num_seqs=self.max_num_seqs)

    module = types.ModuleType("vllm.engine.arg_utils")
    module.EngineArgs = EngineArgs
    for name in ("vllm", "vllm.engine"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "vllm.engine.arg_utils", module)
    monkeypatch.setattr(vllm_plugin, "_applied", None)
    monkeypatch.setenv("ECOGUARD_MEASURE", "0")
    monkeypatch.setenv("ECOGUARD_LEDGER", "off")
    yield EngineArgs
    vllm_plugin.unregister()
    ecoguard.uninstall()


def test_register_patches_only_with_the_flag(fake_vllm, monkeypatch):
    monkeypatch.delenv("ECOGUARD_VLLM", raising=False)
    monkeypatch.setenv("ECOGUARD_MODE", "strict")
    vllm_plugin.register()
    assert fake_vllm(1).create_engine_config().scheduler_config.max_num_seqs == 1

    monkeypatch.setenv("ECOGUARD_VLLM", "1")
    vllm_plugin.register()
    vllm_plugin.register()  # idempotent
    with pytest.raises(EnergyTrapError):
        fake_vllm(1).create_engine_config()
    monkeypatch.setenv("ECOGUARD_MODE", "fix")
    assert fake_vllm(1).create_engine_config().scheduler_config.max_num_seqs == 16


def test_unregister_puts_back_the_exact_original(fake_vllm, monkeypatch):
    """register() patches through the guard's patch record: install twice = once, and
    unregister() restores the very function object, so vLLM runs untouched again."""
    monkeypatch.setenv("ECOGUARD_VLLM", "1")
    monkeypatch.setenv("ECOGUARD_MODE", "strict")
    original = vars(fake_vllm)["create_engine_config"]
    vllm_plugin.register()
    vllm_plugin.register()
    assert vllm_plugin.patched()
    wrapper = vars(fake_vllm)["create_engine_config"]
    assert wrapper is not original and wrapper.__wrapped__ is original  # one layer, not two
    vllm_plugin.unregister()
    vllm_plugin.unregister()  # idempotent
    assert not vllm_plugin.patched()
    assert vars(fake_vllm)["create_engine_config"] is original
    assert fake_vllm(1).create_engine_config().scheduler_config.max_num_seqs == 1  # no refusal
    vllm_plugin.register()  # and again after an unregister
    with pytest.raises(EnergyTrapError):
        fake_vllm(1).create_engine_config()


def test_a_fault_in_the_rules_never_stops_the_engine(fake_vllm, monkeypatch):
    monkeypatch.setenv("ECOGUARD_VLLM", "1")
    reset_faults()

    def broken(*args, **kwargs):
        raise ValueError("rules broke")

    monkeypatch.setattr(vllm_plugin, "judge_engine", broken)
    vllm_plugin.register()
    assert fake_vllm(1).create_engine_config().scheduler_config.max_num_seqs == 1
    assert fault_counts()["vllm.rules"] == 1


def test_metrics_join_vllms_own_registry_without_a_port(monkeypatch, published):
    from prometheus_client import CollectorRegistry, generate_latest

    monkeypatch.setattr(vllm_plugin, "_collector", None)
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    registry = CollectorRegistry(auto_describe=False)
    # With a port of its own, or several API servers, ecoguard stays off vLLM's registry.
    assert vllm_plugin.serve_on_vllm_metrics(Settings(metrics_port=0), registry) is None
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "/tmp/x")
    assert vllm_plugin.serve_on_vllm_metrics(Settings(), registry) is None
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR")

    def batch_size_one_count() -> float:
        for line in generate_latest(registry).decode().splitlines():
            wanted = ('rule="batch-size-one"', 'action="warn"')
            if line.startswith("ecoguard_findings_total{") and all(w in line for w in wanted):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    collector = vllm_plugin.serve_on_vllm_metrics(Settings(ledger_path=None), registry)
    assert collector is not None
    assert vllm_plugin.serve_on_vllm_metrics(Settings(ledger_path=None), registry) is collector
    before = batch_size_one_count()
    judge_engine(_vllm_config(max_num_seqs=1), Settings(ledger_path=None), gpu=GpuSpec())
    assert batch_size_one_count() == before + 1
