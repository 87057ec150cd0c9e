"""From a module's syntax tree to call sites: one Deployment per place a model is loaded,
quantized or generated with, plus the audit-only notes no runtime rule covers.

Only syntax is read. A site carries the node a finding should point at, and the rules whose
facts could not be worked out (``unknown``): their findings are dropped rather than guessed.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ecoguard.audit.index import UNKNOWN, ModuleIndex, walk_scope
from ecoguard.deployment import Deployment, GpuSpec, ModelSpec, QuantSpec
from ecoguard.engines.engine_args import EngineConfig, engine_deployment
from ecoguard.findings import Mood

# Callees whose ``from_pretrained`` loads something other than model weights.
_NOT_A_MODEL = re.compile(r"Tokenizer|Processor|Config|FeatureExtractor|Peft|Adapter|Scheduler")
_BATCHY_NAME = re.compile(r"batch|chunk", re.IGNORECASE)
_BATCHING_CALL = re.compile(r"batch|chunk|partition|split|group", re.IGNORECASE)
_TRAINING_MARKERS = ("Trainer", "SFTTrainer", "gradient_checkpointing_enable", "backward")

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
    ) -> None:
        self.index = ModuleIndex(tree)
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
        self._loops: dict[ast.AST, ast.AST | None] | None = None
        self._loop_batched: dict[ast.AST, bool] = {}
        self._helper_loop: dict[ast.AST, ast.AST | None] = {}
        self._calls_by_name: dict[str, list[ast.Call]] = {}
        self._holds_marks: dict[ast.AST, int] | None = None
        self._scope_reads: dict[ast.AST, dict[str, list[int]]] = {}

    # -- entry ------------------------------------------------------------------------------

    def run(self, check: Callable[[], None] | None = None) -> Extraction:
        """``check`` is called between call sites; it may raise to stop a run that is over
        its time budget (the MCP server's audit_code)."""
        calls = sorted(
            (n for n in ast.walk(self.index.tree) if isinstance(n, ast.Call)),
            key=lambda n: (n.lineno, n.col_offset),
        )
        for call in calls:
            if isinstance(call.func, ast.Name):
                self._calls_by_name.setdefault(call.func.id, []).append(call)
        for call in calls:
            if check is not None:
                check()
            name = self.index.callee(call)
            if name == "from_pretrained":
                self._from_pretrained(call)
            elif name == "pipeline":
                self._pipeline(call)
            elif name == "LLM" and self._is_vllm(call):
                self._vllm(call)
            elif name == "quantize_":
                self._quantize(call)
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
        self._removed_kwargs(call, kwargs)
        self._add_load_site("load", call, model_expr, kwargs)

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
        )
        self.out.sites.append(site)
        self._load_sites.append(site)

    def _vllm(self, call: ast.Call) -> None:
        """``LLM(...)``: its keywords are vLLM engine arguments, mapped by the module launch
        files and the vLLM plugin use (``ecoguard.engines.engine_args``)."""
        kwargs = self.index.keyword_nodes(call)
        model_expr = call.args[0] if call.args else kwargs.get("model")
        model = self._model(model_expr)
        method = self.index.constant(kwargs.get("quantization"))
        eager = self.index.constant(kwargs.get("enforce_eager"))
        config = EngineConfig(
            engine="vllm",
            model=self.index.constant(model_expr) if model.id else None,  # type: ignore[arg-type]
            quantization=method if isinstance(method, str) else None,
            dtype=self._dtype(kwargs.get("dtype")),
            enforce_eager=eager if isinstance(eager, bool) else None,
        )
        facts = engine_deployment(config, gpu=self.gpu, resolve_model=lambda _: model)
        unknown = set(facts.unknown)
        if method is UNKNOWN and "quantization" in kwargs:
            unknown.update({"small-model-quant", "int8-mixed", "fp8-eager"})
        # batch-size-one's wording is the generate loop's; LLM(max_num_seqs=1) is not judged here.
        site = Site(
            "vllm", call, facts.deployment, unknown=frozenset(unknown), details=facts.details[1:]
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
        if self._overwritten_unread(call):
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
                return QuantFacts(
                    None,
                    QuantSpec(method=name[:-6].lower(), bits=bits if isinstance(bits, int) else 4),
                    node,
                )
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
        resolved = self.index.resolve(expr) if expr is not None else None
        label: str | None = None
        if resolved is not None:
            inner = resolved.expr
            if isinstance(inner, ast.Call):
                label = self.index.callee(inner)
            elif isinstance(inner, ast.Constant) and isinstance(inner.value, str):
                label = inner.value
        if label is None:
            return QuantFacts(None, QuantSpec(method="torchao"), node, _TORCHAO_RULES)
        for pattern, precision, bits, quant_type in _TORCHAO:
            if pattern.search(label):
                quant = QuantSpec(
                    method="torchao", bits=bits, quant_type=quant_type, compiled=self._compiled
                )
                return QuantFacts(precision, quant, node)
        return QuantFacts(None, QuantSpec(method="torchao", quant_type=label), node)

    # -- generation -------------------------------------------------------------------------

    def _generate(self, call: ast.Call) -> None:
        kwargs = self.index.keyword_nodes(call)
        self._use_cache_kwarg(call, kwargs)
        loop = self._single_item_loop(call)
        if loop is None:
            return
        self._bs1_site("generate", call, loop)

    def _pipeline_call(self, call: ast.Call, construction: ast.Call) -> None:
        kwargs = self.index.keyword_nodes(call)
        self._use_cache_kwarg(call, kwargs)
        batch = self.index.constant(kwargs.get("batch_size"))
        if "batch_size" not in kwargs:
            batch = self.index.constant(self.index.keyword_nodes(construction).get("batch_size"))
        loop = self._single_item_loop(call)
        if loop is not None:
            self._bs1_site("pipeline-call", call, loop)
        elif batch == 1:
            self._bs1_site("pipeline-call", call, None)

    def _bs1_site(self, kind: str, call: ast.Call, loop: ast.AST | None) -> None:
        base = self._load_sites[0].deployment if len(self._load_sites) == 1 else Deployment()
        interactive = loop is not None and self._reads_stdin(loop)
        deployment = base.with_(
            gpu=self.gpu,
            batch_size=1,
            consecutive_bs1_calls=self.bs1_calls,
            interactive=interactive,
        )
        details: tuple[tuple[str, object], ...] = ()
        if loop is not None:
            details = (("loop_line", getattr(loop, "lineno", None)),)
        self.out.sites.append(
            Site(kind, call, deployment, only=("batch-size-one",), details=details)
        )

    def _single_item_loop(self, call: ast.Call) -> ast.AST | None:
        """The loop that runs this call once per item, if any. One level of helpers is
        followed: a function holding the call, itself called from a loop."""
        loop = self._enclosing_loop(call)
        if loop is not None:
            return None if self._batched(loop) else loop
        scope = self.index.scope_of(call)
        if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
            return None
        if scope not in self._helper_loop:
            found = None
            for node in self._calls_by_name.get(scope.name, ()):
                outer = self._enclosing_loop(node)
                if outer is not None and not self._batched(outer):
                    found = outer
                    break
            self._helper_loop[scope] = found
        return self._helper_loop[scope]

    def _enclosing_loop(self, node: ast.AST) -> ast.AST | None:
        """The innermost loop (in the same function) whose body runs ``node`` once per turn.
        A loop's own iterable, target and ``else`` run once, so they do not count."""
        if self._loops is None:
            self._loops = self._loop_map()
        return self._loops.get(node)

    def _loop_map(self) -> dict[ast.AST, ast.AST | None]:
        """Every node's enclosing loop, in one pass from the top (asking each call's
        ancestors would cost the nesting depth per call)."""
        loops: dict[ast.AST, ast.AST | None] = {self.index.tree: None}
        stack: list[ast.AST] = [self.index.tree]
        while stack:
            node = stack.pop()
            for child in ast.iter_child_nodes(node):
                loops[child] = self._loop_for_child(node, child, loops)
                stack.append(child)
        return loops

    def _loop_for_child(
        self, node: ast.AST, child: ast.AST, loops: dict[ast.AST, ast.AST | None]
    ) -> ast.AST | None:
        """The loop that runs ``child`` once per turn; ``loops`` already holds ``node`` (its
        parent) and every ancestor."""
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return None  # a function's body runs when called, not per turn of a loop around it
        field = self.index.field.get(child)
        if isinstance(node, ast.For | ast.AsyncFor):
            return loops[node] if field in ("iter", "target", "orelse") else node
        if isinstance(node, ast.While):
            return loops[node] if field == "orelse" else node
        if isinstance(node, _COMPREHENSIONS):
            return node
        if isinstance(node, ast.comprehension) and field == "iter":
            owner = self.index.parent.get(node)
            if isinstance(owner, _COMPREHENSIONS) and owner.generators[0] is node:
                return loops[owner]  # the first iterable is evaluated once, outside
        return loops[node]

    def _batched(self, loop: ast.AST) -> bool:
        """Whether each turn of ``loop`` handles several items (so its calls are batched)."""
        if loop not in self._loop_batched:
            self._loop_batched[loop] = self._reads_batches(loop)
        return self._loop_batched[loop]

    def _reads_batches(self, loop: ast.AST) -> bool:
        targets: list[ast.expr] = []
        iters: list[ast.expr] = []
        if isinstance(loop, ast.For | ast.AsyncFor):
            targets, iters = [loop.target], [loop.iter]
        elif isinstance(loop, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            targets = [g.target for g in loop.generators]
            iters = [g.iter for g in loop.generators]
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name) and _BATCHY_NAME.search(name.id):
                    return True
        for iterable in iters:
            if self._batching_iterable(iterable):
                return True
        # Slicing inside the loop (prompts[i:i + bs]) feeds several items per turn; a
        # serving loop that drains a queue into a named batch is batched.
        holds = self._holds()
        body = loop.body if isinstance(loop, ast.For | ast.AsyncFor | ast.While) else [loop]
        marks = (_SLICE, _BATCH_STORE) if isinstance(loop, ast.While) else (_SLICE,)
        return any(holds.get(statement, 0) & mark for statement in body for mark in marks)

    def _holds(self) -> dict[ast.AST, int]:
        """Node -> bit set of what its subtree holds (a slice, a store to a batch-like name,
        a stdin read), in one pass over the module however many loops ask."""
        if self._holds_marks is None:
            marks: dict[ast.AST, int] = {}
            for node in ast.walk(self.index.tree):
                mark = 0
                if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
                    mark = _SLICE
                elif (
                    isinstance(node, ast.Name)
                    and isinstance(node.ctx, ast.Store)
                    and _BATCHY_NAME.search(node.id)
                ):
                    mark = _BATCH_STORE
                elif isinstance(node, ast.Call) and self.index.callee(node) in (
                    "input",
                    "readline",
                ):
                    mark = _STDIN
                current: ast.AST | None = node
                # Climb while the mark is news: each node gains each bit once, so the
                # whole pass stays linear in the size of the module.
                while mark and current is not None and marks.get(current, 0) & mark != mark:
                    marks[current] = marks.get(current, 0) | mark
                    current = self.index.parent.get(current)
            self._holds_marks = marks
        return self._holds_marks

    def _batching_iterable(self, iterable: ast.expr) -> bool:
        resolved = self.index.resolve(iterable)
        node = resolved.expr if resolved is not None else iterable
        if not isinstance(node, ast.Call):
            return False
        name = self.index.callee(node)
        if name == "range":
            return len(node.args) == 3 and self.index.constant(node.args[2]) != 1
        if name == "DataLoader":
            kwargs = self.index.keyword_nodes(node)
            if "batch_size" not in kwargs:
                return False  # DataLoader's default batch size is 1
            size = self.index.constant(kwargs["batch_size"])
            # An unreadable size (a variable from the CLI) is given the benefit of the doubt.
            return size is UNKNOWN or (isinstance(size, int) and size > 1)
        if name in ("enumerate", "zip", "list", "tuple", "sorted", "reversed", "iter"):
            return any(self._batching_iterable(arg) for arg in node.args)
        return bool(_BATCHING_CALL.search(name))

    def _reads_stdin(self, loop: ast.AST) -> bool:
        return bool(self._holds().get(loop, 0) & _STDIN)

    # -- notes ------------------------------------------------------------------------------

    def _removed_kwargs(self, call: ast.Call, kwargs: dict[str, ast.expr]) -> None:
        flags = [k for k in ("load_in_8bit", "load_in_4bit") if k in kwargs]
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
            ):
                self._kv_note(node, "<model>.config.use_cache = True (or drop the line)")

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

    def _is_vllm(self, call: ast.Call) -> bool:
        qualified = self.index.qualified_name(call.func) or ""
        return qualified.startswith("vllm.")

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


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
# What a subtree holds (bits of Extractor._holds).
_SLICE, _BATCH_STORE, _STDIN = 1, 2, 4
_BNB_RULES = frozenset({"int8-mixed", "small-model-quant"})
_TORCHAO_RULES = frozenset({"fp8-eager", "small-model-quant"})
