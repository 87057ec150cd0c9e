"""Per-call overhead of the guard's generate wrapper (warn mode, no measurement).

A trivial generate-like method is wrapped by the real ``generate_wrapper`` through
``wrapt.FunctionWrapper`` (exactly as the patch table does), then timed against the same
method unwrapped, alternating rounds in one run so both see the same machine state. The model
object is registered with the guard first, as after a guarded ``from_pretrained``; inputs are
batch size 4 (so no batch-size-one streak builds up). No torch needed.

    .venv/bin/python benchmarks/guard_overhead.py [--calls 200000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

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


if __name__ == "__main__":
    main()
