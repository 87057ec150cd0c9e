"""CPU the guard, the meter and the ledger add to one generate call, and to one vLLM engine step.

Method (issue 31): a tiny Llama built from a ``LlamaConfig`` (2 layers, hidden size 16, random
weights, nothing downloaded) whose class gets a ``generate`` that does no model work: it returns
a prepared output (batch 4, prompt 8, 16 new tokens; rows end in EOS at different places, one
row never does and is padded). Each round times ``calls`` calls in thread CPU time
(``time.thread_time``, the serving thread's own CPU) three ways: the bare generate, the same
generate under the guard's wrapt wrapper, the bare one again; the figure of a round is the
guarded time minus the mean of the two bare ones, and the reported figure is the median over
the rounds. Three configurations, in one run:

- guard only: ``install(mode="warn", measure=False)``;
- guard + meter: ``measure=True`` on the fake NVML driver (one GPU, sampler at 10 Hz), ledger off;
- guard + meter + ledger: the same with the SQLite ledger on (a temporary file).

The vLLM figure: the stat logger's ``record`` (``EcoguardStatLogger``, whose work is
``StepAttributor.step``: close the step's window, open the next) called once per engine step
with a running batch of 8, meter and ledger on, against an empty loop. Without vLLM installed,
its ``StatLoggerBase`` is stood in by an empty class; nothing else of vLLM's is used.

    .venv/bin/python benchmarks/measured_call_overhead.py [--calls 2000] [--rounds 9]
    .venv/bin/python benchmarks/measured_call_overhead.py --profile guard+meter+ledger
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import wrapt

BATCH, PROMPT, NEW = 4, 8, 16
EOS, PAD = 2, 0
CONFIGS = ("guard", "guard+meter", "guard+meter+ledger")


def _fake_driver() -> None:
    from ecoguard.testing.fake_nvml import FakeNvmlConfig, build_library, load_in_process

    FakeNvmlConfig(gpus=1).apply()
    load_in_process(build_library(tempfile.mkdtemp(prefix="fake-nvml-")))


def _tiny_llama() -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    model = LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = EOS
    model.generation_config.pad_token_id = PAD
    return model


def _prepared_output(ids: Any) -> Any:
    """What generate would return: the prompt, then new tokens; EOS at positions 3 and 9 of
    rows 0 and 1 (padding after it), row 2 runs to the limit, row 3 stops early on padding."""
    import torch

    new = torch.randint(3, 60, (BATCH, NEW), generator=torch.Generator().manual_seed(2))
    new[0, 3], new[0, 4:] = EOS, PAD
    new[1, 9], new[1, 10:] = EOS, PAD
    new[3, 12:] = PAD
    return torch.cat([ids, new], dim=1)


def _settings(config: str, ledger_dir: Path) -> dict[str, Any]:
    """install() arguments for one configuration. A Settings object, not keywords: install()
    drops keywords that are None, so ``ledger_path=None`` would leave the user's ledger on."""
    from ecoguard.config import Settings

    ledger = ledger_dir / "ledger.sqlite" if config.endswith("ledger") else None
    measure = config != "guard"
    return {"settings": Settings(mode="warn", measure=measure, backend="nvml", ledger_path=ledger)}


def _added_cpu_us(model: Any, ids: Any, mask: Any, output: Any, args: argparse.Namespace) -> dict:
    """Median thread-CPU µs per call the guard adds, per configuration (module docstring)."""
    from ecoguard.guard import wrappers
    from ecoguard.guard.install import install, uninstall

    cls = type(model)

    def no_op_generate(self: Any, inputs: Any = None, **kwargs: Any) -> Any:
        return output

    guarded = wrapt.FunctionWrapper(no_op_generate, wrappers.generate_wrapper)

    def timed(generate: Any) -> float:
        cls.generate = generate
        start = time.thread_time()
        for _ in range(args.calls):
            model.generate(ids, attention_mask=mask, max_new_tokens=NEW)
        return (time.thread_time() - start) / args.calls

    figures: dict[str, list[float]] = {config: [] for config in CONFIGS}
    with tempfile.TemporaryDirectory(prefix="ecoguard-bench-") as tmp:
        try:
            for index in range(args.rounds):
                # Rotate the order so no configuration always runs first after a switch.
                for config in CONFIGS[index % 3 :] + CONFIGS[: index % 3]:
                    install(**_settings(config, Path(tmp)))
                    _warm(model, ids, mask, guarded, cls, config)
                    before, inside, after = timed(no_op_generate), timed(guarded), None
                    after = timed(no_op_generate)
                    figures[config].append(inside - (before + after) / 2)
                    uninstall()
        finally:
            uninstall()
            del cls.generate
    return {config: statistics.median(values) * 1e6 for config, values in figures.items()}


def _warm(model: Any, ids: Any, mask: Any, guarded: Any, cls: Any, config: str) -> None:
    from ecoguard.energy import get_meter
    from ecoguard.export.ledger import get_ledger

    cls.generate = guarded
    meter = get_meter()
    assert (meter is not None) == (config != "guard"), config
    assert (get_ledger() is not None) == config.endswith("ledger"), config
    if meter is not None:
        meter.wait_ready(5.0)
    for _ in range(50):
        model.generate(ids, attention_mask=mask, max_new_tokens=NEW)


def _stat_logger_class() -> Any:
    """ecoguard's vLLM stat logger class; vLLM's base class stood in when vLLM is absent."""
    import importlib.util
    import sys
    import types

    if importlib.util.find_spec("vllm") is None:
        names = ("vllm", "vllm.v1", "vllm.v1.metrics", "vllm.v1.metrics.loggers")
        for name in names:
            sys.modules.setdefault(name, types.ModuleType(name))
        sys.modules[names[-1]].StatLoggerBase = type("StatLoggerBase", (), {})
    from ecoguard.engines.vllm_stat_logger import EcoguardStatLogger

    return EcoguardStatLogger


def _step_cpu_us(args: argparse.Namespace) -> float:
    """Median thread-CPU µs per vLLM engine step the stat logger's path adds (meter + ledger)."""
    from ecoguard.deployment import Deployment, ModelSpec
    from ecoguard.energy import CallInfo, get_meter
    from ecoguard.engines.vllm_plugin import StepAttributor
    from ecoguard.guard.install import install, uninstall

    scheduler = SimpleNamespace(num_running_reqs=8, num_waiting_reqs=0)
    iteration = SimpleNamespace(num_generation_tokens=8, finished_requests=())
    info = CallInfo(
        model_name="Qwen/Qwen2.5-7B-Instruct",
        precision="bf16",
        deployment=Deployment(model=ModelSpec(id="Qwen/Qwen2.5-7B-Instruct"), precision="bf16"),
        label="vllm",
    )
    added = []
    with tempfile.TemporaryDirectory(prefix="ecoguard-bench-") as tmp:
        install(**_settings("guard+meter+ledger", Path(tmp)))
        try:
            meter = get_meter()
            meter.wait_ready(5.0)
            cls = _stat_logger_class()
            logger = cls.__new__(cls)  # as vLLM builds it, with the attributor start_attribution
            logger.engine_index = 0  # would return (that installs from ECOGUARD_* variables)
            logger.attributor = attributor = StepAttributor(meter, info, (0,))
            steps = args.calls
            for _ in range(args.rounds + 1):
                start = time.thread_time()
                for _ in range(steps):
                    pass
                empty = time.thread_time() - start
                start = time.thread_time()
                for _ in range(steps):
                    logger.record(scheduler, iteration)
                added.append((time.thread_time() - start - empty) / steps)
            logger.attributor = None
            attributor.close()
        finally:
            uninstall()
    return statistics.median(added[1:]) * 1e6  # the first round warms the reference cache


def _profile(model: Any, ids: Any, mask: Any, output: Any, config: str, calls: int) -> None:
    from ecoguard.guard import wrappers
    from ecoguard.guard.install import install, uninstall

    cls = type(model)

    def no_op_generate(self: Any, inputs: Any = None, **kwargs: Any) -> Any:
        return output

    with tempfile.TemporaryDirectory(prefix="ecoguard-bench-") as tmp:
        install(**_settings(config, Path(tmp)))
        try:
            _warm(
                model,
                ids,
                mask,
                wrapt.FunctionWrapper(no_op_generate, wrappers.generate_wrapper),
                cls,
            )
            profiler = cProfile.Profile(time.thread_time)
            profiler.enable()
            for _ in range(calls):
                model.generate(ids, attention_mask=mask, max_new_tokens=NEW)
            profiler.disable()
        finally:
            uninstall()
            del cls.generate
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--profile", choices=CONFIGS, help="cProfile one configuration instead")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    _fake_driver()
    model = _tiny_llama()
    ids = torch.randint(3, 60, (BATCH, PROMPT), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    output = _prepared_output(ids)
    if args.profile:
        _profile(model, ids, mask, output, args.profile, args.calls)
        return
    figures = _added_cpu_us(model, ids, mask, output, args)
    step_us = _step_cpu_us(args)
    print(
        f"thread CPU added per generate call (tiny Llama, no-op generate, batch {BATCH}, "
        f"{NEW} new tokens; fake NVML, 1 GPU; median of {args.rounds} rounds x {args.calls} calls)"
    )
    for config in CONFIGS:
        print(f"  {config:<20} {figures[config]:7.1f} µs/call")
    print(f"  vLLM engine step (EcoguardStatLogger.record, meter + ledger) {step_us:7.1f} µs/step")


if __name__ == "__main__":
    main()
