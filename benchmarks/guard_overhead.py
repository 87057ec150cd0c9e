"""Per-call overhead of the guard's generate wrapper (warn mode, no measurement).

A trivial generate-like method is wrapped by the real ``generate_wrapper`` through
``wrapt.FunctionWrapper`` (exactly as the patch table does), then timed against the same
method unwrapped, alternating rounds in one run so both see the same machine state. The model
object is registered with the guard first, as after a guarded ``from_pretrained``; inputs are
batch size 4 (so no batch-size-one streak builds up). No torch needed.

Real models (warn, meter on, no GPU backend), with ``--real``: tiny Llama models built from a
``LlamaConfig`` (2 and 32 layers, hidden size 16, random weights), ``generate`` with
``min_new_tokens`` = ``max_new_tokens`` = 2, batch size 2, one torch thread. Two figures, both
in thread CPU time (``time.thread_time``):

- A/B/A: rounds of unguarded, guarded, unguarded calls (install/uninstall between rounds); the
  guard's cost is guarded minus the mean of the two unguarded rounds around it. A generate call
  here costs milliseconds, so this difference is within the noise of a shared machine.
- isolated: the guard's own CPU per call: the CPU spent outside the real ``generate`` (timed
  from inside the guard's wrapper) in guarded rounds, minus the same in the unguarded rounds
  around them, so the noise of the model's own work drops out.
- the same isolated figure for a pass-through wrapt wrapper (``wrapped(*args, **kwargs)`` and
  nothing else) installed the same way: the floor any wrapper pays on this path. After
  milliseconds of model work the CPU's caches hold the model's data, not the wrapper's code, so
  even that floor is tens of µs here against well under 1 µs in a hot loop. The guard's own
  cost on a real call is its isolated figure minus this floor.

    .venv/bin/python benchmarks/guard_overhead.py [--calls 200000] [--rounds 7]
    .venv/bin/python benchmarks/guard_overhead.py --real [--real-calls 40] [--real-rounds 3]
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


def _real_overhead(layers: int, calls: int, rounds: int, wrapper: Any = None) -> dict[str, float]:
    """Thread-CPU µs per call: unguarded, guarded, A/B/A difference, and the isolated figure
    (with ``wrapper`` in place of the guard's, for the pass-through floor)."""
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

    # Both kinds of round call a timed copy of the real generate, so the CPU spent inside the real
    # call is known; guarded rounds wrap it with the guard's own wrapper through wrapt (as the
    # patch table does), unguarded rounds call it with nothing installed.
    cls = type(model)
    guarded_generate = wrapt.FunctionWrapper(
        timed_generate, wrapper if wrapper is not None else wrappers.generate_wrapper
    )

    def round_cpu(guarded: bool) -> tuple[float, float]:
        if guarded:
            install(mode="warn", measure=True)
            cls.generate = guarded_generate
        else:
            uninstall()
            cls.generate = timed_generate
        call()  # uninstall() forgets the model: its one-time analysis is not a per-call cost
        inner_cpu[0] = 0.0
        start = time.thread_time()
        for _ in range(calls):
            call()
        total = time.thread_time() - start
        return total / calls, inner_cpu[0] / calls

    try:
        round_cpu(True)  # warm up
        plain, guarded, aba, isolated = [], [], [], []
        before = round_cpu(False)
        for _ in range(rounds):
            total, inner = round_cpu(True)
            after = round_cpu(False)
            plain.extend((before[0], after[0]))
            guarded.append(total)
            aba.append(total - (before[0] + after[0]) / 2)
            # CPU outside the real generate, guarded minus unguarded (the caller's loop and
            # no_grad block cost the same in both and cancel).
            outside_plain = (before[0] - before[1] + after[0] - after[1]) / 2
            isolated.append(total - inner - outside_plain)
            before = after
    finally:
        uninstall()
        del cls.generate
    return {
        "path_us": _guard_path_alone(model, ids, mask, calls * 500, rounds),
        "unguarded_us": statistics.median(plain) * 1e6,
        "guarded_us": statistics.median(guarded) * 1e6,
        "aba_us": statistics.median(aba) * 1e6,
        "isolated_us": statistics.median(isolated) * 1e6,
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
        # guard, floor, guard, floor: both see the same drift of the machine
        guard, floor = [], []
        for _ in range(2):
            figures = _real_overhead(layers, args.real_calls, args.real_rounds)
            guard.append(figures["isolated_us"])
            floor.append(
                _real_overhead(layers, args.real_calls, args.real_rounds, _pass_through)[
                    "isolated_us"
                ]
            )
        isolated, passing = statistics.median(guard), statistics.median(floor)
        print(
            f"real tiny Llama, {layers:2d} layers: unguarded {figures['unguarded_us']:.0f} µs, "
            f"guarded {figures['guarded_us']:.0f} µs per call (thread CPU); guard's cost "
            f"A/B/A {figures['aba_us']:+.1f} µs, isolated {isolated:.1f} µs, pass-through "
            f"wrapper's isolated {passing:.1f} µs, guard over the pass-through "
            f"{isolated - passing:+.1f} µs (medians of 2 x {args.real_rounds} rounds x "
            f"{args.real_calls} calls); guard path alone (no-op generate on this model) "
            f"{figures['path_us']:.2f} µs"
        )
    assert get_meter() is None  # the meter the benchmark started is stopped again


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--real", action="store_true", help="also time real tiny models")
    parser.add_argument("--real-calls", type=int, default=40)
    parser.add_argument("--real-rounds", type=int, default=3)
    args = parser.parse_args()
    fake_model_overhead(args)
    if args.real:
        real_model_overhead(args)


if __name__ == "__main__":
    main()
