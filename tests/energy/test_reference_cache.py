"""The reference J/token of a record: looked up per call, estimated once per configuration."""

from __future__ import annotations

from types import SimpleNamespace

from ecoguard.config import Settings
from ecoguard.deployment import Deployment, GpuSpec, ModelSpec
from ecoguard.energy import CallInfo
from ecoguard.energy.reference import ReferenceCache, configuration
from ecoguard.knowledge import estimator

SETTINGS = Settings(ledger_path=None)
MODEL = Deployment(
    model=ModelSpec(id="Qwen/Qwen2.5-7B-Instruct"),
    gpu=GpuSpec(profile="a100"),
    precision="fp16",
    consecutive_bs1_calls=40,
    interactive=True,
)
TRACK = SimpleNamespace(profile_key="h100", info=SimpleNamespace(name="NVIDIA H100"))


def expected(deployment: Deployment) -> tuple[float | None, str]:
    """The reference as computed before issue 31: a copy of the deployment with the call's
    batch and prompt, the prompt rounded up to a power of two, then the estimator."""
    est = estimator.estimate(deployment, settings=SETTINGS)
    return est.energy_per_1k_tokens_j / 1000.0, est.tier


def counting_estimator(monkeypatch) -> list[Deployment]:
    seen: list[Deployment] = []
    real = estimator.estimate

    def estimate(deployment, **kwargs):
        seen.append(deployment)
        return real(deployment, **kwargs)

    monkeypatch.setattr(estimator, "estimate", estimate)
    return seen


def test_call_facts_override_the_model_deployment_as_a_per_call_copy_did(monkeypatch):
    cache = ReferenceCache(SETTINGS)
    for batch, prompt, bucket in ((1, 100, 128), (8, 100, 128), (8, 300, 512), (8, None, None)):
        info = CallInfo(model_name="q", batch_size=batch, prompt_tokens=prompt, deployment=MODEL)
        copy = MODEL.with_(batch_size=batch, prompt_tokens=prompt)
        if prompt:
            copy = copy.with_(prompt_tokens=bucket, consecutive_bs1_calls=None, interactive=None)
        assert configuration(info, [TRACK]) == copy
        assert cache.lookup(info, (0,), [TRACK]) == expected(copy)


def test_a_deployment_without_a_gpu_profile_gets_the_meters():
    info = CallInfo(batch_size=4, deployment=Deployment(model=ModelSpec(id="m"), precision="fp16"))
    config = configuration(info, [TRACK])
    assert (config.gpu.profile, config.gpu.name, config.gpu.count) == ("h100", "NVIDIA H100", 1)
    assert config.batch_size == 4


def test_each_configuration_is_estimated_once(monkeypatch):
    seen = counting_estimator(monkeypatch)
    cache = ReferenceCache(SETTINGS)
    calls = [
        CallInfo(batch_size=4, prompt_tokens=prompt, deployment=MODEL) for prompt in (90, 100, 120)
    ]
    for info in calls * 3:
        cache.lookup(info, (0,), [TRACK])
    assert len(seen) == 1  # one bucket (128), one batch: one estimate
    # An equal deployment that is another object: found by value, not estimated again.
    twin = Deployment(**{name: getattr(MODEL, name) for name in MODEL.__dataclass_fields__})
    assert twin is not MODEL and twin == MODEL
    cache.lookup(CallInfo(batch_size=4, prompt_tokens=100, deployment=twin), (0,), [TRACK])
    assert len(seen) == 1
    cache.lookup(CallInfo(batch_size=5, prompt_tokens=100, deployment=MODEL), (0,), [TRACK])
    assert len(seen) == 2
    cache.clear()  # both maps: a test that breaks the estimator sees it called again
    cache.lookup(calls[0], (0,), [TRACK])
    assert len(seen) == 3


def test_calls_without_a_deployment_are_keyed_by_their_facts(monkeypatch):
    seen = counting_estimator(monkeypatch)
    cache = ReferenceCache(SETTINGS)
    first = CallInfo(model_name="Qwen/Qwen2.5-7B-Instruct", precision="fp16", batch_size=1)
    other = CallInfo(model_name="Qwen/Qwen2.5-7B-Instruct", precision="fp16", batch_size=8)
    a100 = SimpleNamespace(profile_key="a100", info=SimpleNamespace(name="NVIDIA A100"))
    refs = [cache.lookup(info, (0,), [a100]) for info in (first, other, first, other)]
    assert refs[0] == refs[2] and refs[1] == refs[3] and refs[0] != refs[1]
    assert len(seen) == 2
    assert [d.batch_size for d in seen] == [1, 8]
