"""The reference J/token a measured call is compared with, cached per configuration.

The figure comes from :func:`ecoguard.knowledge.estimator.estimate` for the call's configuration
(its deployment, batch, prompt length rounded up to a power of two, and the GPUs it ran on). An
estimate takes milliseconds, so each configuration is estimated once; and since building and
hashing that configuration's Deployment costs tens of microseconds, a call first looks its
reference up by its own facts, with the deployment by identity (a model's calls all pass the one
object its guard remembers), which costs well under one.
"""

from __future__ import annotations

import threading
from typing import Any

from ecoguard.deployment import Deployment, GpuSpec, ModelSpec
from ecoguard.energy.attribution import GpuTrack
from ecoguard.faults import record_fault
from ecoguard.knowledge import estimator as knowledge_estimator

Reference = tuple[float | None, str]  # (J per token or None, its tier; "none" without one)

# Bounded: configurations are few in practice, and a process that makes many just estimates again.
MAX_ENTRIES = 1024


def length_bucket(tokens: int) -> int:
    """``tokens`` rounded up to a power of two (at least 16): few cache keys, same rows."""
    return max(16, 1 << (max(1, int(tokens)) - 1).bit_length())


class ReferenceCache:
    """Reference J/token per call (:meth:`lookup`), estimated once per configuration; and the
    energy a coalesced call saved (:meth:`batching_saved_j`), its ratio read once per batch."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self._by_config: dict[Any, Reference] = {}
        # (batch the GPU ran, the call's own requests) -> J/token ratio alone vs batched
        self._saving_ratios: dict[tuple[int, int], float | None] = {}
        # (id of the call's deployment, the call's facts, its devices) -> (that deployment, ref)
        self._by_call: dict[tuple[Any, ...], tuple[Any, Reference]] = {}
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._by_config.clear()
            self._by_call.clear()
            self._saving_ratios.clear()

    def rearm_in_child(self) -> None:
        """In a forked child: a fresh lock (a parent thread may have held it at the fork)."""
        self._lock = threading.Lock()

    def lookup(self, info: Any, devices: tuple[int, ...], tracks: list[GpuTrack]) -> Reference:
        """The reference for a call described by ``info`` (a CallInfo) on ``devices``."""
        deployment = info.deployment
        prompt = info.prompt_tokens
        call_key = (
            id(deployment),
            info.model_name,
            info.precision,
            info.batch_size,
            length_bucket(prompt) if prompt else prompt,
            info.max_new_tokens,
            devices,
        )
        hit = self._by_call.get(call_key)
        if hit is not None and hit[0] is deployment:
            return hit[1]
        result = self._for_config(configuration(info, tracks))
        with self._lock:
            if len(self._by_call) > MAX_ENTRIES:
                self._by_call.clear()
            self._by_call[call_key] = (deployment, result)
        return result

    def batching_saved_j(
        self, energy_j: float, requests: int, batch_size: int | None
    ) -> float | None:
        """Estimated energy (J) a coalesced call saved against running its requests alone.

        A call whose ``batch_size`` (the batch the GPU ran) exceeds its own ``requests`` was
        coalesced by ecoguard's batching. Run alone, its tokens would have cost more per token by
        the ratio the measured A800 batch sweep gives between the two batch sizes (tier
        ``derived``, :func:`ecoguard.knowledge.estimator.batch_energy_ratio`); the saving is the
        difference. None for a call that was not coalesced, or without the sweep rows."""
        if not energy_j > 0.0 or requests <= 0 or not batch_size or batch_size <= requests:
            return None  # `not > 0.0` is also true for NaN
        key = (int(batch_size), int(requests))
        if key in self._saving_ratios:
            ratio = self._saving_ratios[key]
        else:
            try:
                ratio = knowledge_estimator.batch_energy_ratio(key[0], key[1])[0]
            except Exception as exc:  # no sweep rows: no estimate, never a failed record
                record_fault("meter.batching_saved", exc)
                ratio = None
            with self._lock:
                if len(self._saving_ratios) > MAX_ENTRIES:
                    self._saving_ratios.clear()
                self._saving_ratios[key] = ratio
        if ratio is None or ratio <= 1.0:
            return None
        return energy_j * (ratio - 1.0)

    def _for_config(self, deployment: Deployment) -> Reference:
        key: Any = deployment
        try:
            hash(key)
        except TypeError:
            key = repr(deployment)
        with self._lock:
            cached = self._by_config.get(key)
        if cached is not None:
            return cached
        result: Reference = (None, "none")
        try:
            # Imported with this module, never here: a first import on a generating thread
            # holds the module's import lock, and a fork at that moment left the child waiting
            # on it forever (forked workers hung in their first record).
            est = knowledge_estimator.estimate(deployment, settings=self.settings)
            per_1k = est.energy_per_1k_tokens_j
            if per_1k is not None and est.tier != "none":
                result = (per_1k / 1000.0, est.tier)
        except Exception as exc:
            record_fault("meter.reference", exc)
        with self._lock:
            if len(self._by_config) > MAX_ENTRIES:
                self._by_config.clear()
            self._by_config[key] = result
        return result


def configuration(info: Any, tracks: list[GpuTrack]) -> Deployment:
    """The configuration whose reference J/token a call described by ``info`` is compared with:
    its deployment (or one built from its facts), with the call's batch and prompt length where
    known, and the GPU the meter sees where the deployment names none."""
    profile = tracks[0].profile_key if tracks else None
    gpu_name = tracks[0].info.name if tracks else None
    deployment = info.deployment
    if deployment is None:
        deployment = Deployment(
            model=ModelSpec(id=info.model_name),
            gpu=GpuSpec(profile=profile, name=gpu_name, count=max(1, len(tracks))),
            precision=info.precision,
            batch_size=info.batch_size,
            prompt_tokens=info.prompt_tokens,
            generation_tokens=info.max_new_tokens,
        )
    else:
        changes: dict[str, Any] = {}
        if info.batch_size is not None:
            changes["batch_size"] = info.batch_size
        if info.prompt_tokens is not None:
            changes["prompt_tokens"] = info.prompt_tokens
        if deployment.gpu.profile is None and profile is not None:
            changes["gpu"] = GpuSpec(profile=profile, name=gpu_name, count=max(1, len(tracks)))
        if changes:
            deployment = deployment.with_(**changes)
    # The reference is a per-configuration figure; an exact prompt length per call would make
    # every call a cache miss and run the estimator on the user's thread. Round it up to a power
    # of two (the estimator matches rows by length, not token by token).
    if deployment.prompt_tokens:
        deployment = deployment.with_(
            prompt_tokens=length_bucket(deployment.prompt_tokens),
            consecutive_bs1_calls=None,
            interactive=None,
        )
    return deployment
