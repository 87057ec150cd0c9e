"""What a question asks for: which of the five protocols answers it (optimize, compare,
estimate, diagnose, audit), from its words in English or Chinese and the facts found in it
(files named, code pasted, several precisions, a measured figure, a volume).
"""

from __future__ import annotations

from ecoguard.advisor.question import Question
from ecoguard.errors import UsageError

_AUDIT_WORDS = ("audit", "scan my code", "check my code", "审计", "扫描代码", "检查代码")
_COMPARE_WORDS = (
    "compare",
    "comparison",
    " vs ",
    " vs.",
    "versus",
    "all precisions",
    "every precision",
    "each precision",
    "side by side",
    "对比",
    "比较",
    "所有精度",
    "各种精度",
    "各精度",
    "全部精度",
    "better than",
    "worse than",
)
_DIAGNOSE_WORDS = (
    "why",
    "crazy",
    "too high",
    "too slow",
    "slow",
    "worse",
    "insane",
    "huge bill",
    "help",
    "problem",
    "expected",
    "diagnose",
    "what's wrong",
    "what is wrong",
    "high bill",
    "only get",
    "i get",
    "i'm getting",
    "getting only",
    "为什么",
    "为啥",
    "离谱",
    "太高",
    "太慢",
    "很慢",
    "变慢",
    "更慢",
    "更差",
    "更耗",
    "诊断",
    "怎么回事",
    "不正常",
    "帮帮",
    "救命",
    "只有",
)
_OPTIMIZE_WORDS = (
    "greenest",
    "best config",
    "best setup",
    "best precision",
    "best batch",
    "optimal",
    "optimize",
    "optimise",
    "recommend",
    "should i",
    "which precision",
    "most efficient",
    "efficient config",
    "lowest energy",
    "cheapest config",
    "how should",
    "最省",
    "最环保",
    "最绿",
    "最佳",
    "推荐",
    "怎么选",
    "应该用",
    "该用",
    "选哪",
    "优化",
    "最节能",
    "最划算",
    "最好的配置",
    "最优",
)
_ESTIMATE_WORDS = (
    "cost",
    "how much",
    "price",
    "bill",
    "spend",
    "$",
    "per month",
    "a month",
    "kwh",
    "energy use",
    "carbon",
    "co2",
    "estimate",
    "budget",
    "多少钱",
    "成本",
    "费用",
    "电费",
    "花费",
    "要花",
    "预算",
    "耗电",
    "碳排",
    "估算",
    "多少度",
)


# A question about the reference data itself: a data word and a counting word.
_DATA_WORDS = (
    "configurations",
    "configs",
    "dataset",
    "data set",
    "reference data",
    "reference rows",
    "rows",
    "数据集",
    "参考数据",
    "配置",
    "数据",
)
_COUNT_WORDS = ("how many", "really", "number of", "360", "count", "多少", "真的", "总共", "一共")


# "What do I do (about it)?" after a setting named with nothing else to go on.
_WHAT_TO_DO = ("怎么办", "咋办", "怎么处理", "如何处理", "what do i do", "what now", "what to do")


def _has_any(haystack: str, needles: tuple[str, ...]) -> bool:
    return any(n in haystack for n in needles)


def choose_protocol(lower: str, facts: Question) -> tuple[str, str]:
    """Pick the protocol from keywords and the facts read (``facts.protocol`` is not chosen yet).
    Order matters: an audit names files, a comparison asks for several precisions, a diagnosis
    reports a problem or a figure."""
    stated = (facts.requests_per_month, facts.total_tokens, facts.hours_per_day)
    volume = any(v is not None for v in stated)  # a volume or serving hours
    if facts.paths or _has_any(lower, _AUDIT_WORDS):
        return "audit", "names source files or asks for an audit"
    if facts.code:
        return "audit", "pastes code: audited as text, never run"
    if (
        facts.model is None
        and not (facts.has_figures or volume or facts.precisions)
        and _has_any(lower, _DATA_WORDS)
        and _has_any(lower, _COUNT_WORDS)
    ):
        return "data", "asks about the reference data itself"
    several = len(facts.precisions) >= 2
    if _has_any(lower, _COMPARE_WORDS) or ((" or " in lower or "还是" in lower) and several):
        return "compare", "asks to compare configurations"
    if facts.has_figures:
        return "diagnose", "reports a measured figure to check"
    if _has_any(lower, _DIAGNOSE_WORDS):
        return "diagnose", "reports a problem or asks why"
    if _has_any(lower, _OPTIMIZE_WORDS):
        return "optimize", "asks for the best configuration"
    if _has_any(lower, _ESTIMATE_WORDS) or volume:
        return "estimate", "asks what it will cost"
    if facts.model is not None:
        return "estimate", "names a model without a specific request; estimating it"
    if facts.precisions and facts.gpu is not None:
        # "FP8 on Blackwell?": a precision on a GPU, no model: every measured model on that GPU.
        return "compare", "asks about a precision on a GPU without a model"
    if facts.precisions and _has_any(lower, _WHAT_TO_DO):
        # "我用了 load_in_8bit=True，怎么办？": a setting and "what now": its trap, explained.
        return "diagnose", "names a setting and asks what to do about it"
    raise UsageError(
        "I could not tell what you want to know. Name a model and a GPU and ask, e.g.: "
        '"greenest config for Qwen2.5-3B on RTX 5090", "compare all precisions Qwen2.5-7B on 5090", '
        '"Mistral-7B on A800 cost for 1 million requests a month", '
        '"我想用 Yi-6B 跑 100 万字, 要花多少钱"'
    )
