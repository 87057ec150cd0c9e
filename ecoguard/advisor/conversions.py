"""One unit conversion the advisor made while reading a question, kept so the answer can show
it: ``1 million requests a month`` -> 1,000,000, ``100万字`` -> 500,000 tokens, ``Blackwell`` ->
RTX 5090. Every extractor that converts appends one; the answer lists them all.
"""

from __future__ import annotations

from dataclasses import dataclass

from ecoguard.advisor.texts import Text


@dataclass(frozen=True, slots=True)
class Conversion:
    """One unit conversion, shown to the user: ``source`` as written, ``value`` after
    conversion, ``rule`` the assumption used (both in English and Chinese)."""

    field: str
    source: Text
    value: float
    rule: Text

    @classmethod
    def of(cls, field: str, source: str, value: float, en: str, zh: str) -> Conversion:
        """A conversion whose source reads the same in English and Chinese."""
        return cls(field, Text(source, source), value, Text(en, zh))

    def to_dict(self) -> dict[str, object]:
        return {
            "field": self.field,
            "source": self.source.en,
            "value": self.value,
            "rule": self.rule.en,
        }
