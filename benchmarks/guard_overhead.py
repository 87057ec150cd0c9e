"""Per-call overhead of the guard's generate wrapper (warn mode, no measurement).

A trivial generate-like method is wrapped by the real ``generate_wrapper`` through
``wrapt.FunctionWrapper`` (exactly as the patch table does), then timed against the same
method unwrapped, alternating rounds in one run so both see the same machine state. The model
object is registered with the guard first, as after a guarded ``from_pretrained``; inputs are
batch size 4 (so no batch-size-one streak builds up). No torch needed.

Real models (warn, meter on, no GPU backend), with ``--real``: tiny Llama models built from a
``LlamaConfig`` (2 and 32 layers, hidden size 16, random weights), ``generate`` with
``min_new_tokens`` = ``max_new_tokens`` = 2, batch size 2, one torch thread, the guard installed
throughout. Each round times the same model three ways in thread CPU time
(``time.thread_time``): unwrapped, under the guard's wrapper, and under a pass-through wrapt
wrapper (``wrapped(*args, **kwargs)`` and nothing else) installed the same way, the last two in
rotating order. Figures, medians over the rounds:

- whole-call difference: guarded minus unwrapped CPU per call. A call costs milliseconds, so
  this is within the noise of a shared machine.
- isolated: the CPU spent outside the real ``generate`` (each call's inner CPU is timed),
  wrapped minus unwrapped, so the model's own work and its noise drop out.
- guard over the pass-through: the two isolated figures of the same round subtracted. After
  milliseconds of model work the CPU's caches hold the model's data, not the wrapper's code, so
  even a wrapper that does nothing pays about 15-20 µs here against well under 1 µs in a hot
  loop; that floor is what a wrapt patch costs (the project patches only through wrapt), and
  the guard's own cost on a real call is what it adds on top.

    .venv/bin/python benchmarks/guard_overhead.py [--calls 200000] [--rounds 7]
    .venv/bin/python benchmarks/guard_overhead.py --real [--real-calls 40] [--real-rounds 15]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import wrapt

from ecoguard.deployment import Deployment, ModelSpec
from ecoguard.guard import wrappers
from ecoguard.guard.install import install, uninstall


class _Shape(tuple):
    pass


class _Inputs:
    shape = _Shape((4, 16))


class FakeModel:
    def generate(self, inputs=None, **kwargs):
        return inputs


def _time(fn, inputs, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(inputs, max_new_tokens=8)
    return (time.perf_counter() - start) / calls


def fake_model_overhead(args: argparse.Namespace) -> None:
    install(mode="warn", measure=False)
    try:
        plain_cls = type("Plain", (FakeModel,), {})
        guarded_cls = type("Guarded", (FakeModel,), {})
        guarded_cls.generate = wrapt.FunctionWrapper(
            vars(FakeModel)["generate"], wrappers.generate_wrapper
        )
        plain, guarded = plain_cls(), guarded_cls()
        wrappers._remember(
            guarded, Deployment(model=ModelSpec(id="fake", params_b=7.0), precision="fp16")
        )
        inputs = _Inputs()
        _time(plain.generate, inputs, 10_000)
        _time(guarded.generate, inputs, 10_000)
        plain_s, guarded_s = [], []
        for _ in range(args.rounds):
            plain_s.append(_time(plain.generate, inputs, args.calls))
            guarded_s.append(_time(guarded.generate, inputs, args.calls))
    finally:
        uninstall()
    plain_us = statistics.median(plain_s) * 1e6
    guarded_us = statistics.median(guarded_s) * 1e6
    print(f"unguarded generate-like call: {plain_us:.3f} µs/call")
    print(f"guarded (warn, no meter):     {guarded_us:.3f} µs/call")
    print(
        f"overhead:                     {guarded_us - plain_us:.3f} µs/call "
        f"(ratio {guarded_us / plain_us:.1f}x on a call that does nothing; "
        f"median of {args.rounds} rounds x {args.calls} calls)"
    )


def _tiny_llama(layers: int) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config).eval()


def _pass_through(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    return wrapped(*args, **kwargs)


def _median_us(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1e6


def _real_overhead(layers: int, calls: int, rounds: int) -> dict[str, float]:
    """Thread-CPU µs per call on one real model, the guard installed throughout (warn, meter on,
    no GPU backend). Each round times ``calls`` calls three ways, the last two in rotating
    order: the unwrapped generate, the guard's wrapper and a pass-through wrapper (both through
    wrapt, as the patch table installs them). Each call's CPU inside the real generate is timed,
    so a wrapper's isolated cost is the CPU outside it minus the unwrapped round's."""
    import torch

    model = _tiny_llama(layers)
    ids = torch.randint(3, 60, (2, 4), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    from transformers.generation.utils import GenerationMixin

    inner_cpu = [0.0]
    original = vars(GenerationMixin)["generate"]  # the unpatched function (nothing installed)

    def call() -> None:
        with torch.no_grad():
            model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=2,
                min_new_tokens=2,
                do_sample=False,
                pad_token_id=0,
            )

    def timed_generate(self: Any, *a: Any, **k: Any) -> Any:
        start = time.thread_time()
        try:
            return original(self, *a, **k)
        finally:
            inner_cpu[0] += time.thread_time() - start

    cls = type(model)
    wrapped = {
        "guard": wrapt.FunctionWrapper(timed_generate, wrappers.generate_wrapper),
        "pass": wrapt.FunctionWrapper(timed_generate, _pass_through),
    }

    def round_cpu(generate: Any) -> tuple[float, float]:
        """(CPU per call, CPU per call inside the real generate)."""
        cls.generate = generate
        call()
        inner_cpu[0] = 0.0
        start = time.thread_time()
        for _ in range(calls):
            call()
        total = time.thread_time() - start
        return total / calls, inner_cpu[0] / calls

    install(mode="warn", measure=True)
    try:
        for generate in wrapped.values():
            round_cpu(generate)  # warm up; the guard analyses the model once, here
        whole: dict[str, list[float]] = {name: [] for name in wrapped}
        isolated: dict[str, list[float]] = {name: [] for name in wrapped}
        over_pass, plain = [], []
        names = list(wrapped)
        for index in range(rounds):
            plain_total, plain_inner = round_cpu(timed_generate)
            plain.append(plain_total)
            for name in names[index % 2 :] + names[: index % 2]:
                total, inner = round_cpu(wrapped[name])
                whole[name].append(total - plain_total)
                isolated[name].append((total - inner) - (plain_total - plain_inner))
            over_pass.append(isolated["guard"][-1] - isolated["pass"][-1])
    finally:
        uninstall()
        del cls.generate
    return {
        "path_us": _guard_path_alone(model, ids, mask, calls * 500, rounds),
        "unguarded_us": _median_us(plain),
        "whole_us": _median_us(whole["guard"]),
        "isolated_us": _median_us(isolated["guard"]),
        "pass_us": _median_us(isolated["pass"]),
        "over_pass_us": _median_us(over_pass),
        "over_pass_spread": (min(over_pass) * 1e6, max(over_pass) * 1e6),
    }


def _guard_path_alone(model: Any, ids: Any, mask: Any, calls: int, rounds: int) -> float:
    """Thread-CPU µs the guard adds per call on this real model when the call it wraps does no
    work (the model's class gets a no-op generate): exact, free of the model's own noise."""
    cls = type(model)

    def no_op_generate(self: Any, inputs: Any = None, **kwargs: Any) -> Any:
        return inputs

    guarded_generate = wrapt.FunctionWrapper(no_op_generate, wrappers.generate_wrapper)
    install(mode="warn", measure=True)
    try:
        cls.generate = guarded_generate
        model.generate(ids, attention_mask=mask, max_new_tokens=2)  # judged once here
        added = []
        for _ in range(rounds):
            timings = []
            for generate in (no_op_generate, guarded_generate, no_op_generate):
                cls.generate = generate
                start = time.thread_time()
                for _ in range(calls):
                    model.generate(ids, attention_mask=mask, max_new_tokens=2)
                timings.append((time.thread_time() - start) / calls)
            added.append(timings[1] - (timings[0] + timings[2]) / 2)
    finally:
        uninstall()
        del cls.generate
    return statistics.median(added) * 1e6


def real_model_overhead(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)
    from ecoguard.energy import get_meter

    for layers in (2, 32):
        figures = _real_overhead(layers, args.real_calls, args.real_rounds)
        low, high = figures["over_pass_spread"]
        print(
            f"real tiny Llama, {layers:2d} layers: unguarded {figures['unguarded_us']:.0f} µs per "
            f"call (thread CPU); guard's whole-call difference {figures['whole_us']:+.1f} µs; "
            f"isolated: guard {figures['isolated_us']:.1f} µs, pass-through wrapper "
            f"{figures['pass_us']:.1f} µs, guard over the pass-through "
            f"{figures['over_pass_us']:+.1f} µs (rounds {low:+.1f} to {high:+.1f}; medians of "
            f"{args.real_rounds} rounds x {args.real_calls} calls); guard path alone (no-op "
            f"generate on this model) {figures['path_us']:.2f} µs"
        )
    assert get_meter() is None  # the meter the benchmark started is stopped again


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--real", action="store_true", help="also time real tiny models")
    parser.add_argument("--real-calls", type=int, default=40)
    parser.add_argument("--real-rounds", type=int, default=15)
    args = parser.parse_args()
    fake_model_overhead(args)
    if args.real:
        real_model_overhead(args)


if __name__ == "__main__":
    main()
