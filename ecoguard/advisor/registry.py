"""The advisor's protocols as one table, like the rules' ``RULES``: each entry says how to run
the protocol on a request and how it behaves (what it needs, what it fills in).

``answers.answer`` (the one assembly path for free text, the CLI flags and the MCP tools) runs a
protocol through ``PROTOCOLS[name].run``; ``rendering.SECTIONS`` draws each protocol's body
(rendering imports this table, never the other way). Adding a protocol is one entry here and
one section there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ecoguard.advisor import protocols
from ecoguard.advisor.about_data import about_data
from ecoguard.advisor.protocols import Request
from ecoguard.advisor.question import DEFAULT_GPU


@dataclass(frozen=True, slots=True)
class ProtocolSpec:
    """One protocol: how to ``run`` a request, and how it behaves, as fields (the assembly
    and the renderers read these, never the protocol's name)."""

    name: str
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


def _run_compare(req: Request) -> protocols.AdvisorResult:
    if req.question.model is None:
        return protocols.compare_across_models(
            req.deployment.gpu.profile or DEFAULT_GPU,
            req.question.precisions,
            language=req.language,
            architecture=req.deployment.gpu.architecture,
        )
    return protocols.compare(req)


def _run_optimize(req: Request) -> protocols.AdvisorResult:
    if req.question.model is None:
        return _run_compare(req)  # "should I use FP8 on Blackwell?": across the measured models
    return protocols.optimize(req)


def _run_data(req: Request) -> protocols.AdvisorResult:
    return about_data(req.question.gpu, req.language)


PROTOCOLS: dict[str, ProtocolSpec] = {
    spec.name: spec
    for spec in (
        ProtocolSpec(
            "optimize",
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
            _run_compare,
            needs_model=True,
            fills_precision=False,
            compares_without_model=True,
            compares_with_gpu=True,
            lists_volume="with_model",
        ),
        ProtocolSpec(
            "estimate",
            protocols.estimate,
            needs_model=True,
            fills_precision=True,
            lists_volume="always",
            weighs_saving=True,
        ),
        ProtocolSpec(
            "diagnose",
            protocols.diagnose,
            needs_model=False,
            fills_precision=False,
            infers_precision=True,
            lists_volume="when_batched",
        ),
        ProtocolSpec(
            "audit",
            protocols.audit,
            needs_model=False,
            fills_precision=False,
            reads_code=True,
        ),
        ProtocolSpec(
            "data",
            _run_data,
            needs_model=False,
            fills_precision=False,
        ),
    )
}
