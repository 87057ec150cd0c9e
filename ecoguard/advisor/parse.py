"""Free-text questions (English or Chinese) -> a protocol and its parameters.

The parser is pure and bounded: it reads at most ``MAX_QUESTION_BYTES`` of text, refuses binary
input, and uses only patterns without nested quantifiers, so its time is linear in the input.
It never resolves names against the knowledge tables itself (that is ``build.py``'s job); it
records what the question said and every unit conversion it made, so the answer can show them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ecoguard.advisor.accelerators import NVIDIA_CARDS, VENDOR_TOKENS, Vendor, find_vendor
from ecoguard.advisor.accelerators import fold as fold_card
from ecoguard.advisor.extract import (
    electricity_price,
    hours_per_day,
    infer_use,
    local_machine,
    pasted_code,
)
from ecoguard.advisor.numbers import NUMBER, parse_number, scale_factor
from ecoguard.advisor.texts import Text
from ecoguard.advisor.volume import (
    Conversion,
    extract_volume,
    words_to_digits,
)
from ecoguard.deployment import PRECISION_ALIASES
from ecoguard.errors import UsageError

MAX_QUESTION_BYTES = 10_240

BYTES_PER_TOKEN = 4.0  # plain text: "1 GB of text" ~ 250M tokens

PROTOCOLS: tuple[str, ...] = ("optimize", "compare", "estimate", "diagnose", "audit")


@dataclass(frozen=True, slots=True)
class OutOfData:
    """Something the question asks about that no reference row covers (AMD GPUs, batch > 64,
    sequences > 4096, GPTQ/AWQ/GGUF)."""

    topic: str  # amd-gpu, accelerator, batch-size, sequence-length, quant-method
    detail: Text
    vendor: str | None = None  # accelerators: a key of accelerators.VENDORS

    def to_dict(self) -> dict[str, str]:
        out = {"topic": self.topic, "detail": self.detail.en}
        if self.vendor:
            out["vendor"] = self.vendor
        return out


@dataclass(frozen=True, slots=True)
class ParsedQuestion:
    """What a question said. ``None`` means not stated (defaults are applied later and listed)."""

    text: str
    language: str  # "en" | "zh"
    protocol: str
    protocol_reason: str
    model: str | None = None  # as written: "Qwen2.5-3B", "mistral-7b", "7B"
    model_size_b: float | None = None  # from the name, when it carries a size
    gpu: str | None = None  # as written, normalised: "5090", "a800", "t4", "blackwell"
    gpus: tuple[str, ...] = ()
    precision: str | None = None  # canonical, the current/asked-about one
    precisions: tuple[str, ...] = ()  # every precision mentioned, in order
    batch_size: int | None = None
    prompt_tokens: int | None = None
    generation_tokens: int | None = None
    use: str | None = None
    requests_per_month: int | None = None
    total_tokens: int | None = None  # a one-off text volume to generate
    hours_per_day: float | None = None
    region: str | None = None
    currency: str = "USD"
    cny_per_usd: float | None = None
    price_per_kwh: float | None = None
    price_currency: str | None = None
    int8_threshold: float | None = None
    double_quant: bool | None = None
    compiled: bool | None = None
    observed_throughput_tok_s: float | None = None
    observed_power_w: float | None = None
    observed_energy_j_per_1k: float | None = None
    paths: tuple[str, ...] = ()
    code: str | None = None  # Python pasted into the question (audited, never run)
    concurrency: int | None = None  # requests in flight at once, as stated
    tokens_period: str | None = None  # "month" when total_tokens recur monthly; None one-off
    serving: bool = False  # requests from many users over time: batching applies
    use_reason: Text | None = None
    local: bool = False  # the GPU runs on the user's own machine (PUE 1.0)
    conversions: tuple[Conversion, ...] = ()
    out_of_data: tuple[OutOfData, ...] = ()
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "language": self.language,
            "protocol": self.protocol,
            "protocol_reason": self.protocol_reason,
        }
        for name in (
            "model",
            "model_size_b",
            "gpu",
            "precision",
            "batch_size",
            "prompt_tokens",
            "generation_tokens",
            "use",
            "requests_per_month",
            "total_tokens",
            "hours_per_day",
            "region",
            "cny_per_usd",
            "price_per_kwh",
            "price_currency",
            "int8_threshold",
            "double_quant",
            "compiled",
            "observed_throughput_tok_s",
            "observed_power_w",
            "observed_energy_j_per_1k",
            "concurrency",
            "tokens_period",
        ):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        out["currency"] = self.currency
        if len(self.precisions) > 1:
            out["precisions"] = list(self.precisions)
        if len(self.gpus) > 1:
            out["gpus"] = list(self.gpus)
        if self.paths:
            out["paths"] = list(self.paths)
        if self.code:
            out["code"] = self.code
        out["serving"] = self.serving
        if self.use_reason is not None:
            out["use_reason"] = self.use_reason.en
        if self.local:
            out["local"] = True
        out["conversions"] = [c.to_dict() for c in self.conversions]
        out["out_of_data"] = [o.to_dict() for o in self.out_of_data]
        if self.notes:
            out["notes"] = list(self.notes)
        return out


# ---------------------------------------------------------------------------------------------
# Input checks


def check_question(text: object) -> str:
    """Reject what cannot be a question: not text, empty, over 10 kB, or binary. Returns the
    stripped text."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise UsageError("the question is binary data, not UTF-8 text") from None
    if not isinstance(text, str):
        raise UsageError(f"the question must be text, got {type(text).__name__}")
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > MAX_QUESTION_BYTES:
        raise UsageError(
            f"the question is {size:,} bytes; the limit is {MAX_QUESTION_BYTES:,} bytes (10 kB). "
            "Ask about one deployment at a time, or audit code with `ecoguard audit PATH`."
        )
    stripped = text.strip()
    if not stripped:
        raise UsageError(
            'empty question; try: ecoguard advise "greenest config for Qwen2.5-3B on RTX 5090"'
        )
    # Binary: NUL bytes, undecodable bytes smuggled in by the OS (surrogate escapes), or mostly
    # control characters.
    controls = 0
    for ch in stripped:
        code = ord(ch)
        if code == 0 or 0xDC80 <= code <= 0xDCFF:
            raise UsageError("the question contains binary data (NUL or undecodable bytes)")
        if code < 32 and ch not in "\t\n\r":
            controls += 1
    if controls > max(2, len(stripped) // 20):
        raise UsageError("the question looks like binary data (control characters)")
    return stripped


def detect_language(text: str) -> str:
    """``zh`` when the text carries Chinese characters, else ``en``."""
    han = sum(1 for ch in text if "\u4e00" <= ch <= "\u9fff")
    return "zh" if han >= 2 or (han and han * 4 >= len(text)) else "en"


# ---------------------------------------------------------------------------------------------
# Tables used for detection (resolution against the knowledge tables happens in build.py)

# Lower-cased token -> normalised GPU text passed to knowledge.resolve_gpu.
_GPU_TOKENS: dict[str, str] = {
    "5090": "rtx5090",
    "rtx5090": "rtx5090",
    "4090d": "rtx4090d",
    "rtx4090d": "rtx4090d",
    "4090": "rtx4090",
    "rtx4090": "rtx4090",
    "3090": "rtx3090",
    "rtx3090": "rtx3090",
    "a800": "a800",
    "a100": "a100",
    "h100": "h100",
    "h800": "h800",
    "h200": "h200",
    "h20": "h20",
    "t4": "t4",
    "l4": "l4",
    "l40": "l40",
    "l40s": "l40s",
    "v100": "v100",
    "a10": "a10",
    "a10g": "a10g",
    "a6000": "a6000",
    "b200": "b200",
    "b100": "b100",
    "gb200": "gb200",
    "pro6000": "rtxpro6000",
    "rtxpro6000": "rtxpro6000",
}
# Architecture words -> the GPU of that family with the most reference data.
_ARCH_GPUS: dict[str, tuple[str, str]] = {
    "blackwell": ("rtx5090", "RTX 5090"),
    "turing": ("t4", "Tesla T4"),
    "ampere": ("a800", "A800"),
    "ada": ("rtx4090d", "RTX 4090D"),
    "lovelace": ("rtx4090d", "RTX 4090D"),
    "hopper": ("h100", "H100"),
}
_OTHER_QUANT = {"gptq": "GPTQ", "awq": "AWQ", "gguf": "GGUF", "exl2": "EXL2", "hqq": "HQQ"}
_MODEL_FAMILIES = frozenset(
    {
        "qwen",
        "qwen1.5",
        "qwen2",
        "qwen2.5",
        "qwen3",
        "mistral",
        "mixtral",
        "llama",
        "llama2",
        "llama3",
        "llama-2",
        "llama-3",
        "tinyllama",
        "yi",
        "yi-1.5",
        "phi",
        "phi-2",
        "phi-3",
        "gemma",
        "gemma2",
        "deepseek",
        "baichuan",
        "baichuan2",
        "chatglm",
        "glm",
        "internlm",
        "falcon",
        "opt",
        "smollm",
        "smollm2",
        "gpt2",
        "gpt-2",
        "bloom",
        "olmo",
        "starcoder",
        "codellama",
        "vicuna",
    }
)
# Model names without a size in them, as people write them -> the name the registry resolves.
_SHORT_MODELS: dict[str, str] = {
    "tinyllama": "TinyLlama-1.1B",
    "phi-3-mini": "Phi-3-mini",
    "phi3-mini": "Phi-3-mini",
    "phi-3-small": "Phi-3-small",
    "phi3-small": "Phi-3-small",
    "phi-3-medium": "Phi-3-medium",
    "phi3-medium": "Phi-3-medium",
}
# Words after a bare size ("100B tokens") that mean it is not a model size.
_NOT_MODEL_AFTER = frozenset(
    {"token", "tokens", "request", "requests", "words", "chars", "users", "bytes"}
)

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

# Token pattern: runs of ASCII word characters (with . - / + = kept inside names and code),
# or runs of Han characters. One character class per alternative: linear.
_REGIONS_HAN = tuple((k, v) for k, v in _REGIONS.items() if not k.isascii())
_TOKEN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-/+]*|[\u4e00-\u9fff]+")
_SIZE_PART = re.compile(r"(\d+(?:\.\d+)?)([bBmM])")


def _tokens(text: str) -> list[tuple[int, int, str]]:
    out = []
    for m in _TOKEN.finditer(text):
        raw = m.group(0).rstrip(".-/+")
        if raw:
            out.append((m.start(), m.start() + len(raw), raw))
    return out


def _mask(text: str, spans: list[tuple[int, int]]) -> str:
    chars = list(text)
    for start, end in spans:
        for i in range(start, end):
            chars[i] = " "
    return "".join(chars)


def _window(text: str, start: int, end: int, before: int = 12, after: int = 30) -> tuple[str, str]:
    return text[max(0, start - before) : start].lower(), text[end : end + after].lower()


def _has_any(haystack: str, needles: tuple[str, ...]) -> bool:
    return any(n in haystack for n in needles)


# ---------------------------------------------------------------------------------------------
# Protocol choice

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


@dataclass(frozen=True, slots=True)
class ProtocolSignals:
    """The facts that steer the protocol choice besides the question's words."""

    paths: tuple[str, ...] = ()
    code: str | None = None
    precisions: tuple[str, ...] = ()
    observed: bool = False
    volume: bool = False
    model: str | None = None
    gpu: str | None = None


def _choose_protocol(lower: str, signals: ProtocolSignals) -> tuple[str, str]:
    """Pick the protocol from keywords and the facts found. Order matters: an audit names files,
    a comparison asks for several precisions, a diagnosis reports a problem or a figure."""
    if signals.paths or _has_any(lower, _AUDIT_WORDS):
        return "audit", "names source files or asks for an audit"
    if signals.code:
        return "audit", "pastes code: audited as text, never run"
    several = len(signals.precisions) >= 2
    if _has_any(lower, _COMPARE_WORDS) or ((" or " in lower or "还是" in lower) and several):
        return "compare", "asks to compare configurations"
    if signals.observed:
        return "diagnose", "reports a measured figure to check"
    if _has_any(lower, _DIAGNOSE_WORDS):
        return "diagnose", "reports a problem or asks why"
    if _has_any(lower, _OPTIMIZE_WORDS):
        return "optimize", "asks for the best configuration"
    if _has_any(lower, _ESTIMATE_WORDS) or signals.volume:
        return "estimate", "asks what it will cost"
    if signals.model is not None:
        return "estimate", "names a model without a specific request; estimating it"
    if signals.precisions and signals.gpu is not None:
        # "FP8 on Blackwell?": a precision on a GPU, no model: every measured model on that GPU.
        return "compare", "asks about a precision on a GPU without a model"
    raise UsageError(
        "I could not tell what you want to know. Name a model and a GPU and ask, e.g.: "
        '"greenest config for Qwen2.5-3B on RTX 5090", "compare all precisions Qwen2.5-7B on 5090", '
        '"Mistral-7B on A800 cost for 1 million requests a month", '
        '"我想用 Yi-6B 跑 100 万字, 要花多少钱"'
    )


# ---------------------------------------------------------------------------------------------
# Extraction


def _find_models(tokens: list[tuple[int, int, str]]) -> list[tuple[int, int, str, float | None]]:
    """Model mentions: ``(start, end, text, size_b)``."""
    found: list[tuple[int, int, str, float | None]] = []
    for i, (start, end, raw) in enumerate(tokens):
        if raw.lower() in VENDOR_TOKENS:
            continue  # "910B" is a Huawei Ascend chip, not a 910-billion-parameter model
        parts = [p for p in re.split(r"[-/_]", raw) if p]
        size_b: float | None = None
        for part in parts:
            m = _SIZE_PART.fullmatch(part)
            if m:
                value = float(m.group(1))
                size_b = value if m.group(2) in "bB" else value / 1000.0
        lower = raw.lower()
        if size_b is not None and len(parts) > 1:
            found.append((start, end, raw, size_b))
            continue
        if size_b is not None and len(parts) == 1:
            nxt = tokens[i + 1][2].lower() if i + 1 < len(tokens) else ""
            if nxt in _NOT_MODEL_AFTER or raw[-1] in "mM":
                continue
            prev = tokens[i - 1] if i > 0 else None
            if prev is not None and prev[2].lower() in _MODEL_FAMILIES:
                found.append((prev[0], end, f"{prev[2]}-{raw}", size_b))
            else:
                found.append((start, end, raw, size_b))
            continue
        base = lower.split("/")[-1]
        nxt = tokens[i + 1][2].lower() if i + 1 < len(tokens) else ""
        if base in _SHORT_MODELS:
            found.append((start, end, _SHORT_MODELS[base], None))
            continue
        if f"{base}-{nxt}" in _SHORT_MODELS:
            found.append((start, tokens[i + 1][1], _SHORT_MODELS[f"{base}-{nxt}"], None))
            continue
        if any(base.startswith(f) for f in ("tinyllama", "smollm")) or (
            "/" in raw and base.split("-")[0] in _MODEL_FAMILIES
        ):
            found.append((start, end, raw, None))
    return found


_CARD_SUFFIXES = ("ti", "super", "ada")
_FORM_FACTORS = ("pcie", "sxm", "sxm4", "sxm5")


def _find_gpus(
    tokens: list[tuple[int, int, str]], conversions: list[Conversion]
) -> tuple[list[tuple[int, int, str]], Vendor | None]:
    """GPU mentions ``(start, end, normalised)`` and the non-NVIDIA accelerator named, if any."""
    found: list[tuple[int, int, str]] = []
    vendor = find_vendor([raw for _s, _e, raw in tokens])
    for i, (start, end, raw) in enumerate(tokens):
        lower = raw.lower()
        for prefix in ("nvidia-", "geforce-", "tesla-"):
            if lower.startswith(prefix):
                lower = lower[len(prefix) :]
        key = lower.replace("-", "").replace("_", "")
        nxt = tokens[i + 1][2].lower() if i + 1 < len(tokens) else ""
        if key in ("rtx", "gtx", "pro") and nxt:
            # "RTX PRO 6000", "RTX 4090 D", "RTX 2080 Ti", "GTX 1080 Ti"
            joined = "".join(t[2].lower() for t in tokens[i + 1 : i + 3])
            if joined == "pro6000" and i + 2 < len(tokens):
                found.append((start, tokens[i + 2][1], "rtxpro6000"))
            elif key in ("rtx", "gtx") and nxt.isdigit() and nxt not in _GPU_TOKENS:
                stop, name = tokens[i + 1][1], nxt
                if i + 2 < len(tokens) and tokens[i + 2][2].lower() in _CARD_SUFFIXES:
                    stop, name = tokens[i + 2][1], name + tokens[i + 2][2].lower()
                found.append((start, stop, name))  # outside the table: matched in answers
            continue
        if key in _GPU_TOKENS:
            norm = _GPU_TOKENS[key]
            stop = end
            if key in ("4090", "rtx4090") and nxt == "d":
                norm, stop = "rtx4090d", tokens[i + 1][1]
            elif nxt in _FORM_FACTORS and norm in ("h100", "a800", "a100"):
                norm, stop = f"{norm} {nxt}", tokens[i + 1][1]  # "H100 PCIe": its own profile
            if found and found[-1][2] == "rtxpro6000" and key == "6000":
                continue
            found.append((start, stop, norm))
        elif key.startswith(("rtx", "gtx", "quadro")) and len(key) > 3:
            name, stop = key, end
            if nxt in _CARD_SUFFIXES:
                name, stop = key + nxt, tokens[i + 1][1]
            found.append((start, stop, name))  # outside the table: matched in answers
        elif (
            any(ch.isdigit() for ch in key)
            and fold_card(key) in NVIDIA_CARDS
            and (key[0].isalpha() or nxt not in _NOT_MODEL_AFTER)
        ):
            name, stop = key, end
            if nxt in _CARD_SUFFIXES and fold_card(key + nxt) in NVIDIA_CARDS:
                name, stop = key + nxt, tokens[i + 1][1]
            found.append((start, stop, name))
        elif key in _ARCH_GPUS:
            norm, label = _ARCH_GPUS[key]
            found.append((start, end, norm))
            conversions.append(
                Conversion.of(
                    "gpu",
                    raw,
                    0.0,
                    f"{raw} -> {label} (the {raw} GPU with the most reference data)",
                    f"{raw} -> {label}（该架构中参考数据最多的 GPU）",
                )
            )
    return found, vendor


_CODE_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"load_in_8bit\s*=\s*true", re.I), "int8_mixed"),
    (re.compile(r"load_in_4bit\s*=\s*true", re.I), "nf4"),
    (re.compile(r"(?:torch_)?dtype\s*=\s*(?:torch\.)?(?:float16|half)\b", re.I), "fp16"),
    (re.compile(r"(?:torch_)?dtype\s*=\s*(?:torch\.)?bfloat16\b", re.I), "bf16"),
    (re.compile(r"(?:torch_)?dtype\s*=\s*(?:torch\.)?float32\b", re.I), "fp32"),
    (re.compile(r"float8_dynamic_activation|float8dynamicactivation", re.I), "fp8_dynamic"),
    (re.compile(r"float8_weight_only|float8weightonly", re.I), "fp8_weight_only"),
)
_ZH_PRECISIONS: tuple[tuple[str, str], ...] = (
    ("纯int8", "int8_pure"),
    ("纯 int8", "int8_pure"),
    ("半精度", "fp16"),
    ("8位", "int8_mixed"),
    ("8 位", "int8_mixed"),
    ("八位", "int8_mixed"),
    ("8比特", "int8_mixed"),
    ("4位", "nf4"),
    ("4 位", "nf4"),
    ("四位", "nf4"),
    ("4比特", "nf4"),
)


def _find_precisions(text: str, tokens: list[tuple[int, int, str]]) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    lower = text.lower()
    for pattern, precision in _CODE_PATTERNS:
        for m in pattern.finditer(text):
            found.append((m.start(), precision))
    for needle, precision in _ZH_PRECISIONS:
        pos = lower.find(needle)
        if pos >= 0:
            found.append((pos, precision))
    words = [(s, t.lower()) for s, _e, t in tokens]
    for i, (start, word) in enumerate(words):
        if "=" in word or word.startswith("torch"):
            continue
        key = word.replace("-", "_")
        nxt = words[i + 1][1] if i + 1 < len(words) else ""
        prev = words[i - 1][1] if i > 0 else ""
        if key in ("int8", "8bit", "8_bit") and (prev in ("pure", "纯") or nxt == "pure"):
            found.append((start, "int8_pure"))
        elif key in ("int8", "8bit", "8_bit") and prev in ("mixed",):
            found.append((start, "int8_mixed"))
        elif key in ("fp8", "float8") and nxt in ("dynamic", "dyn", "dynamic_activation"):
            found.append((start, "fp8_dynamic"))
        elif (
            key in ("nf4", "4bit", "4_bit") and nxt in ("dq", "double_quant", "double", "双重量化")
        ) or key == "nf4+dq":
            found.append((start, "nf4_dq"))
        elif (
            key in PRECISION_ALIASES
            and key not in ("float", "full", "half", "load_in_8bit", "load_in_4bit")
        ) or key in ("load_in_8bit", "load_in_4bit"):
            found.append((start, PRECISION_ALIASES[key]))
        elif key == "half" and nxt == "precision":
            found.append((start, "fp16"))
    found.sort()
    return found


def _find_paths(tokens: list[tuple[int, int, str]]) -> list[str]:
    return [t for _s, _e, t in tokens if t.lower().endswith((".py", ".ipynb")) and len(t) > 3]


_RE_BYTES = re.compile(rf"({NUMBER})\s*(tb|gb|mb|kb)\b", re.I)
_RE_THROUGHPUT = re.compile(
    rf"({NUMBER})\s*(?:tok/s|tokens?/s(?:ec)?|t/s|tps|tokens? per second|tok per second|"
    r"tokens?\s*每秒|个\s*token\s*每秒)",
    re.I,
)
_RE_THROUGHPUT_CN = re.compile(rf"每秒\s*(?:只有|仅)?\s*({NUMBER})\s*(?:个)?\s*tokens?", re.I)
_RE_POWER = re.compile(rf"({NUMBER})\s*(?:w|watts?|瓦)(?![a-z])", re.I)
_RE_ENERGY_1K = re.compile(
    rf"({NUMBER})\s*(?:j|joules?|焦耳?)\s*(?:/|per|每)\s*(?:1k|1,?000|千)\s*(?:tokens?|tok)?", re.I
)
_RE_ENERGY_TOKEN = re.compile(
    rf"({NUMBER})\s*(m?j|m?joules?|焦耳?)\s*(?:/|per|每)\s*(?:tokens?|tok)\b", re.I
)
_RE_ENERGY_TOKEN_CN = re.compile(rf"每\s*(?:个)?\s*tokens?\s*({NUMBER})\s*(毫焦|mj|焦耳?|j)", re.I)
_RE_BATCH = re.compile(
    rf"(?:batch[\s_\-]?size|\bbs|batch|批大小|批量大小|批次大小|批处理大小|批量|批次)\s*(?:=|:|：|of|is|为|是|设为|设成)?\s*({NUMBER})",
    re.I,
)
_RE_CONTEXT = re.compile(
    rf"(?:context(?:\s+length)?|sequence(?:\s+length)?|seq(?:uence)?[\s_]?len|max_length|上下文|序列长度)"
    rf"\s*(?:=|:|：|of|is|为)?\s*({NUMBER})\s*(k)?",
    re.I,
)
_RE_CONTEXT_AFTER = re.compile(
    rf"({NUMBER})\s*(k)?\s*(?:-\s*)?(?:token\s+)?(?:context|上下文)", re.I
)
_RE_IN = re.compile(
    rf"({NUMBER})\s*(?:tokens?\s+(?:in\b|input|prompt)|in\s*(?=/)|input\b|prompt\b)"
    rf"|(?:prompt|input|输入)\s*(?:tokens?)?\s*(?:=|:|：|of)?\s*({NUMBER})",
    re.I,
)
_RE_OUT = re.compile(
    rf"({NUMBER})\s*(?:tokens?\s+)?(?:out\b|output|generated)|(?:max_new_tokens|output|输出|生成)\s*(?:tokens?)?\s*(?:=|:|：|of)?\s*({NUMBER})",
    re.I,
)
_RE_RATE = re.compile(
    rf"(?:rate|汇率|exchange rate)\s*(?:of|is|=|:|：|为)?\s*({NUMBER})"
    rf"|1\s*(?:usd|\$|美元|dollar)\s*=\s*({NUMBER})\s*(?:cny|rmb|元|人民币|yuan)"
    rf"|({NUMBER})\s*(?:cny|rmb|元|yuan)\s*(?:/|per|每)\s*(?:usd|\$|美元|dollar)"
    rf"|usd\s*/\s*cny\s*(?:=|:)?\s*({NUMBER})",
    re.I,
)


def _num(text: str, scale: str | None = None) -> float:
    return parse_number(text) * scale_factor(scale)


# A batch size as written, sign, fraction and exponent included, so "batch size -1", "0", "2.5"
# or "1e12" is refused rather than dropped or read as its leading digits (it was read as 1).
_RE_BATCH_WRITTEN = re.compile(
    r"(?:batch[\s_\-]?size|\bbs|batch|批大小|批量大小|批次大小|批处理大小|批量|批次)"
    r"\s*(?:=|:|：|of|is|为|是|设为|设成)?\s*(-?\s*\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?)(?![\d.])",
    re.I,
)
MAX_BATCH_SIZE = 4096


def _check_batch_sizes(text: str) -> None:
    for match in _RE_BATCH_WRITTEN.finditer(text):
        written = match.group(1).strip()
        try:
            value = float(written.replace(",", "").replace(" ", ""))
        except ValueError:
            continue
        if not value.is_integer() or not 1 <= value <= MAX_BATCH_SIZE:
            raise UsageError(
                f"batch size {written} is not a whole number of sequences from 1 to "
                f"{MAX_BATCH_SIZE}; say e.g. 'batch size 8'"
            )


def _first_group(m: re.Match[str]) -> str:
    return next(g for g in m.groups() if g is not None)


@dataclass(frozen=True, slots=True)
class CodeFlags:
    """Code flags that refine the precisions named (``llm_int8_threshold=0.0`` -> pure INT8)."""

    precisions: tuple[str, ...]
    int8_threshold: float | None = None
    double_quant: bool | None = None
    compiled: bool | None = None


def _code_flags(question: str, found: list[tuple[int, str]]) -> CodeFlags:
    precisions = list(dict.fromkeys(p for _pos, p in found))
    threshold: float | None = None
    m = re.search(rf"llm_int8_threshold\s*=\s*({NUMBER})", question, re.I)
    if m:
        threshold = float(m.group(1))
        if threshold == 0.0:
            precisions = ["int8_pure" if p == "int8_mixed" else p for p in precisions]
            if "int8_pure" not in precisions:
                precisions.insert(0, "int8_pure")
    double_quant = None
    if re.search(r"bnb_4bit_use_double_quant\s*=\s*true", question, re.I):
        double_quant = True
        precisions = ["nf4_dq" if p == "nf4" else p for p in precisions]
    compiled = True if re.search(r"torch\.compile|compile\s*=\s*true", question, re.I) else None
    if re.search(r"load_in_8bit\s*=\s*true", question, re.I) and re.search(
        r"load_in_4bit\s*=\s*true", question, re.I
    ):
        raise UsageError(
            "contradiction: load_in_8bit=True and load_in_4bit=True cannot both be set; "
            "say which one the model is loaded with"
        )
    return CodeFlags(tuple(dict.fromkeys(precisions)), threshold, double_quant, compiled)


def _model(models: list[tuple[int, int, str, float | None]]) -> tuple[str | None, float | None]:
    if not models:
        return None, None
    if len({m[2].lower() for m in models}) > 1 and len({m[3] for m in models}) > 1:
        raise UsageError(
            "the question names more than one model ("
            + ", ".join(m[2] for m in models)
            + "); ask about one model at a time"
        )
    return models[0][2], models[0][3]


def _accelerator_out_of_data(vendor: Vendor | None, lower: str) -> list[OutOfData]:
    out: list[OutOfData] = []
    if vendor is not None:
        out.append(
            OutOfData(
                "amd-gpu" if vendor.key == "amd" else "accelerator",
                Text(
                    f"{vendor.name}: every reference row was measured on NVIDIA GPUs, and no "
                    "measured factor carries an NVIDIA figure to it",
                    f"{vendor.name}：所有参考数据都是在 NVIDIA GPU 上测的，也没有实测的系数能把 NVIDIA 的数字换算过去",
                ),
                vendor.key,
            )
        )
    for word, label in _OTHER_QUANT.items():
        if re.search(rf"\b{word}\b", lower):
            out.append(
                OutOfData(
                    "quant-method",
                    Text(
                        f"{label}: no reference row measures {label} kernels",
                        f"{label}：没有参考数据测过 {label} 内核",
                    ),
                )
            )
    return out


def _batch_size(masked: str, lower: str, out_of_data: list[OutOfData]) -> int | None:
    _check_batch_sizes(masked)
    batches = {int(float(_first_group(b).replace(",", ""))) for b in _RE_BATCH.finditer(masked)}
    batches = {b for b in batches if b > 0}
    if len(batches) > 1 and "compare" not in lower:
        raise UsageError(
            f"contradiction: more than one batch size given ({', '.join(map(str, sorted(batches)))}); "
            "give one, or ask to compare"
        )
    if not batches:
        return None
    if max(batches) > 64:
        out_of_data.append(
            OutOfData(
                "batch-size",
                Text(
                    f"batch size {max(batches)}: reference rows stop at 64",
                    f"批大小 {max(batches)}：参考数据最大只到 64",
                ),
            )
        )
    return min(batches)


def _lengths(
    masked: str, conversions: list[Conversion], out_of_data: list[OutOfData]
) -> tuple[int | None, int | None]:
    """Prompt and generated tokens (``512 in / 256 out``; a context length as the prompt)."""
    prompt = next((int(_num(_first_group(m))) for m in _RE_IN.finditer(masked)), None)
    generated = next((int(_num(_first_group(m))) for m in _RE_OUT.finditer(masked)), None)
    seq = 0
    for m in list(_RE_CONTEXT.finditer(masked)) + list(_RE_CONTEXT_AFTER.finditer(masked)):
        value = _num(m.group(1)) * (1000 if m.group(2) else 1)
        if value == 8 * 1000 and m.group(2):
            value = 8192
        seq = max(seq, int(value))
    total_seq = (prompt or 0) + (generated or 0)
    if max(seq, total_seq) > 4096:
        out_of_data.append(
            OutOfData(
                "sequence-length",
                Text(
                    f"sequence of {max(seq, total_seq):,} tokens: reference rows stop at 4,096",
                    f"序列长度 {max(seq, total_seq):,} 个 token：参考数据最长只到 4,096",
                ),
            )
        )
    if seq and prompt is None and seq <= 4096:
        prompt = seq
        conversions.append(
            Conversion.of(
                "prompt_tokens",
                f"{seq}",
                seq,
                "context length used as the prompt length",
                "上下文长度按提示词长度计",
            )
        )
    return prompt, generated


@dataclass(frozen=True, slots=True)
class Observed:
    """Figures the user measured (diagnose)."""

    throughput_tok_s: float | None = None
    power_w: float | None = None
    energy_j_per_1k: float | None = None

    @property
    def any(self) -> bool:
        return any(
            v is not None for v in (self.throughput_tok_s, self.power_w, self.energy_j_per_1k)
        )


def _observed(masked: str, conversions: list[Conversion]) -> Observed:
    m = _RE_THROUGHPUT.search(masked) or _RE_THROUGHPUT_CN.search(masked)
    throughput = _num(m.group(1)) if m else None
    energy: float | None = None
    energy_span: tuple[int, int] | None = None
    m = _RE_ENERGY_1K.search(masked)
    if m:
        energy, energy_span = _num(m.group(1)), m.span()
    else:
        m = _RE_ENERGY_TOKEN.search(masked) or _RE_ENERGY_TOKEN_CN.search(masked)
        if m:
            milli = m.group(2).lower().startswith("m") or m.group(2) == "毫焦"
            per_token = _num(m.group(1)) / (1000.0 if milli else 1.0)
            energy, energy_span = per_token * 1000.0, m.span()
            conversions.append(
                Conversion.of(
                    "observed_energy_j_per_1k",
                    m.group(0).strip(),
                    per_token * 1000.0,
                    "J per token x 1000 = J per 1k tokens",
                    "每 token 焦耳 x 1000 = 每千 token 焦耳",
                )
            )
    power: float | None = None
    masked_lower = masked.lower()
    for m in _RE_POWER.finditer(masked):
        if energy_span and energy_span[0] <= m.start() < energy_span[1]:
            continue
        before = masked_lower[max(0, m.start() - 20) : m.start()]
        if "tdp" in before or "limit" in before:
            continue
        power = _num(m.group(1))
        break
    return Observed(throughput, power, energy)


def _text_bytes(masked: str, conversions: list[Conversion]) -> float | None:
    """``1 GB of text`` -> tokens (not ``80 GB of VRAM``)."""
    m = _RE_BYTES.search(masked)
    if not m:
        return None
    unit = m.group(2).lower()
    size_bytes = _num(m.group(1)) * {"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12}[unit]
    _before, after = _window(masked, m.start(), m.end(), after=20)
    if "vram" in after or "memory" in after or "显存" in after:
        return None
    tokens = size_bytes / BYTES_PER_TOKEN
    conversions.append(
        Conversion.of(
            "total_tokens",
            m.group(0).strip(),
            tokens,
            f"~{BYTES_PER_TOKEN:g} bytes of text per token",
            f"约 {BYTES_PER_TOKEN:g} 字节文本 = 1 token",
        )
    )
    return tokens


@dataclass(frozen=True, slots=True)
class MoneyFacts:
    currency: str = "USD"
    cny_per_usd: float | None = None
    price_per_kwh: float | None = None
    price_currency: str | None = None


def _money(lower: str, masked: str, language: str) -> MoneyFacts:
    """The currency asked for, an exchange rate, and the electricity price and its currency."""
    currency = "USD"
    if re.search(r"人民币|\bcny\b|\brmb\b|元|块钱|yuan", lower) or (
        language == "zh"
        and ("多少钱" in lower or "花" in lower)
        and "$" not in lower
        and "美元" not in lower
    ):
        currency = "CNY"
    m = _RE_RATE.search(masked)
    rate = _num(_first_group(m)) if m else None
    price = electricity_price(masked)
    if price is None:
        return MoneyFacts(currency, rate)
    if price.currency not in ("USD", "CNY"):
        currency = price.currency
    return MoneyFacts(currency, rate, price.per_kwh, price.currency)


def _region(tokens: list[tuple[int, int, str]]) -> str | None:
    """The first region named ("Chinese characters", "Chinese text" name a language)."""
    for i, (_s, _e, word) in enumerate(tokens):
        w = word.lower()
        nxt = tokens[i + 1][2].lower() if i + 1 < len(tokens) else ""
        if w == "chinese" and nxt in _LANGUAGE_NOUNS:
            continue
        if w in _REGIONS:
            return _REGIONS[w]
        if word.isascii():
            continue
        for zh, key in _REGIONS_HAN:
            if zh in word:
                return key
    return None


def parse_question(text: object) -> ParsedQuestion:
    """Parse a free-text question. Raises UsageError for bad input or contradictions. Each
    kind of fact has its own extractor; this function runs them in order and checks the
    contradictions between them."""
    question = check_question(text)
    language = detect_language(question)
    lower = question.lower()
    conversions: list[Conversion] = []
    notes: list[str] = []

    tokens = _tokens(question)
    models = _find_models(tokens)
    gpus, vendor = _find_gpus(tokens, conversions)
    paths = tuple(_find_paths(tokens))
    flags = _code_flags(question, _find_precisions(question, tokens))
    out_of_data = _accelerator_out_of_data(vendor, lower)

    # Everything below reads numbers: hide model and GPU names so "Qwen2.5-7B" is not 7e9 and
    # "H100" is not 100 of anything; "a million", "half a million" -> digits.
    masked = _mask(question, [(s, e) for s, e, *_ in models] + [(s, e) for s, e, _ in gpus])
    masked = words_to_digits(masked)

    model, model_size_b = _model(models)
    gpu_list = list(dict.fromkeys(g for _s, _e, g in gpus))
    batch_size = _batch_size(masked, lower, out_of_data)
    prompt_tokens, generation_tokens = _lengths(masked, conversions, out_of_data)
    observed = _observed(masked, conversions)
    hours = hours_per_day(masked, lower)
    try:
        volume = extract_volume(masked, language=language, hours_per_day=hours)
    except ValueError as exc:
        raise UsageError(
            f"contradiction: more than one request volume given ({exc}); give one volume"
        ) from None
    conversions.extend(volume.conversions)
    total_tokens = volume.total_tokens
    if total_tokens is None:
        from_bytes = _text_bytes(masked, conversions)
        total_tokens = round(from_bytes) if from_bytes is not None else None
    money = _money(lower, masked, language)
    use_fact = infer_use(
        lower,
        requests_per_month=volume.requests_per_month,
        users_counted=any(q.kind == "users" for q in volume.quantities),
        concurrency=volume.concurrency,
        one_off_tokens=total_tokens is not None and volume.tokens_period is None,
    )
    code = pasted_code(question)
    signals = ProtocolSignals(
        paths=paths,
        code=code,
        precisions=flags.precisions,
        observed=observed.any,
        volume=any(v is not None for v in (volume.requests_per_month, total_tokens, hours)),
        model=model,
        gpu=gpu_list[0] if gpu_list else None,
    )
    protocol, reason = _choose_protocol(lower, signals)
    if protocol != "compare" and len(gpu_list) > 1:
        raise UsageError(
            f"the question names more than one GPU ({', '.join(gpu_list)}); ask about one GPU at a "
            "time, e.g. `ecoguard compare --model MODEL --gpu GPU` for each"
        )
    if protocol == "estimate" and len(flags.precisions) > 1:
        notes.append(f"several precisions named; estimating {flags.precisions[0]}")

    return ParsedQuestion(
        text=question,
        language=language,
        protocol=protocol,
        protocol_reason=reason,
        model=model,
        model_size_b=model_size_b,
        gpu=signals.gpu,
        gpus=tuple(gpu_list),
        precision=flags.precisions[0] if flags.precisions else None,
        precisions=flags.precisions,
        batch_size=batch_size,
        prompt_tokens=prompt_tokens,
        generation_tokens=generation_tokens,
        use=use_fact.use,
        requests_per_month=volume.requests_per_month,
        total_tokens=total_tokens,
        hours_per_day=hours,
        region=_region(tokens),
        currency=money.currency,
        cny_per_usd=money.cny_per_usd,
        price_per_kwh=money.price_per_kwh,
        price_currency=money.price_currency,
        int8_threshold=flags.int8_threshold,
        double_quant=flags.double_quant,
        compiled=flags.compiled,
        observed_throughput_tok_s=observed.throughput_tok_s,
        observed_power_w=observed.power_w,
        observed_energy_j_per_1k=observed.energy_j_per_1k,
        paths=paths,
        code=code,
        concurrency=volume.concurrency,
        tokens_period=volume.tokens_period,
        serving=use_fact.serving,
        use_reason=use_fact.reason,
        local=local_machine(question),
        conversions=tuple(conversions),
        out_of_data=tuple(out_of_data),
        notes=tuple(notes),
    )
