"""The ``vllm.stat_logger_plugins`` entry point: ecoguard's stat logger for vLLM's front end.

vLLM requires a subclass of its ``StatLoggerBase``, so this module imports vLLM and is only
loaded by vLLM itself. The class is thin: with ``ECOGUARD_VLLM`` unset it does nothing, and
every call into ecoguard is contained (counted as a fault, never raised into the engine). The
work is in ``ecoguard.engines.vllm_plugin``.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase

from ecoguard.engines.vllm_plugin import enabled, observe_step, start_attribution
from ecoguard.faults import contained


class EcoguardStatLogger(StatLoggerBase):
    """Per-engine logger: one :class:`~ecoguard.engines.vllm_plugin.StepAttributor` per
    data-parallel engine, fed after every step."""

    def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
        self.engine_index = engine_index
        self.attributor = None
        if not enabled():
            return
        with contained("vllm.stat_logger"):
            self.attributor = start_attribution(vllm_config, engine_index)

    def record(
        self,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
    ) -> None:
        if self.attributor is None:
            return
        with contained("vllm.record"):
            observe_step(self.attributor, scheduler_stats, iteration_stats)

    def log_engine_initialized(self) -> None:
        pass

    def __del__(self) -> None:
        if getattr(self, "attributor", None) is not None:
            with contained("vllm.close"):
                self.attributor.close()
