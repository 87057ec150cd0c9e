"""From a module's syntax tree to call sites: one Deployment per place a model is loaded,
quantized or generated with, plus the audit-only notes no runtime rule covers.

Only syntax is read. A site carries the node a finding should point at, and the rules whose
facts could not be worked out (``unknown``): their findings are dropped rather than guessed.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ecoguard.audit.index import UNKNOWN, ModuleIndex, walk_scope
from ecoguard.audit.loops import Loops, PerItem
from ecoguard.deployment import Deployment, GpuSpec, ModelSpec, QuantSpec
from ecoguard.engines.engine_args import EngineConfig, engine_deployment
from ecoguard.findings import Mood

# Callees whose ``from_pretrained`` loads something other than model weights.
_NOT_A_MODEL = re.compile(r"Tokenizer|Processor|Config|FeatureExtractor|Peft|Adapter|Scheduler")
_BATCHY_NAME = re.compile(r"batch|chunk", re.IGNORECASE)
_BATCHING_CALL = re.compile(r"batch|chunk|partition|split|group", re.IGNORECASE)
_TRAINING_MARKERS = frozenset(
    {
        "Trainer",
        "SFTTrainer",
        "Seq2SeqTrainer",
        "DPOTrainer",
        "ORPOTrainer",
        "GRPOTrainer",
        "TrainingArguments",
        "Seq2SeqTrainingArguments",
        "SFTConfig",
        "gradient_checkpointing_enable",
        "prepare_model_for_kbit_training",
        "backward",
    }
)
_TRAINING_WORDS = re.compile(r"\btrain|fine-?tun", re.IGNORECASE)

_DTYPES = {
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float16": "fp16",
    "fp16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "fp32": "fp32",
    "float": "fp32",
}

# torchao configs (class or old function style, or TorchAoConfig's string form) -> facts.
_TORCHAO = (
    (
        re.compile(r"float8_?weight_?only|float8wo|fp8wo", re.I),
        "fp8_weight_only",
        8,
        "float8_weight_only",
    ),
    (
        re.compile(r"float8_?dynamic_?activation_?float8_?weight|float8dq|fp8dq", re.I),
        "fp8_dynamic",
        8,
        "float8_dynamic",
    ),
    (re.compile(r"int8_?dynamic_?activation_?int8", re.I), None, 8, "int8_dynamic"),
    (re.compile(r"int8_?weight_?only|int8wo", re.I), None, 8, "int8_weight_only"),
    (re.compile(r"int4_?weight_?only|int4wo", re.I), None, 4, "int4_weight_only"),
)


@dataclass(frozen=True, slots=True)
class QuantFacts:
    """What a quantization config amounts to. ``node`` is where it was built (the fix goes
    there); ``unknown`` names rules whose facts could not be read from it."""

    precision: str | None
    quant: QuantSpec
    node: ast.AST
    unknown: frozenset[str] = frozenset()


@dataclass(slots=True)
class Site:
    """One place in the module where a deployment happens."""

    kind: str  # load, pipeline, vllm, torchao-quantize, config, generate, pipeline-call
    node: ast.AST
    deployment: Deployment
    config_node: ast.AST | None = None
    unknown: frozenset[str] = frozenset()
    only: tuple[str, ...] | None = None  # restrict evaluate() to these rules
    details: tuple[tuple[str, object], ...] = ()
    # rule -> ((field, text), ...): the audit's own wording for a finding of that rule, where
    # the runtime wording would claim what only a live process sees ("8 calls ran").
    wording: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    # (old, new) text replacements in the fixes of the quantization rules, so a fix names the
    # call the code used (pipeline(...), LLM(...)) rather than from_pretrained.
    fix_replace: tuple[tuple[str, str], ...] = ()
    # (precision, label): vram-overflow prices the weights as this precision (torchao int4
    # has no precision of its own in the record) and calls them by the label.
    vram_precision: tuple[str, str] | None = None


@dataclass(frozen=True, slots=True)
class RawNote:
    kind: str
    mood: Mood
    message: str
    fix: str
    node: ast.AST


@dataclass(slots=True)
class Extraction:
    sites: list[Site] = field(default_factory=list)
    notes: list[RawNote] = field(default_factory=list)


class Extractor:
    """Walks one module and yields its sites. ``resolve_model`` maps a model id string to a
    ModelSpec (None when unknown); ``gpu`` is the GPU from ``--gpu`` (or an empty spec)."""

    def __init__(
        self,
        tree: ast.Module,
        *,
        gpu: GpuSpec,
        resolve_model,
        bs1_calls: int,
        lines: Sequence[str] = (),
        line_label: Callable[[int | None], str] = lambda line: f"line {line}",
    ) -> None:
        self.index = ModuleIndex(tree)
        self.lines = lines  # the source lines, for comments (the tree has none)
        self.line_label = line_label  # "line 13", or "cell 6, line 2" in a notebook
        self.gpu = gpu
        self.resolve_model = resolve_model
        self.bs1_calls = bs1_calls
        self.out = Extraction()
        self._consumed_configs: set[ast.AST] = set()
        self._compiled = self._module_compiles()
        self._training = self._module_trains()
        self._pipelines: dict[str, ast.Call] = {}
        self._load_sites: list[Site] = []
        # Facts about loops and helpers, each worked out once: a loop holding thousands of
        # generate calls must not be re-read per call (that made the audit quadratic).
        self.loops = Loops(self.index, _BATCHY_NAME, _BATCHING_CALL)
        self._scope_reads: dict[ast.AST, dict[str, list[int]]] = {}
        self._read_names: set[str] | None = None

    # -- entry ------------------------------------------------------------------------------

    def run(self, check: Callable[[], None] | None = None) -> Extraction:
        """``check`` is called between call sites; it may raise to stop a run that is over
        its time budget (the MCP server's audit_code)."""
        calls = sorted(
            (n for n in ast.walk(self.index.tree) if isinstance(n, ast.Call)),
            key=lambda n: (n.lineno, n.col_offset),
        )
        for call in calls:
            self.loops.add_call(call)
        for call in calls:
            if check is not None:
                check()
            name = self.index.callee(call)
            if name == "from_pretrained":
                self._from_pretrained(call)
            elif name == "pipeline":
                self._pipeline(call)
            elif name in ("LLM", "Engine") and self._engine_of(call):
                self._engine(call, self._engine_of(call))  # type: ignore[arg-type]
            elif name == "quantize_":
                self._quantize(call)
            elif name == "from_quantized":
                self._from_quantized(call)
        for call in calls:
            if check is not None:
                check()
            name = self.index.callee(call)
            if (
                name in ("BitsAndBytesConfig", "TorchAoConfig")
                and call not in self._consumed_configs
            ):
                self._standalone_config(call)
            elif name == "generate":
                self._generate(call)
            elif name == "GenerationConfig":
                self._use_cache_kwarg(call, self.index.keyword_nodes(call))
            elif isinstance(call.func, ast.Name) and call.func.id in self._pipelines:
                self._pipeline_call(call, self._pipelines[call.func.id])
        self._use_cache_attributes()
        return self.out

    # -- loading ----------------------------------------------------------------------------

    def _from_pretrained(self, call: ast.Call) -> None:
        receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
        receiver_name = self.index.qualified_name(receiver) if receiver is not None else None
        if receiver_name and _NOT_A_MODEL.search(receiver_name.rsplit(".", 1)[-1]):
            return
        kwargs = self.index.keyword_nodes(call)
        model_expr = call.args[0] if call.args else kwargs.get("pretrained_model_name_or_path")
        self._use_cache_kwarg(call, kwargs)
        if not _other_library(receiver_name):
            self._removed_kwargs(call, kwargs)
        self._add_load_site("load", call, model_expr, kwargs)

    def _from_quantized(self, call: ast.Call) -> None:
        """AutoAWQ / AutoGPTQ ``from_quantized(path)``: a pre-quantized checkpoint whose format
        is the library's (or the name's); judged by the engine-argument mapping."""
        receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
        qualified = (self.index.qualified_name(receiver) if receiver is not None else None) or ""
        root = qualified.split(".", 1)[0].lower()
        method = _FROM_QUANTIZED.get(root)
        kwargs = self.index.keyword_nodes(call)
        model_expr = (
            call.args[0] if call.args else kwargs.get("quant_path", kwargs.get("model_path"))
        )
        text = self.index.constant(model_expr) if model_expr is not None else UNKNOWN
        facts = self._engine_quant(method, {}, call, text if isinstance(text, str) else None)
        deployment = Deployment(
            model=self._model(model_expr),
            gpu=self.gpu,
            precision=facts.precision,
            quant=facts.quant,
            dtype="fp16",
        )
        base = "AutoModelForCausalLM.from_pretrained(model_id, "
        site = Site(
            "load",
            call,
            deployment,
            unknown=facts.unknown,
            fix_replace=((base, "AutoModelForCausalLM.from_pretrained(base_model_id, "),),
        )
        self.out.sites.append(site)
        self._load_sites.append(site)

    def _engine_quant(
        self, method: str | None, quant_config: dict, node: ast.AST, model: str | None = None
    ) -> QuantFacts:
        """AWQ / GPTQ (and what a checkpoint name says) as the engine-argument mapping judges
        them: weight-only 4-bit against NF4's measured rows, 8-bit against pure INT8's."""
        config = EngineConfig(
            engine="vllm", model=model, quantization=method, quant_config=quant_config or None
        )
        facts = engine_deployment(config, gpu=self.gpu)
        if facts.deployment.quant.method is None:
            return QuantFacts(None, QuantSpec(method="other"), node, _QUANT_RULES)
        return QuantFacts(facts.deployment.precision, facts.deployment.quant, node, facts.unknown)

    def _pipeline(self, call: ast.Call) -> None:
        kwargs = self.index.keyword_nodes(call)
        model_expr = call.args[1] if len(call.args) > 1 else kwargs.get("model")
        model_kwargs = self.index.mapping(kwargs.get("model_kwargs")) or {}
        merged = {**model_kwargs, **{k: v for k, v in kwargs.items() if k != "model_kwargs"}}
        self._use_cache_kwarg(call, model_kwargs)
        self._removed_kwargs(call, model_kwargs)
        self._add_load_site("pipeline", call, model_expr, merged)
        target = self._assigned_name(call)
        if target is not None:
            self._pipelines[target] = call

    def _add_load_site(
        self, kind: str, call: ast.Call, model_expr: ast.expr | None, kwargs: dict
    ) -> None:
        quant = self._quant_from_kwargs(kwargs, call)
        if quant is not None and quant.quant.method is None and not quant.unknown:
            quant = None  # a config that quantizes nothing
        if quant is None:
            quant = self._quant_from_name(model_expr, call)
        dtype = self._dtype(kwargs.get("torch_dtype", kwargs.get("dtype")))
        deployment = Deployment(
            model=self._model(model_expr),
            gpu=self.gpu,
            precision=quant.precision if quant else dtype,
            quant=quant.quant if quant else QuantSpec(),
            dtype=dtype,
            use_cache=self._use_cache_value(kwargs),
        )
        site = Site(
            kind=kind,
            node=call,
            deployment=deployment,
            config_node=quant.node if quant else None,
            unknown=quant.unknown if quant else frozenset(),
            fix_replace=self._pipeline_fix(call) if kind == "pipeline" else (),
            vram_precision=_vram_proxy(deployment),
        )
        self.out.sites.append(site)
        self._load_sites.append(site)

    def _quant_from_name(self, model_expr: ast.expr | None, call: ast.Call) -> QuantFacts | None:
        """A pre-quantized checkpoint named as such (``...-AWQ``, ``...-GPTQ-Int4``): its own
        config carries the quantization, as vLLM's auto-detection reads it."""
        text = self.index.constant(model_expr) if model_expr is not None else UNKNOWN
        if not isinstance(text, str):
            return None
        facts = self._engine_quant(None, {}, call, text)
        return facts if facts.quant.method in ("awq", "gptq") else None

    def _pipeline_fix(self, call: ast.Call) -> tuple[tuple[str, str], ...]:
        task = self.index.constant(call.args[0]) if call.args else UNKNOWN
        task_text = f'"{task}"' if isinstance(task, str) and task.isprintable() else "task"
        return (
            (
                "AutoModelForCausalLM.from_pretrained(model_id, ",
                f"pipeline({task_text}, model=model_id, ",
            ),
            ("# no quantization_config", "# no quantization_config in model_kwargs"),
        )

    def _engine(self, call: ast.Call, engine: str) -> None:
        """vLLM's ``LLM(...)`` or SGLang's ``Engine(...)``: keywords that are engine arguments,
        mapped as launch files and the vLLM plugin map them
        (``ecoguard.engines.engine_args``)."""
        names = _ENGINE_KWARGS[engine]
        kwargs = self.index.keyword_nodes(call)
        model_expr = call.args[0] if call.args else kwargs.get(names["model"])
        model = self._model(model_expr)
        method = self.index.constant(kwargs.get("quantization"))
        eager = self.index.constant(kwargs.get(names["enforce_eager"]))
        seqs = self.index.constant(kwargs.get(names["max_num_seqs"]))
        parallel = self.index.constant(kwargs.get(names["tensor_parallel_size"]))
        config = EngineConfig(
            engine=engine,
            model=self.index.constant(model_expr) if model.id else None,  # type: ignore[arg-type]
            quantization=method if isinstance(method, str) else None,
            dtype=self._dtype(kwargs.get("dtype")),
            enforce_eager=eager if isinstance(eager, bool) else None,
            max_num_seqs=seqs if type(seqs) is int else None,
            tensor_parallel_size=parallel if type(parallel) is int else None,
        )
        facts = engine_deployment(config, gpu=self.gpu, resolve_model=lambda _: model)
        unknown = set(facts.unknown)
        if method is UNKNOWN and "quantization" in kwargs:
            unknown.update({"small-model-quant", "int8-mixed", "fp8-eager"})
        callee = self.index.callee(call)
        seqs_name = names["max_num_seqs"]
        bs1 = (
            (
                "message",
                f"{callee}({seqs_name}=1) lets the engine run one sequence at a time, so every "
                f"generated token pays for a full pass over the weights that a batch of "
                "concurrent requests would share.",
            ),
            ("fix", f"{callee}(..., {seqs_name}=256)  # or drop {seqs_name}: the engine batches"),
            ("fix_summary", f"raise {seqs_name} above 1"),
        )
        site = Site(
            engine,
            call,
            facts.deployment,
            unknown=frozenset(unknown),
            details=facts.details[1:],
            wording=(("batch-size-one", bs1),),
            fix_replace=(
                (
                    "AutoModelForCausalLM.from_pretrained(model_id, ",
                    f"{callee}({names['model']}=model_id, ",
                ),
                ("# no quantization_config", "# the 16-bit checkpoint, no quantization="),
                ("torch.bfloat16", '"bfloat16"'),
                ("torch.float16", '"float16"'),
            ),
        )
        self.out.sites.append(site)
        self._load_sites.append(site)

    def _quantize(self, call: ast.Call) -> None:
        if len(call.args) < 2:
            return
        facts = self._torchao_facts(call.args[1], call)
        if facts is None:
            return
        deployment = Deployment(gpu=self.gpu, precision=facts.precision, quant=facts.quant)
        self.out.sites.append(
            Site("torchao-quantize", call, deployment, facts.node, unknown=facts.unknown)
        )

    def _standalone_config(self, call: ast.Call) -> None:
        """A config built but not passed to a load in this module (a shared config module):
        judged on its own, without the model it will meet. One whose name is assigned again
        before anything reads it is dead code and never reaches a model: skipped."""
        if self._overwritten_unread(call) or self._never_read(call):
            return
        facts = self._quant_facts(call)
        if facts is None or (facts.quant.method is None and not facts.unknown):
            return
        deployment = Deployment(gpu=self.gpu, precision=facts.precision, quant=facts.quant)
        self.out.sites.append(Site("config", call, deployment, facts.node, unknown=facts.unknown))

    def _overwritten_unread(self, call: ast.Call) -> bool:
        """``name = Config(...)`` followed, in the same scope, by another assignment to ``name``
        with no read of ``name`` in between (a read on the reassigning line counts)."""
        statement = self.index.parent.get(call)
        if not (
            isinstance(statement, ast.Assign)
            and statement.value is call
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
        ):
            return False
        name = statement.targets[0].id
        scope = self.index.scope_of(statement)
        later = [line for line, _ in self.index.assigns[(scope, name)] if line > statement.lineno]
        if not later:
            return False
        next_line = min(later)
        return not any(statement.lineno < line <= next_line for line in self._reads_of(scope, name))

    def _never_read(self, call: ast.Call) -> bool:
        """``name = Config(...)`` in a module that loads a model, with ``name`` never read
        anywhere in it: an alternative left beside the config in use, not a preset for
        other modules (a module that loads nothing keeps its presets judged)."""
        statement = self.index.parent.get(call)
        if not (
            self._load_sites
            and isinstance(statement, ast.Assign)
            and statement.value is call
            and all(isinstance(t, ast.Name) for t in statement.targets)
        ):
            return False
        if self._read_names is None:
            self._read_names = {
                node.id
                for node in ast.walk(self.index.tree)
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
            }
        return not any(t.id in self._read_names for t in statement.targets)  # type: ignore[union-attr]

    def _reads_of(self, scope: ast.AST, name: str) -> list[int]:
        """Lines where ``name`` is read in ``scope``'s own body (one walk per scope)."""
        reads = self._scope_reads.get(scope)
        if reads is None:
            reads = {}
            for node in walk_scope(scope):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    reads.setdefault(node.id, []).append(node.lineno)
            self._scope_reads[scope] = reads
        return reads.get(name, [])

    # -- quantization configs ---------------------------------------------------------------

    def _quant_from_kwargs(self, kwargs: dict[str, ast.expr], call: ast.Call) -> QuantFacts | None:
        if "quantization_config" in kwargs:
            facts = self._quant_facts(kwargs["quantization_config"])
            if facts is None and self.index.constant(kwargs["quantization_config"]) is None:
                return None
            if facts is None:
                # Passed, but built somewhere the audit cannot see: do not guess.
                return QuantFacts(
                    None,
                    QuantSpec(),
                    call,
                    frozenset({"int8-mixed", "small-model-quant", "fp8-eager"}),
                )
            return facts
        if "load_in_8bit" in kwargs or "load_in_4bit" in kwargs:
            # Old style: the flags straight on from_pretrained (the fix goes on the call).
            return self._bnb_facts(kwargs, call)
        return None

    def _quant_facts(self, expr: ast.expr) -> QuantFacts | None:
        resolved = self.index.resolve(expr)
        if resolved is None:
            return None
        node = resolved.expr
        overrides = dict(resolved.overrides)
        if isinstance(node, ast.Call):
            name = self.index.callee(node)
            self._consumed_configs.add(node)
            if name == "BitsAndBytesConfig":
                kwargs = self.index.keywords(node)
                if kwargs is None:
                    return QuantFacts(None, QuantSpec(method="bitsandbytes"), node, _BNB_RULES)
                return self._bnb_facts({**kwargs, **overrides}, node)
            if name == "from_dict" and node.args:
                items = self.index.mapping(node.args[0])
                if items is not None:
                    return self._bnb_facts({**items, **overrides}, node)
                return None
            if name == "TorchAoConfig":
                kwargs = self.index.keyword_nodes(node)
                quant_type = node.args[0] if node.args else kwargs.get("quant_type")
                return self._torchao_facts(quant_type, node)
            if name in ("GPTQConfig", "AwqConfig"):
                bits = self.index.constant(self.index.keyword_nodes(node).get("bits"))
                quant_config = {"bits": bits} if isinstance(bits, int) else {}
                return self._engine_quant(name[:-6].lower(), quant_config, node)
            return None
        items = self.index.mapping(node)
        if items is None:
            return None
        items.update(overrides)
        method = self.index.constant(items.get("quant_method"))
        if method == "torchao":
            return self._torchao_facts(items.get("quant_type"), node)
        if method not in (UNKNOWN, "bitsandbytes") and "quant_method" in items:
            return QuantFacts(None, QuantSpec(method=str(method)), node)
        return self._bnb_facts(items, node)

    def _bnb_facts(self, items: dict[str, ast.expr], node: ast.AST) -> QuantFacts | None:
        load_8 = self.index.constant(items["load_in_8bit"]) if "load_in_8bit" in items else False
        load_4 = self.index.constant(items["load_in_4bit"]) if "load_in_4bit" in items else False
        if load_8 is UNKNOWN or load_4 is UNKNOWN:
            return QuantFacts(None, QuantSpec(method="bitsandbytes"), node, _BNB_RULES)
        compute = self._dtype(items.get("bnb_4bit_compute_dtype"))
        if load_8 is True:
            unknown: frozenset[str] = frozenset()
            if "llm_int8_threshold" in items:
                value = self.index.constant(items["llm_int8_threshold"])
                if isinstance(value, int | float) and not isinstance(value, bool):
                    threshold: float | None = float(value)
                else:
                    threshold, unknown = None, frozenset({"int8-mixed"})
            else:
                threshold = 6.0  # bitsandbytes' default: the mixed-precision outlier path
            quant = QuantSpec(
                method="bitsandbytes", bits=8, quant_type="int8", int8_threshold=threshold
            )
            precision = "int8_pure" if threshold == 0.0 else "int8_mixed"
            return QuantFacts(precision, quant, node, unknown)
        if load_4 is True:
            quant_type = self.index.constant(items.get("bnb_4bit_quant_type"))
            double = self.index.constant(items.get("bnb_4bit_use_double_quant"))
            quant = QuantSpec(
                method="bitsandbytes",
                bits=4,
                # BitsAndBytesConfig defaults to fp4 when no quant type is given.
                quant_type=quant_type if isinstance(quant_type, str) else "fp4",
                compute_dtype=compute,
                double_quant=double if isinstance(double, bool) else False,
            )
            return QuantFacts("nf4_dq" if double is True else "nf4", quant, node)
        # load_in_8bit=False and load_in_4bit=False: a config that quantizes nothing.
        return QuantFacts(None, QuantSpec(), node)

    def _torchao_facts(self, expr: ast.expr | None, node: ast.AST) -> QuantFacts | None:
        label = self._torchao_label(expr)
        if label is None:
            return QuantFacts(None, QuantSpec(method="torchao"), node, _TORCHAO_RULES)
        for pattern, precision, bits, quant_type in _TORCHAO:
            if pattern.search(label):
                quant = QuantSpec(
                    method="torchao", bits=bits, quant_type=quant_type, compiled=self._compiled
                )
                return QuantFacts(precision, quant, node)
        return QuantFacts(None, QuantSpec(method="torchao", quant_type=label), node)

    def _torchao_label(self, expr: ast.expr | None, depth: int = 0) -> str | None:
        """The config class (or string) a torchao quant type names. A per-module mapping
        (``FqnToConfig({...})``, ``ModuleFqnToConfig``, ``AOPerModuleConfig``, a dict or dict
        comprehension of module names) is read through: a float8 entry decides, as any float8
        module runs the eager dequantization."""
        resolved = self.index.resolve(expr) if expr is not None and depth < 4 else None
        if resolved is None:
            return None
        inner = resolved.expr
        if isinstance(inner, ast.Constant) and isinstance(inner.value, str):
            return inner.value
        values: list[ast.expr] = []
        if isinstance(inner, ast.Call):
            name = self.index.callee(inner)
            if name not in _PER_MODULE:
                return name
            kwargs = self.index.keyword_nodes(inner)
            mapping = inner.args[0] if inner.args else next(iter(kwargs.values()), None)
            resolved_map = self.index.resolve(mapping) if mapping is not None else None
            inner = resolved_map.expr if resolved_map is not None else inner
        if isinstance(inner, ast.Dict):
            values = [v for v in inner.values if v is not None]
        elif isinstance(inner, ast.DictComp):
            values = [inner.value]
        labels = [self._torchao_label(v, depth + 1) for v in values]
        known = [label for label in labels if label and label != "None"]
        for label in known:
            if re.search(r"float8|fp8", label, re.I):
                return label
        return known[0] if known else None

    # -- generation -------------------------------------------------------------------------

    def _generate(self, call: ast.Call) -> None:
        kwargs = self.index.keyword_nodes(call)
        self._use_cache_kwarg(call, kwargs)
        per_item = self.loops.per_item(call, self.bs1_calls)
        if per_item is None:
            return
        where = f"generate (in `{per_item.via}`)" if per_item.via else "generate"
        message = (
            f"{where} is called {_per_item_text(per_item, self.line_label)}, one prompt per "
            f"call, {_BS1_TAIL}"
        )
        fix = _WHILE_FIX if per_item.kind in ("while", "handler") else _BATCH_FIX
        self._bs1_site("generate", call, per_item, message, fix)

    def _pipeline_call(self, call: ast.Call, construction: ast.Call) -> None:
        """A pipeline object called: once per item of a loop, or over a collection of inputs
        with ``batch_size`` left at the pipeline default of 1 (or set to 1)."""
        kwargs = self.index.keyword_nodes(call)
        self._use_cache_kwarg(call, kwargs)
        built = self.index.keyword_nodes(construction)
        given = kwargs.get("batch_size", built.get("batch_size"))
        batch = 1 if given is None else self.index.constant(given)
        name = call.func.id if isinstance(call.func, ast.Name) else "pipe"
        per_item = self.loops.per_item(call, self.bs1_calls)
        if per_item is not None:
            message = (
                f"the pipeline `{name}` is called {_per_item_text(per_item, self.line_label)}, one input per "
                f"call, {_BS1_TAIL}"
            )
            fix = f"{name}({per_item.over or 'inputs'}, batch_size=16)  # all inputs in one call"
            self._bs1_site("pipeline-call", call, per_item, message, fix)
            return
        if batch != 1:
            return
        data = self.loops.collection(call.args[0] if call.args else kwargs.get("inputs"))
        setting = "batch_size=1" if given is not None else "batch_size left at its default of 1"
        if data is not None:
            if data.items is not None and data.items < self.bs1_calls:
                return  # a handful of prompts is not a serving pattern
            count = f" ({data.items} items)" if data.items is not None else ""
            message = (
                f"the pipeline `{name}` runs over `{data.over}`{count} with {setting}: one "
                f"item per forward pass, {_BS1_TAIL}"
            )
            fix = f"{name}({data.over}, batch_size=16)  # batch_size is per call, default 1"
            self._bs1_site("pipeline-call", call, data, message, fix)
        elif given is not None:
            message = f"the pipeline `{name}` is called with batch_size=1, {_BS1_TAIL}"
            fix = f"{name}(list_of_inputs, batch_size=16)"
            self._bs1_site("pipeline-call", call, None, message, fix)

    def _bs1_site(
        self,
        kind: str,
        call: ast.Call,
        per_item: PerItem | None,
        message: str,
        fix: str | None = None,
    ) -> None:
        base = self._load_sites[0].deployment if len(self._load_sites) == 1 else Deployment()
        looping = per_item is not None and per_item.kind in ("for", "while", "comprehension")
        interactive = looping and self.loops.reads_stdin(per_item.node)  # type: ignore[union-attr]
        items = per_item.items if per_item is not None else None
        deployment = base.with_(
            gpu=self.gpu,
            batch_size=1,
            consecutive_bs1_calls=max(items or 0, self.bs1_calls),
            interactive=interactive,
        )
        details: list[tuple[str, object]] = []
        if per_item is not None:
            details.append(("loop_line", per_item.line))
            details.append(("loop_kind", per_item.kind))
            if per_item.over is not None:
                details.append(("loop_over", per_item.over))
            details.append(("loop_items", per_item.items))
            if per_item.via is not None:
                details.append(("helper", per_item.via))
        wording = {"message": message, "fix_summary": "send several prompts per call"}
        if fix:
            wording["fix"] = fix
        self.out.sites.append(
            Site(
                kind,
                call,
                deployment,
                only=("batch-size-one",),
                details=tuple(details),
                wording=(("batch-size-one", tuple(wording.items())),),
            )
        )

    # -- notes ------------------------------------------------------------------------------

    def _removed_kwargs(self, call: ast.Call, kwargs: dict[str, ast.expr]) -> None:
        # load_in_8bit=False asks for nothing; only a flag that may be True is the problem.
        flags = [
            k
            for k in ("load_in_8bit", "load_in_4bit")
            if k in kwargs and self.index.constant(kwargs[k]) is not False
        ]
        if not flags:
            return
        bits = "8" if "load_in_8bit" in flags else "4"
        config = (
            "BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0)"
            if bits == "8"
            else 'BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4")'
        )
        self.out.notes.append(
            RawNote(
                "audit/transformers5-removed-kwarg",
                Mood.YELLOW,
                f"{' and '.join(f + '=' for f in flags)} passed directly to from_pretrained: "
                "transformers 5 removed these arguments, so this load fails there.",
                f"from_pretrained(..., quantization_config={config})",
                call,
            )
        )

    def _use_cache_kwarg(self, call: ast.Call, kwargs: dict[str, ast.expr]) -> None:
        if "use_cache" in kwargs and self.index.constant(kwargs["use_cache"]) is False:
            # A load or config in a training setup turns the cache off on purpose; a
            # generate call with the cache off is slow whatever the script does besides.
            if self.index.callee(call) != "generate" and self._for_training(call):
                return
            self._kv_note(kwargs["use_cache"], "use_cache=True (or drop the argument)")

    def _use_cache_attributes(self) -> None:
        if self._training:
            return  # training scripts turn the cache off on purpose (gradient checkpointing)
        for node in ast.walk(self.index.tree):
            if (
                isinstance(node, ast.Assign)
                and any(
                    isinstance(t, ast.Attribute) and t.attr == "use_cache" for t in node.targets
                )
                and self.index.constant(node.value) is False
                and not self._for_training(node)
            ):
                self._kv_note(node, "<model>.config.use_cache = True (or drop the line)")

    def _for_training(self, node: ast.AST) -> bool:
        """Whether ``node`` sits in a training setup: the module trains, or a comment on the
        statement's line or just above it says so."""
        if self._training:
            return True
        statement = node
        while not isinstance(statement, ast.stmt) and statement in self.index.parent:
            statement = self.index.parent[statement]
        first, last = getattr(statement, "lineno", 0), getattr(statement, "end_lineno", 0)
        end_column = getattr(statement, "end_col_offset", 0) or 0
        texts = []
        if 1 <= last <= len(self.lines):
            # ast counts bytes; the comment after the statement's end is what is wanted.
            tail = self.lines[last - 1].encode("utf-8")[end_column:].decode("utf-8", "replace")
            texts.append(tail.strip())
        if 2 <= first <= len(self.lines) + 1:
            texts.append(self.lines[first - 2].strip())
        return any(t.startswith("#") and _TRAINING_WORDS.search(t) for t in texts)

    def _kv_note(self, node: ast.AST, fix: str) -> None:
        self.out.notes.append(
            RawNote(
                "audit/kv-cache-disabled",
                Mood.ORANGE,
                "use_cache=False turns off the KV cache: each new token recomputes attention "
                "over the whole prompt and output so far, so energy grows with the square of "
                "the length.",
                fix,
                node,
            )
        )

    # -- small facts ------------------------------------------------------------------------

    def _model(self, expr: ast.expr | None) -> ModelSpec:
        value = self.index.constant(expr) if expr is not None else UNKNOWN
        if not isinstance(value, str) or not value.strip():
            return ModelSpec()
        return self.resolve_model(value) or ModelSpec(id=value)

    def _dtype(self, expr: ast.expr | None) -> str | None:
        if expr is None:
            return None
        value = self.index.constant(expr)
        if not isinstance(value, str):
            return None
        return _DTYPES.get(value.rsplit(".", 1)[-1].lower())

    def _use_cache_value(self, kwargs: dict[str, ast.expr]) -> bool | None:
        value = self.index.constant(kwargs.get("use_cache")) if "use_cache" in kwargs else None
        return value if isinstance(value, bool) else None

    def _engine_of(self, call: ast.Call) -> str | None:
        """``vllm`` for vLLM's ``LLM``, ``sglang`` for SGLang's ``Engine``; None otherwise."""
        qualified = self.index.qualified_name(call.func) or ""
        for engine, class_name in (("vllm", "LLM"), ("sglang", "Engine")):
            if qualified.startswith(f"{engine}.") and qualified.endswith(f".{class_name}"):
                return engine
        return None

    def _assigned_name(self, call: ast.Call) -> str | None:
        parent = self.index.parent.get(call)
        if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
            target = parent.targets[0]
            if isinstance(target, ast.Name):
                return target.id
        return None

    def _module_compiles(self) -> bool:
        """Whether the module applies torch.compile anywhere (call, method or decorator)."""
        non_torch = {
            local
            for local, qualified in self.index.imports.items()
            if not qualified.startswith("torch")
        }
        for node in ast.walk(self.index.tree):
            target = node.func if isinstance(node, ast.Call) else None
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for decorator in node.decorator_list:
                    func = decorator.func if isinstance(decorator, ast.Call) else decorator
                    if (self.index.qualified_name(func) or "") == "torch.compile":
                        return True
            if target is None:
                continue
            qualified = self.index.qualified_name(target) or ""
            if qualified == "torch.compile":
                return True
            if (
                isinstance(target, ast.Attribute)
                and target.attr == "compile"
                and not (isinstance(target.value, ast.Name) and target.value.id in non_torch)
                and not qualified.startswith(("re.", "regex."))
            ):
                return True
        return False

    def _module_trains(self) -> bool:
        for node in ast.walk(self.index.tree):
            if isinstance(node, ast.Call) and self.index.callee(node) in _TRAINING_MARKERS:
                return True
        return False


# The static wording of batch-size-one: what the code shows, not what ran. The runtime fix
# (the guard's batcher) cannot help a loop that sends one call after another.
_BS1_TAIL = "so every token pays for a full pass over the weights that a batch would share."
_BATCH_FIX = (
    "for i in range(0, len(prompts), 16): model.generate(**tokenizer(prompts[i : i + 16], "
    'return_tensors="pt", padding=True))  # 16 prompts per call; left padding for decoder-only'
)
_WHILE_FIX = (
    "collect the waiting requests (up to 16) into one generate call, or serve with an engine "
    "that batches continuously (vLLM, TGI, SGLang)"
)


def _per_item_text(per_item: PerItem, label: Callable[[int | None], str]) -> str:
    """``once per item of `questions` (the for loop at line 13, 12 items)``."""
    line = label(per_item.line)
    if per_item.kind == "while":
        bound = ", which has no end condition" if per_item.unbounded else ""
        return f"once per turn of the while loop at {line}{bound}"
    if per_item.kind == "handler":
        return f"once per request to the web route declared at {line}"
    if per_item.kind == "apply":
        return f"once per row or element of `{per_item.over}` (per-item call at {line})"
    if per_item.kind == "map":
        return f"once per item of `{per_item.over}` (map at {line})"
    kind = "for loop" if per_item.kind == "for" else "comprehension"
    count = f", {per_item.items} items" if per_item.items is not None else ""
    if per_item.step is not None:
        count += f", whose step `{per_item.step}` is 1 where it is called"
    return f"once per item of `{per_item.over}` (the {kind} at {line}{count})"


_BNB_RULES = frozenset({"int8-mixed", "small-model-quant"})
_QUANT_RULES = frozenset({"int8-mixed", "small-model-quant", "fp8-eager"})
# from_quantized's library -> the format it loads.
_FROM_QUANTIZED = {"awq": "awq", "auto_gptq": "gptq", "gptqmodel": "gptq"}
# Libraries with a from_pretrained of their own, whose keywords are theirs, not transformers'.
_OWN_FROM_PRETRAINED = ("unsloth", "awq", "auto_gptq", "gptqmodel", "optimum", "peft", "vllm")


def _other_library(receiver: str | None) -> bool:
    """Whether ``receiver`` (a qualified name) comes from a library other than transformers
    (unsloth's FastLanguageModel takes load_in_4bit= itself)."""
    root = (receiver or "").split(".", 1)[0]
    return root in _OWN_FROM_PRETRAINED


def _vram_proxy(deployment: Deployment) -> tuple[str, str] | None:
    """torchao int4/int8 weights have no precision in the record; for sizing they weigh as
    the measured formats of the same width (4-bit with group scales, 8-bit)."""
    quant = deployment.quant
    if deployment.precision is not None or quant.method != "torchao":
        return None
    if quant.bits == 4:
        return "nf4_dq", "int4"
    if quant.bits == 8:
        return "int8_pure", "int8"
    return None


_TORCHAO_RULES = frozenset({"fp8-eager", "small-model-quant"})
# Python keyword per engine setting (vLLM's LLM(...), SGLang's Engine(...)).
_ENGINE_KWARGS = {
    "vllm": {
        "model": "model",
        "enforce_eager": "enforce_eager",
        "max_num_seqs": "max_num_seqs",
        "tensor_parallel_size": "tensor_parallel_size",
    },
    "sglang": {
        "model": "model_path",
        "enforce_eager": "disable_cuda_graph",
        "max_num_seqs": "max_running_requests",
        "tensor_parallel_size": "tp_size",
    },
}
_PER_MODULE = frozenset({"FqnToConfig", "ModuleFqnToConfig", "AOPerModuleConfig"})
