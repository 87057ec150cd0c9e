"""An example guarded workload for the Grafana demo: a tiny model generating in a loop.

The model is built from a config (random weights, no download) and guarded by
``ecoguard.install``; energy comes from the meter's backend (``ECOGUARD_BACKEND=simulated`` on a
machine without a GPU) and ``/metrics`` is served on ``ECOGUARD_METRICS_PORT`` (9464 here by
default). Batch sizes vary so the batch-size panel has a distribution; a run of batch-size-one
calls lets the guard raise its ``batch-size-one`` finding.

    ECOGUARD_BACKEND=simulated python grafana/example_server.py

Stop it with Ctrl-C.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import time


def main() -> None:
    os.environ.setdefault("ECOGUARD_BACKEND", "simulated")
    os.environ.setdefault("ECOGUARD_METRICS_PORT", "9464")
    import torch
    import transformers

    import ecoguard
    from ecoguard.testing.models import build_tiny_model

    settings = ecoguard.install(measure=True)
    path = build_tiny_model(tempfile.mkdtemp(prefix="ecoguard-example-"), "llama")
    model = transformers.AutoModelForCausalLM.from_pretrained(path)
    print(
        f"ecoguard example: metrics on {settings.metrics_addr}:{settings.metrics_port}/metrics",
        flush=True,
    )
    generator = torch.Generator().manual_seed(0)
    for batch_size in itertools.cycle((1, 1, 1, 1, 2, 4, 8)):
        input_ids = torch.randint(3, 250, (batch_size, 16), generator=generator)
        model.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=32,
            do_sample=False,
        )
        time.sleep(0.2)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
