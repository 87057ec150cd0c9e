"""A fork while batched generate calls are in flight (gunicorn-style pre-fork with batching on).

The child inherits only the forking thread: the callers the parent had inside a batcher are not
there and never leave. Before the ``batching`` fork hook, ``uninstall()`` in such a child waited
forever for them (20 of 20 children), and a child that re-installed with another batch size hung
inside its first ``generate`` (10 of 10). Each child here runs under ``signal.alarm``, and the
script under a subprocess timeout, so a hang fails the test instead of hanging the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

_SCRIPT = textwrap.dedent(
    """
    import os, signal, threading
    import torch
    import transformers
    import ecoguard
    from ecoguard.batching.hook import _registry

    torch.set_num_threads(1)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        {model!r}, dtype=torch.float32
    ).eval()
    call = dict(input_ids=torch.tensor([[7, 8, 9]]), max_new_tokens=3, do_sample=False)
    alone = model.generate(**call)
    common = dict(
        mode="warn", rules="batch-size-one:off,small-model-quant:off", backend="simulated",
        ledger_path="off", batching=True,
    )
    # Two callers wait in a group that never fills (8 rows, a minute's wait): in flight.
    ecoguard.install(max_batch_size=8, max_wait_ms=60_000, **common)
    results = []
    callers = [
        threading.Thread(target=lambda: results.append(model.generate(**call)))
        for _ in range(2)
    ]
    for caller in callers:
        caller.start()
    batcher = None
    while batcher is None:
        batcher = _registry.get(model)
    with batcher._lock:
        assert batcher._inflight_changed.wait_for(lambda: batcher._inflight >= 2, timeout=60)

    def child(reinstall):
        signal.alarm(20)  # a hung child ends by SIGALRM, not 0
        if reinstall:  # another batch size: the parent's batcher is replaced (closed)
            ecoguard.install(max_batch_size=4, max_wait_ms=0, **common)
            if not torch.equal(model.generate(**call), alone):
                os._exit(3)
        ecoguard.uninstall()
        os._exit(0)

    codes = []
    for reinstall in (False, True):
        pid = os.fork()
        if pid == 0:
            child(reinstall)
        codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    ecoguard.uninstall()  # the parent's callers are released and run their batch
    for caller in callers:
        caller.join(60)
    same = len(results) == 2 and all(torch.equal(r, alone) for r in results)
    print("children", codes, "parent", same)
    """
)


def test_a_child_forked_while_batched_calls_wait_uninstalls_and_generates(tiny_llama_dir):
    pytest.importorskip("transformers")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ECOGUARD_")}
    env["OMP_NUM_THREADS"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT.format(model=str(tiny_llama_dir))],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    # 0 for each child: uninstall() returned at once, and the re-installed child's first
    # generate (a new batcher, max_batch_size 4) gave the lone call's tokens.
    assert "children [0, 0] parent True" in out.stdout, out.stdout + out.stderr[-3000:]


class _SlowModel:
    """A stand-in whose generate is never reached: only close()'s bounded wait is tested."""

    def generate(self, **kwargs):
        raise AssertionError("not called")


def test_close_waits_at_most_its_timeout_and_says_so():
    """A caller that never leaves (as after a fork without the hook, or a generate that hangs):
    close(timeout_s) returns False after about that long instead of waiting forever, counts
    the fault, and calls made afterwards run alone."""
    from ecoguard.batching import Batcher
    from ecoguard.faults import fault_counts

    batcher = Batcher(_SlowModel(), max_batch_size=4)
    with batcher._lock:
        batcher._inflight = 1  # a caller inside that will never finish
    done = threading.Event()
    outcome: list[bool] = []

    def close() -> None:
        outcome.append(batcher.close(timeout_s=0.2))
        done.set()

    threading.Thread(target=close, daemon=True).start()
    assert done.wait(30), "close() waited past its timeout"
    assert outcome == [False]
    assert batcher.closed
    assert fault_counts().get("batching.close") == 1
    assert batcher.close(timeout_s=0.0) is False  # still one inside: returns at once
