"""One way to hold wording in both languages: ``Text(en, zh)``, and the rules' trap texts in the
answer's language.

The rule table (``ecoguard.rules.table``) holds each rule's wording in English and Chinese; a
Chinese answer shows the English text for a rule with no Chinese wording (a new rule is never
dropped for want of a translation).
"""

from __future__ import annotations

from dataclasses import dataclass

from ecoguard.rules.table import ROWS


@dataclass(frozen=True, slots=True)
class Text:
    """The same sentence in English and Chinese."""

    en: str
    zh: str

    def get(self, language: str) -> str:
        return self.zh if language == "zh" else self.en

    def format(self, **values: object) -> Text:
        return Text(self.en.format(**values), self.zh.format(**values))


BLANK = Text("", "")  # no sentence, in either language


TIERS_ZH = {
    "measured": "实测",
    "reported": "公布",
    "derived": "推算",
    "extrapolated": "外推",
    "local": "本机实测",
    "live": "实时",
    "none": "无",
}


def trap_text(rule: str | None, language: str, message: str, fix_summary: str) -> tuple[str, str]:
    """``(message, fix_summary)`` in the answer's language: the rule table's Chinese wording, or
    the English given for a rule without one."""
    row = ROWS.get(rule or "")
    if language == "zh" and row is not None and row.message_zh:
        return row.message_zh, row.fix_summary_zh
    return message, fix_summary
