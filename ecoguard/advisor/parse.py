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

from typing import NamedTuple

from ecoguard.advisor.accelerators import Vendor
from ecoguard.advisor.conversions import Conversion
from ecoguard.advisor.coverage import OutOfData, accelerator_gaps, past_edge
from ecoguard.advisor.extract import (
    MoneyFacts,
    UseFact,
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
from ecoguard.advisor.intent import ProtocolSignals, choose_protocol
from ecoguard.advisor.model_names import find_models, one_model
from ecoguard.advisor.observed import Observed, observed
from ecoguard.advisor.precisions import CodeFlags, code_flags, find_precisions
from ecoguard.advisor.question import Question
from ecoguard.advisor.volume import Volume, extract_volume, text_bytes, words_to_digits
from ecoguard.advisor.words import Word, mask, split_words
from ecoguard.advisor.workload import Lengths, batch_sizes, lengths
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


class _Names(NamedTuple):
    """What the question names or pastes: the model, the GPUs, another vendor's accelerator,
    source files or code, the precisions (refined by code flags); and where the model and GPU
    names stand, to mask them before numbers are read."""

    words: list[Word]
    model: str | None
    model_size_b: float | None
    gpus: tuple[str, ...]
    gpu_count: int | None
    tensor_parallel: bool
    vendor: Vendor | None
    paths: tuple[str, ...]
    code: str | None
    flags: CodeFlags
    spans: list[tuple[int, int]]


def _read_names(question: str, conversions: list[Conversion]) -> _Names:
    """The names, from the question as written; two load_in flags or two models raise."""
    words = split_words(question)
    models = find_models(words)
    gpus, vendor = find_gpus(words, conversions)
    paths = tuple(source_paths(words))
    flags = code_flags(question, find_precisions(question, words))
    model, model_size_b = one_model(models)
    count, parallel = gpu_count(question, words, gpus)
    return _Names(
        words,
        model,
        model_size_b,
        tuple(dict.fromkeys(g for _s, _e, g in gpus)),
        count,
        parallel,
        vendor,
        paths,
        pasted_code(question),
        flags,
        [(s, e) for s, e, *_ in models] + [(s, e) for s, e, _ in gpus],
    )


class _Figures(NamedTuple):
    """The deployment figures stated: batch sizes (smallest first), lengths, measured figures."""

    batch_sizes: tuple[int, ...]
    lengths: Lengths
    observed: Observed


def _read_figures(masked: str, lower: str, conversions: list[Conversion]) -> _Figures:
    """The figures, from the masked question; a bad or second batch size raises."""
    sizes = batch_sizes(masked, lower)
    return _Figures(sizes, lengths(masked, conversions), observed(masked, conversions))


class _Work(NamedTuple):
    """How much work, when, for whom and at what price."""

    hours: float | None
    volume: Volume
    total_tokens: int | None
    money: MoneyFacts
    use: UseFact


def _read_work(masked: str, lower: str, language: str, conversions: list[Conversion]) -> _Work:
    """The work, from the masked question; two different request volumes raise. A text size
    (``1 GB of text``) counts as the token volume when no other is stated."""
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
    use = infer_use(
        lower,
        requests_per_month=volume.requests_per_month,
        users_counted=any(q.kind == "users" for q in volume.quantities),
        concurrency=volume.concurrency,
        one_off_tokens=total_tokens is not None and volume.tokens_period is None,
    )
    return _Work(hours, volume, total_tokens, money(lower, masked, language), use)


def _protocol(lower: str, names: _Names, figures: _Figures, work: _Work) -> tuple[str, str]:
    """The protocol and why; several GPUs are only for a comparison."""
    stated = (work.volume.requests_per_month, work.total_tokens, work.hours)
    signals = ProtocolSignals(
        paths=names.paths,
        code=names.code,
        precisions=names.flags.precisions,
        observed=figures.observed.any,
        volume=any(v is not None for v in stated),
        model=names.model,
        gpu=names.gpus[0] if names.gpus else None,
    )
    protocol, reason = choose_protocol(lower, signals)
    if protocol != "compare" and len(names.gpus) > 1:
        raise UsageError(
            f"the question names more than one GPU ({', '.join(names.gpus)}); ask about one GPU "
            "at a time, e.g. `ecoguard compare --model MODEL --gpu GPU` for each"
        )
    return protocol, reason


def _out_of_data(lower: str, names: _Names, figures: _Figures) -> tuple[OutOfData, ...]:
    """What the reference rows do not cover, in the order: accelerator, quantization method,
    batch size, sequence length."""
    gaps = accelerator_gaps(names.vendor, lower)
    if figures.batch_sizes:
        gaps += past_edge("batch-size", figures.batch_sizes[-1])
    gaps += past_edge("sequence-length", figures.lengths.longest)
    return tuple(gaps)


def parse_question(text: object) -> Question:
    """Parse a free-text question. Raises UsageError for bad input or contradictions. Each
    kind of fact has its own reader; this function runs them in order and checks the
    contradictions between them."""
    question = check_question(text)
    language = detect_language(question)
    lower = question.lower()
    conversions: list[Conversion] = []
    names = _read_names(question, conversions)
    # Everything below reads numbers: hide model and GPU names so "Qwen2.5-7B" is not 7e9 and
    # "H100" is not 100 of anything; "a million", "half a million" -> digits.
    masked = words_to_digits(mask(question, names.spans))
    figures = _read_figures(masked, lower, conversions)
    # A stated prompt or output length is a length, never the workload's volume.
    work = _read_work(mask(masked, list(figures.lengths.spans)), lower, language, conversions)
    protocol, reason = _protocol(lower, names, figures, work)
    precisions = names.flags.precisions
    several = protocol == "estimate" and len(precisions) > 1
    return Question(
        text=question,
        language=language,
        protocol=protocol,
        protocol_reason=reason,
        model=names.model,
        model_size_b=names.model_size_b,
        gpu=names.gpus[0] if names.gpus else None,
        gpus=names.gpus,
        gpu_count=names.gpu_count,
        tensor_parallel=names.tensor_parallel,
        engine=serving_engine(question),
        precision=precisions[0] if precisions else None,
        precisions=precisions,
        batch_size=figures.batch_sizes[0] if figures.batch_sizes else None,
        prompt_tokens=figures.lengths.prompt_tokens,
        generation_tokens=figures.lengths.generation_tokens,
        use=work.use.use,
        requests_per_month=work.volume.requests_per_month,
        total_tokens=work.total_tokens,
        hours_per_day=work.hours,
        region=region(names.words),
        currency=work.money.currency,
        cny_per_usd=work.money.cny_per_usd,
        price_per_kwh=work.money.price_per_kwh,
        price_currency=work.money.price_currency,
        int8_threshold=names.flags.int8_threshold,
        double_quant=names.flags.double_quant,
        compiled=names.flags.compiled,
        compute_dtype=names.flags.compute_dtype,
        accuracy_critical=accuracy_critical(lower),
        observed_throughput_tok_s=figures.observed.throughput_tok_s,
        observed_power_w=figures.observed.power_w,
        observed_energy_j_per_1k=figures.observed.energy_j_per_1k,
        paths=names.paths,
        code=names.code,
        concurrency=work.volume.concurrency,
        tokens_period=work.volume.tokens_period,
        serving=work.use.serving,
        use_reason=work.use.reason,
        local=local_machine(question),
        conversions=tuple(conversions),
        out_of_data=_out_of_data(lower, names, figures),
        notes=(f"several precisions named; estimating {precisions[0]}",) if several else (),
    )
