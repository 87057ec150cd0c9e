"""The advisor's answer record: a protocol's result plus what the question said, what was
assumed and how it was framed. Made by ``answers.answer`` (the one assembly path); read by the
renderers (``rendering``, ``sections``, ``diagnosis``), which import it and never the assembly,
so running and rendering import one way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ecoguard.advisor.accelerators import NearestProfile, Vendor
from ecoguard.advisor.conversions import Conversion
from ecoguard.advisor.deployments import HonestyNote
from ecoguard.advisor.protocols import AdvisorResult
from ecoguard.advisor.question import Default, Question
from ecoguard.advisor.serving import BatchingAdvice
from ecoguard.advisor.texts import Text


@dataclass(frozen=True, slots=True)
class Answer:
    """A protocol result plus what the question said and what was assumed."""

    result: AdvisorResult
    question: Question | None = None
    defaults: tuple[Default, ...] = ()
    honesty: tuple[HonestyNote, ...] = ()
    extra_conversions: tuple[Conversion, ...] = ()
    measurement_protocol: bool = False
    settings_used: dict[str, Any] = field(default_factory=dict)
    batching: BatchingAdvice | None = None
    gpu_match: NearestProfile | None = None
    warnings: tuple[Text, ...] = ()
    asks: Text | None = None  # what to add to the question to price it
    vendor: Vendor | None = None  # a non-NVIDIA accelerator named

    @property
    def language(self) -> str:
        return self.result.language

    def to_dict(self) -> dict[str, Any]:
        body = self.result.to_dict()
        body["defaults"] = [d.to_dict() for d in self.defaults]
        # The Chinese wording is for rendering; the JSON keeps one wording (English).
        body["honesty"] = [h.to_dict() for h in self.honesty]
        body["settings"] = dict(self.settings_used)
        if self.extra_conversions:
            body["conversions"] = [c.to_dict() for c in self.extra_conversions]
        if self.batching is not None:
            body["batching"] = self.batching.to_dict()
        if self.gpu_match is not None:
            body["gpu_match"] = self.gpu_match.to_dict()
        if self.warnings:
            body["warnings"] = [w.en for w in self.warnings]
        if self.asks is not None:
            body["asks"] = self.asks.en
        if self.vendor is not None:
            body["accelerator"] = {"vendor": self.vendor.key, "name": self.vendor.name}
        out: dict[str, Any] = {"protocol": self.result.protocol}
        if self.question is not None and self.question.text is not None:
            out["parsed"] = self.question.to_dict()  # what free text was understood as
        out.update(body)
        return out
