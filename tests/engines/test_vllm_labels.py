"""The vLLM plugin names the model as users know it, and its fix-mode alert names what it did.

vLLM's ``served_model_name`` defaults to the model argument: an absolute folder when a model is
served from disk, which ``ecoguard report`` then cut to a meaningless tail."""

from __future__ import annotations

import logging
from types import SimpleNamespace as NS

import pytest

from ecoguard import events
from ecoguard.config import Settings
from ecoguard.deployment import GpuSpec
from ecoguard.energy import get_meter, stop_meter
from ecoguard.engines import vllm_plugin
from ecoguard.engines.command_line import EngineConfig
from ecoguard.engines.vllm_plugin import apply_fixes, judge_engine, model_label
from ecoguard.guard.install import uninstall


def _config(model, served=None, max_num_seqs=256):
    return NS(
        model_config=NS(
            model=model,
            served_model_name=served if served is not None else model,  # vLLM's default
            quantization=None,
            dtype="torch.bfloat16",
            enforce_eager=False,
            hf_config=NS(),
        ),
        scheduler_config=NS(max_num_seqs=max_num_seqs),
        parallel_config=NS(tensor_parallel_size=1, pipeline_parallel_size=1),
    )


@pytest.mark.parametrize(
    ("model", "served", "label"),
    [
        # --served-model-name wins, whatever the model argument is.
        ("/srv/models/qwen2.5-7b-instruct", "chat", "chat"),
        # A Hub id stays the Hub id.
        ("Qwen/Qwen2.5-7B-Instruct", None, "Qwen/Qwen2.5-7B-Instruct"),
        ("gpt2", None, "gpt2"),
        # A folder on disk: its name, not the absolute path.
        ("/srv/models/qwen2.5-7b-instruct", None, "qwen2.5-7b-instruct"),
        ("/srv/models/qwen2.5-7b-instruct/", None, "qwen2.5-7b-instruct"),
        ("./checkpoints/my-finetune", None, "my-finetune"),
        # A Hub cache snapshot: the id the folder was downloaded as, not the commit hash.
        (
            "/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B-Instruct/snapshots/7ae557604",
            None,
            "Qwen/Qwen2.5-0.5B-Instruct",
        ),
    ],
)
def test_the_label_is_the_served_models_name(model, served, label):
    config = EngineConfig(
        engine="vllm", model=model, served_model_name=served if served is not None else model
    )
    assert model_label(config) == label


def test_an_existing_relative_folder_is_a_folder_not_a_hub_id(tmp_path, monkeypatch):
    (tmp_path / "org" / "tiny").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert model_label(EngineConfig(engine="vllm", model="org/tiny")) == "tiny"
    assert model_label(EngineConfig(engine="vllm", model="org/absent")) == "org/absent"


@pytest.fixture
def clean():
    logger = logging.getLogger("ecoguard")
    handlers, level = list(logger.handlers), logger.level
    uninstall()
    stop_meter()
    yield
    uninstall()
    stop_meter()
    logger.handlers[:] = handlers  # the plugin's own handler for vLLM's process goes
    logger.setLevel(level)


def test_records_of_a_model_served_from_disk_carry_its_folder_name(clean, monkeypatch):
    monkeypatch.setenv("ECOGUARD_BACKEND", "simulated")
    monkeypatch.setenv("ECOGUARD_LEDGER", "off")
    monkeypatch.setattr(vllm_plugin, "serve_on_vllm_metrics", lambda settings: None)
    attributor = vllm_plugin.start_attribution(_config("/data/models/SmolLM2-135M-Instruct"))
    assert attributor is not None and get_meter() is not None
    records: list = []
    unsubscribe = events.records.subscribe(records.append)
    try:
        attributor.step(tokens=3, finished=0, running=1, waiting=0)
        attributor.step(tokens=2, finished=1, running=0, waiting=0)
    finally:
        unsubscribe()
    assert [r.model_name for r in records] == ["SmolLM2-135M-Instruct"]


def test_fix_mode_alert_names_the_value_it_applied(caplog):
    published: list = []
    unsubscribe = events.findings.subscribe(published.append)
    settings = Settings(mode="fix", ledger_path=None, max_batch_size=16)
    engine_args = NS(max_num_seqs=1)
    try:
        with caplog.at_level(logging.WARNING, logger="ecoguard"):
            fixed_from = apply_fixes(engine_args, settings)
            judge_engine(
                _config("/srv/m/tiny", max_num_seqs=engine_args.max_num_seqs),
                settings,
                fixed_from=fixed_from,
                gpu=GpuSpec(),
            )
    finally:
        unsubscribe()
    assert engine_args.max_num_seqs == 16
    [event] = published
    assert event.action == "fix" and "--max-num-seqs 16" in event.finding.fix
    assert "64" not in event.finding.fix  # the rule's generic example is not what was done
    assert "--max-num-seqs 16" in caplog.text and "e.g. --max-num-seqs 64" not in caplog.text
    assert "vllm engine (tiny)" in str(event.call_site)
