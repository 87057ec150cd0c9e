"""Small extractors, one per kind of fact, each driven by a table: serving hours, the use
(chat, API, batch job) read from the whole question, where the GPU runs (PUE), the electricity
price and its currency, the currency asked for and an exchange rate, the region, and the source
files named or code pasted into the question.

Each takes the question (lower-cased where it says so, or with model and GPU names masked) and
returns a typed result; none raises on odd input. Patterns are bounded and linear.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ecoguard.advisor.numbers import NUMBER, first_group, lazy_pattern, parse_number
from ecoguard.advisor.question import SERVED_BY_VOLUME
from ecoguard.advisor.texts import Text
from ecoguard.advisor.volume import Volume
from ecoguard.advisor.words import Word, following

# ---------------------------------------------------------------------------------------------
# Serving hours a day

_HOURS = lazy_pattern(rf"({NUMBER})\s*(?:hours?|hrs?|h|个小时|小时)(?![a-z])", re.I)
_DAY_AFTER = ("a day", "per day", "/day", "each day", "every day", "daily", "每天", "一天")
_ALL_DAY = ("24/7", "全天候", "24小时不间断", "around the clock", "round the clock")


def hours_per_day(masked: str, lower: str) -> float | None:
    """``8 hours a day`` -> 8; ``每天运行 8 小时`` -> 8; ``24/7`` -> 24."""
    said_day = any(w in lower for w in _DAY_AFTER)  # a day word is needed either way
    for m in _HOURS().finditer(masked) if said_day else ():
        before = masked[max(0, m.start() - 12) : m.start()].lower()
        after = masked[m.end() : m.end() + 14].lower()
        if any(w in after for w in _DAY_AFTER) or "每天" in before:
            return min(24.0, float(m.group(1).replace(",", "")))
    if any(w in lower for w in _ALL_DAY):
        return 24.0
    return None


# ---------------------------------------------------------------------------------------------
# The use, from the whole question

# A production service: serving, whatever else the question says.
_PRODUCTION_WORDS = r"\bproduction\b|\bprod\b|生产|线上|上线"
_PRODUCTION = re.compile(_PRODUCTION_WORDS, re.I)
# The first use whose words the question holds (only whether they occur matters).
USE_WORDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "batch",
        re.compile(
            r"batch job|batch processing|batch inference|offline|bulk|nightly job|one-off|"
            r"for loop|in a loop|loop over|"
            r"离线|批处理|批量处理|跑批|批量推理",
            re.I,
        ),
    ),
    ("chat", re.compile(r"chatbot|\bchat|assistant|interactive|聊天|对话|客服|助手", re.I)),
    (
        "api",
        re.compile(
            r"\bapi\b|endpoint|web service|\bserv(?:e|es|ing|er|ice)\b|backend|saas|接口|在线服务|"
            rf"服务|{_PRODUCTION_WORDS}",
            re.I,
        ),
    ),
)


class UseFact(NamedTuple):
    """The use a question describes, named as the Question's fields. ``use`` None: nothing in it
    says (a default applies). ``serving``: requests from many users arrive over time, so batching
    them is possible."""

    use: str | None
    serving: bool
    use_reason: Text | None = None


def infer_use(lower: str, volume: Volume, *, one_off_tokens: bool) -> UseFact:
    """Read the use from words (batch job, chat, API, production), and from the volume read:
    concurrency, user counts and request volumes. A chat with several users at once is still
    chat, but served."""
    concurrency = volume.concurrency
    stated = next((use for use, rx in USE_WORDS if rx.search(lower)), None)
    many = concurrency is not None and concurrency > 1
    counted = volume.requests_per_month is not None or any(
        q.kind == "users" for q in volume.quantities
    )
    production = bool(_PRODUCTION.search(lower))
    if stated == "batch":
        return UseFact(
            "batch", False, Text("the question describes a batch job", "问题描述的是批处理任务")
        )
    if stated == "chat":
        if many or counted or production:
            why = _serving_reason(concurrency, counted, production)
            return UseFact(
                "chat",
                True,
                Text(f"interactive chat, served: {why.en}", f"交互式聊天，且在线服务：{why.zh}"),
            )
        return UseFact("chat", False, Text("interactive chat", "交互式聊天"))
    if stated == "api" or many or counted or production:
        return UseFact("api", True, _serving_reason(concurrency, counted, production))
    if one_off_tokens:
        return UseFact(
            "batch",
            False,
            Text("a one-off text volume is processed offline", "一次性的文本量按离线批处理计"),
        )
    return UseFact(None, False, None)


def _serving_reason(concurrency: int | None, volume: bool, production: bool) -> Text:
    if concurrency is not None and concurrency > 1:
        return Text(f"{concurrency:,} requests at once", f"同时 {concurrency:,} 个请求")
    if production:
        return Text("a production service", "生产环境的在线服务")
    if volume:
        return SERVED_BY_VOLUME
    return Text("an API or service", "API 或在线服务")


# ---------------------------------------------------------------------------------------------
# The serving engine (its kernels decide which traps apply: ``ecoguard.engines.engine_args``)

# (engine, a word every mention holds, the pattern that confirms it)
_ENGINE_WORDS: tuple[tuple[str, str, str], ...] = (
    ("vllm", "vllm", r"\bvllm\b"),
    ("sglang", "sglang", r"\bsglang\b"),
    ("tgi", "t", r"\btgi\b|text[-_ ]generation[-_ ]inference"),
    ("tensorrt_llm", "llm", r"tensorrt[-_ ]?llm|\btrt[-_ ]?llm\b"),
    ("llamacpp", "llama", r"llama\.cpp|llama-server|\bllamacpp\b"),
)


def serving_engine(text: str) -> str | None:
    """The serving engine the question names (``served by vLLM``, ``on TGI``), or None."""
    lower = text.lower()
    for engine, word, pattern in _ENGINE_WORDS:
        if word in lower and re.search(pattern, lower):
            return engine
    return None


# ---------------------------------------------------------------------------------------------
# Accuracy first: the user cannot trade output quality for energy

_ACCURACY_WORDS = (
    "accuracy-critical",
    "accuracy critical",
    "accuracy is critical",
    "accuracy matters",
    "accuracy is important",
    "accuracy is key",
    "quality-critical",
    "quality critical",
    "lose accuracy",
    "accuracy loss",
    "quality loss",
    "lossless",
    "精度要求高",
    "精度要求很高",
    "准确率要求",
    "准确性要求",
    "不能损失精度",
    "不能降低精度",
    "不能牺牲精度",
)


def accuracy_critical(lower: str) -> bool:
    """The question says output quality comes first (``accuracy-critical``, ``no quality loss``,
    ``精度要求高``): lossy quantization is not recommended, and its cost to accuracy is said."""
    return any(w in lower for w in _ACCURACY_WORDS)


# ---------------------------------------------------------------------------------------------
# Where the GPU runs: a local machine has no data-centre overhead (PUE 1.0)

_LOCAL = lazy_pattern(
    r"\bat home\b|\bhome lab\b|\bhomelab\b|\bmy (?:own )?(?:local )?(?:pc|desktop|computer|"
    r"workstation|machine|gaming pc|rig)\b|\blocal(?:ly)? (?:gpu|machine|pc|box)\b|"
    r"\bmy local\b|\bon[- ]prem(?:ise|ises)? desktop\b|家里|在家|本地|自己的电脑|台式机|个人电脑",
    re.I,
)


def local_machine(text: str) -> bool:
    """The GPU runs on the user's own machine (no facility overhead counted: PUE 1.0)."""
    lower = text.lower()
    if not any(w in lower for w in _LOCAL_GATE):
        return False
    return bool(_LOCAL().search(text))


# Words one of which every _LOCAL match holds (a cheap test before the pattern is compiled).
_LOCAL_GATE = ("home", "my ", "local", "prem", "家", "本地", "自己", "台式", "个人")


# ---------------------------------------------------------------------------------------------
# Electricity price and currency

# Currency symbol or word -> ISO code.
CURRENCIES: tuple[tuple[str, str], ...] = (
    (r"\$|usd|us dollars?|dollars?|美元", "USD"),
    (r"€|eur|euros?|欧元", "EUR"),
    (r"£|gbp|pounds?|英镑", "GBP"),
    (r"¥|元|cny|rmb|yuan|块钱?|人民币", "CNY"),
    (r"円|jpy|yen|日元", "JPY"),
    (r"₹|inr|rupees?|卢比", "INR"),
    (r"cents?|¢", "USD-cent"),
)
SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£", "CNY": "¥", "JPY": "JPY ", "INR": "₹"}


def _cur(tag: str) -> str:
    return "|".join(f"(?P<{tag}{i}>{rx})" for i, (rx, _c) in enumerate(CURRENCIES))


_CUR = _cur("c")
_KWH = r"(?:/|per|a|每|一)\s*(?:kwh|kw·h|kw h|度|千瓦时)"
_PRICE_BEFORE = lazy_pattern(rf"(?:{_CUR})\s*({NUMBER})\s*{_KWH}", re.I)
_PRICE_AFTER = lazy_pattern(rf"({NUMBER})\s*(?:{_CUR})\s*{_KWH}", re.I)
_PRICE_WORD = lazy_pattern(
    rf"(?:电价|electricity (?:price|costs?|is)|power price)\s*(?:是|为|=|:|：|of|is)?\s*"
    rf"(?:(?:{_CUR})\s*)?({NUMBER})\s*(?:{_cur('d')})?",
    re.I,
)


class Price(NamedTuple):
    per_kwh: float
    currency: str  # ISO code: USD, EUR, GBP, CNY, JPY, INR


def _currency_of(match: re.Match[str]) -> str | None:
    groups = match.groupdict()
    for i, (_rx, code) in enumerate(CURRENCIES):
        if groups.get(f"c{i}") or groups.get(f"d{i}"):
            return code
    return None


def electricity_price(masked: str) -> Price | None:
    """``$0.15/kWh``, ``€0.25/kWh``, ``0.6 元/度``, ``12 cents per kWh``, ``电价 0.6 元``."""
    lower = masked.lower()
    if not any(w in lower for w in ("kwh", "kw", "度", "电价", "electricity", "power price")):
        return None
    for lazy in (_PRICE_BEFORE, _PRICE_AFTER, _PRICE_WORD):
        m = lazy().search(masked)
        if not m:
            continue
        number = next(g for g in m.groups() if g is not None and re.fullmatch(NUMBER, g.strip()))
        value = float(number.replace(",", ""))
        code = _currency_of(m)
        if lazy is _PRICE_WORD and code is None:
            continue
        if code == "USD-cent":
            value, code = value / 100.0, "USD"
        return Price(value, code or "USD")
    return None


# ---------------------------------------------------------------------------------------------
# The currency asked for, an exchange rate, and the price

_RE_RATE = lazy_pattern(
    rf"(?:rate|汇率|exchange rate)\s*(?:of|is|=|:|：|为)?\s*({NUMBER})"
    rf"|1\s*(?:usd|\$|美元|dollar)\s*=\s*({NUMBER})\s*(?:cny|rmb|元|人民币|yuan)"
    rf"|({NUMBER})\s*(?:cny|rmb|元|yuan)\s*(?:/|per|每)\s*(?:usd|\$|美元|dollar)"
    rf"|usd\s*/\s*cny\s*(?:=|:)?\s*({NUMBER})",
    re.I,
)


class MoneyFacts(NamedTuple):
    """The currency asked for, an exchange rate and the price, named as the Question's fields."""

    currency: str = "USD"
    cny_per_usd: float | None = None
    price_per_kwh: float | None = None
    price_currency: str | None = None


# Words one of which every _RE_RATE match holds.
_RATE_GATE = ("rate", "汇率", "usd", "$", "美元", "dollar")


def money(lower: str, masked: str, language: str) -> MoneyFacts:
    """The currency asked for, an exchange rate, and the electricity price and its currency. A
    question in Chinese asks in yuan unless it names dollars (as ``Question.from_flags`` reads
    ``--language zh``)."""
    currency = "USD"
    # 元 alone is yuan; 美元, 欧元, 日元, 港元 are other currencies.
    if re.search(r"人民币|\bcny\b|\brmb\b|(?<![美欧日港])元|块钱|yuan", lower) or (
        language == "zh" and "$" not in lower and "美元" not in lower
    ):
        currency = "CNY"
    m = _RE_RATE().search(masked) if any(w in lower for w in _RATE_GATE) else None
    rate = parse_number(first_group(m)) if m else None
    price = electricity_price(masked)
    if price is None:
        return MoneyFacts(currency, rate)
    if price.currency not in ("USD", "CNY"):
        currency = price.currency
    return MoneyFacts(currency, rate, price.per_kwh, price.currency)


# ---------------------------------------------------------------------------------------------
# The region (grid price and carbon intensity)

_REGIONS: dict[str, str] = {
    "china": "china",
    "chinese": "china",
    "cn": "china",
    "prc": "china",
    "中国": "china",
    "国内": "china",
    "us": "us",
    "usa": "us",
    "america": "us",
    "美国": "us",
    "eu": "eu",
    "europe": "eu",
    "european": "eu",
    "欧洲": "eu",
    "欧盟": "eu",
    "uk": "uk",
    "britain": "uk",
    "england": "uk",
    "英国": "uk",
    "france": "fr",
    "french": "fr",
    "法国": "fr",
    "germany": "de",
    "german": "de",
    "德国": "de",
    "india": "in",
    "印度": "in",
    "japan": "jp",
    "日本": "jp",
    "canada": "ca",
    "加拿大": "ca",
}

_REGIONS_HAN = tuple((k, v) for k, v in _REGIONS.items() if not k.isascii())
# Nouns after "Chinese" that make it a language, not a region ("Chinese characters").
_LANGUAGE_NOUNS = frozenset(
    {
        "characters",
        "chars",
        "character",
        "text",
        "texts",
        "words",
        "language",
        "tokens",
        "tokenizer",
    }
)


def region(words: list[Word]) -> str | None:
    """The first region named ("Chinese characters", "Chinese text" name a language)."""
    for i, (_s, _e, word) in enumerate(words):
        w = word.lower()
        if w == "chinese" and following(words, i) in _LANGUAGE_NOUNS:
            continue
        if w in _REGIONS:
            return _REGIONS[w]
        if word.isascii():
            continue
        for zh, key in _REGIONS_HAN:
            if zh in word:
                return key
    return None


# ---------------------------------------------------------------------------------------------
# Source files named, and code pasted into a question

_CODE_SIGNS = lazy_pattern(
    r"from_pretrained\s*\(|BitsAndBytesConfig\s*\(|TorchAoConfig\s*\(|\.generate\s*\(|"
    r"^\s*(?:from\s+[\w.]+\s+)?import\s+\w|quantization_config\s*=|torch\.compile\s*\(",
    re.M,
)
# Where code starts on a line of prose: an assignment, an import, or a known call.
_CODE_START = lazy_pattern(
    r"(?:^|(?<=[\s:：`]))(?:[A-Za-z_][\w.]*\s*=\s*[A-Za-z_][\w.]*\s*[(.]|from\s+[\w.]+\s+import\b|"
    r"import\s+\w|[A-Za-z_][\w.]*\.from_pretrained\s*\(|from_pretrained\s*\(|BitsAndBytesConfig\s*\()",
    re.M,
)


def pasted_code(text: str) -> str | None:
    """The Python code pasted into a question, or None. Fenced blocks first; else from the
    first line that starts code to the end (trailing prose after a closing bracket dropped)."""
    if ("(" not in text and "import" not in text and "=" not in text) or not _CODE_SIGNS().search(
        text
    ):
        return None
    fence = re.search(r"```(?:python|py)?\n?(.{1,10000}?)```", text, re.S)
    if fence:
        return fence.group(1).strip() or None
    m = _CODE_START().search(text)
    if not m:
        return None
    code = text[m.start() :].strip().strip("`")
    last = max(code.rfind(")"), code.rfind("]"))
    if last >= 0 and not code[last + 1 :].strip().startswith(("(", ".", "[")):
        code = code[: last + 1]
    prose = text.replace(code or "", " ")
    if re.fullmatch(_CONFIG_ONLY, code or "") and re.search(_NAMES_A_MODEL, prose):
        return None  # a setup told in prose: its flags are read as the question's facts
    return code or None


# A lone quantization config written inside a sentence ("BitsAndBytesConfig(load_in_4bit=True)
# for Qwen2.5-0.5B, one prompt at a time"): prose about a setup, not code to audit.
_CONFIG_ONLY = r"(?:BitsAndBytesConfig|TorchAoConfig)\([^()\n]{0,200}\)"
# ... when the sentence names the model it is for (a size or a hub id): without one, the config
# is audited as code (its flags' trap answered from the evidence).
_NAMES_A_MODEL = r"\d(?:\.\d+)?[bBmM]\b|\w/[\w.-]"


def source_paths(words: list[Word]) -> list[str]:
    """Python files and notebooks the question names (``serve.py``, ``app/main.ipynb``)."""
    return [t for _s, _e, t in words if t.lower().endswith((".py", ".ipynb")) and len(t) > 3]
