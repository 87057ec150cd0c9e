"""The advisor's protocols as one table, like the rules' ``RULES``: each entry says how to run
the protocol on a request and how it behaves (what it needs, what it fills in).

``answers.answer`` (the one assembly path for free text, the CLI flags and the MCP tools) runs a
protocol through ``PROTOCOLS[name].run``; ``rendering.SECTIONS`` draws each protocol's body
(rendering imports this table, never the other way). Adding a protocol is one entry here and
one section there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ecoguard.advisor import protocols
from ecoguard.advisor.about_data import about_data
from ecoguard.advisor.question import OBSERVED_FIELDS, Question
from ecoguard.config import Settings
from ecoguard.deployment import Deployment

DEFAULT_GPU_PROFILE = "rtx4090d"


@dataclass(frozen=True, slots=True)
class Request:
    """One protocol run: the question, the deployment framed from it and what the assembly
    derived (the monthly volume, how far it may batch, whether it is served)."""

    question: Question
    deployment: Deployment = field(default_factory=Deployment)
    settings: Settings = field(default_factory=Settings)
    requests_per_month: int | None = None
    max_batch: int | None = None
    serving: bool | None = None  # None: an API is served, a chat or batch job is not
    audit_gpu: str | None = None

    @property
    def language(self) -> str:
        return self.question.language


@dataclass(frozen=True, slots=True)
class ProtocolSpec:
    """One protocol: how to ``run`` a request, and how it behaves, as fields (the assembly
    and the renderers read these, never the protocol's name)."""

    name: str
    summary: str
    run: Callable[[Request], protocols.AdvisorResult]
    needs_model: bool  # a model must be named, else the question is asked back
    fills_precision: bool  # a missing precision defaults to FP16 (compare lists all)
    # The precision comes from the observed figures; without any, a default is filled and a
    # trap named without a model is explained from its evidence rows (diagnose).
    infers_precision: bool = False
    # A precision named without a model is compared across the measured models (compare).
    compares_without_model: bool = False
    # With a GPU named, a trap precision without a model is compared across models rather than
    # explained (optimize, compare).
    compares_with_gpu: bool = False
    reads_code: bool = False  # source files or pasted code (audit)
    # When the monthly volume default is listed: "always", "with_model", "when_batched" (only
    # if the answer's batching advice used it) or "never".
    lists_volume: str = "never"
    # An orange/red trap its own figures call negligible is not the answer's mood (the
    # protocols that price a recommendation: estimate, optimize).
    weighs_saving: bool = False
    # The everyday equivalents describe the recommendation, not the configuration asked about.
    prices_recommendation: bool = False


# The facts each protocol takes, by the protocols' own keyword names: the request's own fields,
# else the question's (under the question's name where it differs).
_COMMON = ("settings", "requests_per_month", "language")
_SERVED = (*_COMMON, "max_batch", "serving", "concurrency", "hours_per_day", "lossless")
_MONEY = ("currency", "cny_per_usd", "price_per_kwh", "price_currency")


_QUESTION_NAMES = {"lossless": "accuracy_critical"}


def _terms(req: Request, *groups: tuple[str, ...]) -> dict[str, Any]:
    """The facts named in ``groups`` as a protocol's keyword arguments."""
    return {
        name: getattr(req, name)
        if hasattr(req, name)
        else getattr(req.question, _QUESTION_NAMES.get(name, name))
        for names in groups
        for name in names
    }


def _run_compare(req: Request) -> protocols.AdvisorResult:
    if req.question.model is None:
        return protocols.compare_across_models(
            req.deployment.gpu.profile or DEFAULT_GPU_PROFILE,
            req.question.precisions,
            language=req.language,
            architecture=req.deployment.gpu.architecture,
        )
    return protocols.compare(req.deployment, **_terms(req, _COMMON))


def _run_optimize(req: Request) -> protocols.AdvisorResult:
    if req.question.model is None:
        return _run_compare(req)  # "should I use FP8 on Blackwell?": across the measured models
    return protocols.optimize(req.deployment, use=req.deployment.use, **_terms(req, _SERVED))


def _run_estimate(req: Request) -> protocols.AdvisorResult:
    return protocols.estimate(req.deployment, **_terms(req, _SERVED, _MONEY))


def _run_diagnose(req: Request) -> protocols.AdvisorResult:
    return protocols.diagnose(req.deployment, **_terms(req, OBSERVED_FIELDS, _COMMON))


def _run_data(req: Request) -> protocols.AdvisorResult:
    return about_data(req.question.gpu, req.language)


def _run_audit(req: Request) -> protocols.AdvisorResult:
    question = req.question
    return protocols.audit(
        question.paths, language=question.language, code=question.code, gpu=req.audit_gpu
    )


PROTOCOLS: dict[str, ProtocolSpec] = {
    spec.name: spec
    for spec in (
        ProtocolSpec(
            "optimize",
            "recommended precision and batch size",
            _run_optimize,
            needs_model=True,
            fills_precision=True,
            compares_with_gpu=True,
            lists_volume="always",
            weighs_saving=True,
            prices_recommendation=True,
        ),
        ProtocolSpec(
            "compare",
            "every precision side by side (or one precision across the measured models)",
            _run_compare,
            needs_model=True,
            fills_precision=False,
            compares_without_model=True,
            compares_with_gpu=True,
            lists_volume="with_model",
        ),
        ProtocolSpec(
            "estimate",
            "energy, money and CO2 now and optimized",
            _run_estimate,
            needs_model=True,
            fills_precision=True,
            lists_volume="always",
            weighs_saving=True,
        ),
        ProtocolSpec(
            "diagnose",
            "observed figures against the reference: which trap matches",
            _run_diagnose,
            needs_model=False,
            fills_precision=False,
            infers_precision=True,
            lists_volume="when_batched",
        ),
        ProtocolSpec(
            "audit",
            "source files or pasted code through ecoguard.audit",
            _run_audit,
            needs_model=False,
            fills_precision=False,
            reads_code=True,
        ),
        ProtocolSpec(
            "data",
            "the reference data's own counts beside the study's published claim",
            _run_data,
            needs_model=False,
            fills_precision=False,
        ),
    )
}
