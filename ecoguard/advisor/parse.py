"""Free-text questions (English or Chinese) -> a protocol and its parameters.

The parser is pure and bounded: it reads at most ``MAX_QUESTION_BYTES`` of text, refuses binary
input, and uses only patterns without nested quantifiers, so its time is linear in the input.
It never resolves names against the knowledge tables itself (that is ``deployments.py``'s job);
it records what the question said and every unit conversion it made, so the answer can show
them.

Each kind of fact has its own reader in its own module: names (``model_names``, ``gpu_names``,
``precisions``), the shape of the work (``workload``), measured figures (``observed``), volumes
and rates (``volume``), hours, use, money, region and code (``extract``), what the reference rows
do not cover (``coverage``) and the protocol asked for (``intent``). ``parse_question`` runs them
in order and checks the contradictions between them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ecoguard.advisor.accelerators import Vendor
from ecoguard.advisor.conversions import Conversion
from ecoguard.advisor.coverage import OutOfData, accelerator_gaps, past_edge
from ecoguard.advisor.extract import (
    accuracy_critical,
    hours_per_day,
    infer_use,
    local_machine,
    money,
    pasted_code,
    region,
    serving_engine,
    source_paths,
)
from ecoguard.advisor.gpu_names import find_gpus, gpu_count
from ecoguard.advisor.intent import choose_protocol
from ecoguard.advisor.model_names import find_models, one_model
from ecoguard.advisor.observed import observed
from ecoguard.advisor.precisions import code_flags, find_precisions
from ecoguard.advisor.question import Question
from ecoguard.advisor.volume import extract_volume, text_bytes, words_to_digits
from ecoguard.advisor.words import mask, split_words
from ecoguard.advisor.workload import batch_sizes, lengths
from ecoguard.errors import UsageError

MAX_QUESTION_BYTES = 10_240


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
# The readers, in order


def _read_work(
    masked: str, lower: str, language: str, conversions: list[Conversion]
) -> dict[str, Any]:
    """The work (how much, when, for whom, at what price), from the masked question, as the
    Question's facts; two different request volumes raise. A text size (``1 GB of text``) counts
    as the token volume when no other is stated."""
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
        from_bytes = text_bytes(masked, conversions)
        total_tokens = round(from_bytes) if from_bytes is not None else None
    one_off = total_tokens is not None and volume.tokens_period is None
    return {
        "hours_per_day": hours,
        "requests_per_month": volume.requests_per_month,
        "total_tokens": total_tokens,
        "tokens_period": volume.tokens_period,
        "concurrency": volume.concurrency,
        **infer_use(lower, volume, one_off_tokens=one_off)._asdict(),
        **money(lower, masked, language)._asdict(),
    }


def _out_of_data(
    lower: str, vendor: Vendor | None, batch_sizes: tuple[int, ...], longest: int
) -> tuple[OutOfData, ...]:
    """What the reference rows do not cover, in the order: accelerator, quantization method,
    batch size (the largest stated), sequence length (the longest stated)."""
    gaps = accelerator_gaps(vendor, lower)
    if batch_sizes:
        gaps += past_edge("batch-size", batch_sizes[-1])
    gaps += past_edge("sequence-length", longest)
    return tuple(gaps)


def parse_question(text: object) -> Question:
    """Parse a free-text question. Raises UsageError for bad input or contradictions. Each
    kind of fact has its own reader; this function runs them in order, chooses the protocol
    from the facts read and checks the contradictions between them."""
    question = check_question(text)
    language = detect_language(question)
    lower = question.lower()
    conversions: list[Conversion] = []
    # The names, from the question as written; two load_in flags or two models raise.
    words = split_words(question)
    models = find_models(words)
    gpus, vendor = find_gpus(words, conversions)
    flags = code_flags(question, find_precisions(question, words))
    model, model_size_b = one_model(models)
    count, parallel = gpu_count(question, words, gpus)
    # Everything below reads numbers: hide model and GPU names so "Qwen2.5-7B" is not 7e9 and
    # "H100" is not 100 of anything; "a million", "half a million" -> digits.
    spans = [(s, e) for s, e, *_ in models] + [(s, e) for s, e, _ in gpus]
    masked = words_to_digits(mask(question, spans))
    sizes, per_call = batch_sizes(masked, lower)  # a bad or second batch size raises
    stated = lengths(masked, conversions)
    measured = observed(masked, conversions)
    # A stated prompt or output length, or prompts per call, is never the workload's volume.
    work = _read_work(mask(masked, [*stated.spans, *per_call]), lower, language, conversions)
    named = tuple(dict.fromkeys(g for _s, _e, g in gpus))
    facts = Question(
        protocol="",
        text=question,
        language=language,
        model=model,
        model_size_b=model_size_b,
        gpu=named[0] if named else None,
        gpus=named,
        gpu_count=count,
        tensor_parallel=parallel,
        engine=serving_engine(question),
        precision=flags.precisions[0] if flags.precisions else None,
        **flags._asdict(),
        batch_size=sizes[0] if sizes else None,
        prompt_tokens=stated.prompt_tokens,
        generation_tokens=stated.generation_tokens,
        **work,
        region=region(words),
        accuracy_critical=accuracy_critical(lower),
        **measured._asdict(),
        paths=tuple(source_paths(words)),
        code=pasted_code(question),
        local=local_machine(question),
        conversions=tuple(conversions),
        out_of_data=_out_of_data(lower, vendor, sizes, stated.longest),
    )
    protocol, reason = choose_protocol(lower, facts)
    if protocol != "compare" and len(named) > 1:
        raise UsageError(
            f"the question names more than one GPU ({', '.join(named)}); ask about one GPU "
            "at a time, e.g. `ecoguard compare --model MODEL --gpu GPU` for each"
        )
    several = protocol == "estimate" and len(flags.precisions) > 1
    return replace(
        facts,
        protocol=protocol,
        protocol_reason=reason,
        notes=(f"several precisions named; estimating {facts.precision}",) if several else (),
    )
