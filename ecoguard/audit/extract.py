"""From a module's syntax tree to call sites: one Deployment per place a model is loaded,
quantized or generated with, plus the audit-only notes no runtime rule covers.

The extractor walks the calls once and hands each to the part that reads it: loads and
engines here, quantization configs to ``quant``, one-at-a-time calls to ``batch_size_one``,
audit-only notes to ``notes``. Only syntax is read.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Sequence

from ecoguard.audit.batch_size_one import BatchSizeOneSites
from ecoguard.audit.index import UNKNOWN, ModuleIndex, walk_scope
from ecoguard.audit.loops import Loops
from ecoguard.audit.notes import NoteFinder
from ecoguard.audit.quant import QUANT_RULES, QuantReader, dtype_of
from ecoguard.audit.site import Extraction, Site, user_code
from ecoguard.deployment import Deployment, GpuSpec, ModelSpec, QuantSpec
from ecoguard.engines.engine_args import EngineConfig, engine_deployment

# Callees whose ``from_pretrained`` loads something other than model weights.
_NOT_A_MODEL = re.compile(r"Tokenizer|Processor|Config|FeatureExtractor|Peft|Adapter|Scheduler")
_BATCHY_NAME = re.compile(r"batch|chunk", re.IGNORECASE)
_BATCHING_CALL = re.compile(r"batch|chunk|partition|split|group", re.IGNORECASE)
# from_quantized's library -> the format it loads.
_FROM_QUANTIZED = {"awq": "awq", "auto_gptq": "gptq", "gptqmodel": "gptq"}
# Libraries with a from_pretrained of their own, whose keywords are theirs, not transformers'.
_OWN_FROM_PRETRAINED = ("unsloth", "awq", "auto_gptq", "gptqmodel", "optimum", "peft", "vllm")
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
_FROM_PRETRAINED = "AutoModelForCausalLM.from_pretrained(model_id, "
_MODEL_SLOT = '"<model id>"'  # a marked slot: the file names no model argument
_QUANTIZED_NAME = re.compile(r"awq|gptq|gguf|exl2|bnb|int[48]|[48]-?bit|fp8", re.IGNORECASE)


class Extractor:
    """Walks one module and yields its sites. ``resolve_model`` maps a model id string to a
    ModelSpec (None when unknown); ``gpu`` is the GPU from ``--gpu`` (or an empty spec)."""

    def __init__(
        self,
        tree: ast.Module,
        *,
        gpu: GpuSpec,
        resolve_model: Callable[[str], ModelSpec | None],
        bs1_calls: int,
        lines: Sequence[str] = (),
        line_label: Callable[[int | None], str] = lambda line: f"line {line}",
    ) -> None:
        self.index = ModuleIndex(tree)
        self.gpu = gpu
        self.resolve_model = resolve_model
        self.out = Extraction()
        self._pipelines: dict[str, ast.Call] = {}
        self._load_sites: list[Site] = []
        # Facts about loops and helpers, each worked out once: a loop holding thousands of
        # generate calls must not be re-read per call (that made the audit quadratic).
        self.loops = Loops(self.index, _BATCHY_NAME, _BATCHING_CALL)
        self.quant = QuantReader(self.index, gpu)
        # ``lines``: the source lines, for comments (the tree has none).
        self.notes = NoteFinder(self.index, lines, self.out.notes)
        self.batch_size_one = BatchSizeOneSites(
            self.index,
            self.loops,
            gpu=gpu,
            bs1_calls=bs1_calls,
            line_label=line_label,  # "line 13", or "cell 6, line 2" in a notebook
            sites=self.out.sites,
            load_sites=self._load_sites,
        )
        self._scope_reads: dict[ast.AST, dict[str, list[int]]] = {}
        self._read_names: set[str] | None = None

    # -- entry ------------------------------------------------------------------------------

    def run(self, check: Callable[[], None] | None = None) -> Extraction:
        """``check`` is called between call sites; it may raise to stop a run that is over
        its time budget (the MCP server's audit_code). Loads come first, so the calls that
        use a model meet every load of the module."""
        calls = sorted(
            (n for n in ast.walk(self.index.tree) if isinstance(n, ast.Call)),
            key=lambda n: (n.lineno, n.col_offset),
        )
        for call in calls:
            self.loops.add_call(call)
        for call in calls:
            if check is not None:
                check()
            self._load(call)
        for call in calls:
            if check is not None:
                check()
            self._use(call)
        self.notes.use_cache_attributes()
        return self.out

    def _load(self, call: ast.Call) -> None:
        name = self.index.callee(call)
        if name == "from_pretrained":
            self._from_pretrained(call)
        elif name == "pipeline":
            self._pipeline(call)
        elif name in ("LLM", "Engine") and (engine := self._engine_of(call)):
            self._engine(call, engine)
        elif name == "quantize_":
            self._quantize(call)
        elif name == "from_quantized":
            self._from_quantized(call)

    def _use(self, call: ast.Call) -> None:
        name = self.index.callee(call)
        if name in ("BitsAndBytesConfig", "TorchAoConfig") and call not in self.quant.consumed:
            self._standalone_config(call)
        elif name == "generate":
            self.notes.use_cache_kwarg(call, self.index.keyword_nodes(call))
            self.batch_size_one.generate(call)
        elif name == "GenerationConfig":
            self.notes.use_cache_kwarg(call, self.index.keyword_nodes(call))
        elif isinstance(call.func, ast.Name) and call.func.id in self._pipelines:
            self.notes.use_cache_kwarg(call, self.index.keyword_nodes(call))
            self.batch_size_one.pipeline_call(call, self._pipelines[call.func.id])

    # -- loading ----------------------------------------------------------------------------

    def _from_pretrained(self, call: ast.Call) -> None:
        receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
        receiver_name = self.index.qualified_name(receiver) if receiver is not None else None
        if receiver_name and _NOT_A_MODEL.search(receiver_name.rsplit(".", 1)[-1]):
            return
        kwargs = self.index.keyword_nodes(call)
        model_expr = call.args[0] if call.args else kwargs.get("pretrained_model_name_or_path")
        self.notes.use_cache_kwarg(call, kwargs)
        if not _other_library(receiver_name):
            self.notes.removed_kwargs(call, kwargs)
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
        facts = self.quant.engine(method, {}, call, text if isinstance(text, str) else None)
        deployment = Deployment(
            model=self._model(model_expr),
            gpu=self.gpu,
            precision=facts.precision,
            quant=facts.quant,
            dtype="fp16",
        )
        # The fix loads the 16-bit base model, which the file does not name: a marked slot.
        base = '"<16-bit model id>"'
        fix_replace = (
            (_FROM_PRETRAINED, f"AutoModelForCausalLM.from_pretrained({base}, "),
            *self._compile_fix(call),
        )
        self._add_site(
            Site("load", call, deployment, unknown=facts.unknown, fix_replace=fix_replace)
        )

    def _pipeline(self, call: ast.Call) -> None:
        kwargs = self.index.keyword_nodes(call)
        model_expr = call.args[1] if len(call.args) > 1 else kwargs.get("model")
        model_kwargs = self.index.mapping(kwargs.get("model_kwargs")) or {}
        merged = {**model_kwargs, **{k: v for k, v in kwargs.items() if k != "model_kwargs"}}
        self.notes.use_cache_kwarg(call, model_kwargs)
        self.notes.removed_kwargs(call, model_kwargs)
        self._add_load_site("pipeline", call, model_expr, merged)
        target = self._assigned_name(call)
        if target is not None:
            self._pipelines[target] = call

    def _add_load_site(
        self, kind: str, call: ast.Call, model_expr: ast.expr | None, kwargs: dict
    ) -> None:
        quant = self.quant.from_kwargs(kwargs, call)
        if quant is not None and quant.quant.method is None and not quant.unknown:
            quant = None  # a config that quantizes nothing
        if quant is None:
            quant = self.quant.from_name(model_expr, call)
        dtype = dtype_of(self.index, kwargs.get("torch_dtype", kwargs.get("dtype")))
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
            fix_replace=(
                self._pipeline_fix(call, model_expr)
                if kind == "pipeline"
                else self._load_fix(call, model_expr)
            ),
            vram_precision=_vram_proxy(deployment),
        )
        self._add_site(site)

    def _add_site(self, site: Site) -> None:
        """A site that loads a model: later calls of the module may use it."""
        self.out.sites.append(site)
        self._load_sites.append(site)

    def _pipeline_fix(
        self, call: ast.Call, model_expr: ast.expr | None
    ) -> tuple[tuple[str, str], ...]:
        task = call.args[0] if call.args else self.index.keyword_nodes(call).get("task")
        func = user_code(call.func, "pipeline")
        task_text = user_code(task, '"<task>"')
        model = self._model_code(model_expr)
        return (
            (_FROM_PRETRAINED, f"{func}({task_text}, model={model}, "),
            ("# no quantization_config", "# no quantization_config in model_kwargs"),
        )

    def _load_fix(self, call: ast.Call, model_expr: ast.expr | None) -> tuple[tuple[str, str], ...]:
        """The rules' fixes say ``AutoModelForCausalLM.from_pretrained(model_id, ...)`` and
        ``model = torch.compile(model)``: in the audit, the file's own class, model argument
        and variable (a marked ``<...>`` slot where the file shows none)."""
        func = user_code(call.func, "AutoModelForCausalLM.from_pretrained")
        model = self._model_code(model_expr)
        return ((_FROM_PRETRAINED, f"{func}({model}, "), *self._compile_fix(call))

    def _model_code(self, model_expr: ast.expr | None) -> str:
        """The model argument for a fix that loads 16-bit weights: the file's own, unless it
        names a checkpoint quantized already (``...-AWQ``), whose 16-bit original the file
        does not show (a marked slot then)."""
        text = self.index.constant(model_expr) if model_expr is not None else UNKNOWN
        if isinstance(text, str) and _QUANTIZED_NAME.search(text):
            return '"<16-bit model id>"'
        return user_code(model_expr, _MODEL_SLOT)

    def _compile_fix(self, call: ast.Call) -> tuple[tuple[str, str], ...]:
        target = self._assigned_name(call)
        if target is None:
            return ()
        return (("model = torch.compile(model)", f"{target} = torch.compile({target})"),)

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
            dtype=dtype_of(self.index, kwargs.get("dtype")),
            enforce_eager=eager if isinstance(eager, bool) else None,
            max_num_seqs=seqs if type(seqs) is int else None,
            tensor_parallel_size=parallel if type(parallel) is int else None,
        )
        facts = engine_deployment(config, gpu=self.gpu, resolve_model=lambda _: model)
        unknown = set(facts.unknown)
        if method is UNKNOWN and "quantization" in kwargs:
            unknown.update(QUANT_RULES)
        callee = self.index.callee(call)
        site = Site(
            engine,
            call,
            facts.deployment,
            unknown=frozenset(unknown),
            details=facts.details[1:],
            wording=(("batch-size-one", _engine_bs1_wording(callee, names["max_num_seqs"])),),
            fix_replace=(
                (
                    _FROM_PRETRAINED,
                    f"{callee}({names['model']}={self._model_code(model_expr)}, ",
                ),
                ("# no quantization_config", "# the 16-bit checkpoint, no quantization="),
                ("torch.bfloat16", '"bfloat16"'),
                ("torch.float16", '"float16"'),
            ),
        )
        self._add_site(site)

    def _quantize(self, call: ast.Call) -> None:
        if len(call.args) < 2:
            return
        facts = self.quant.torchao(call.args[1], call)
        if facts is None:
            return
        deployment = Deployment(gpu=self.gpu, precision=facts.precision, quant=facts.quant)
        self.out.sites.append(
            Site("torchao-quantize", call, deployment, facts.node, unknown=facts.unknown)
        )

    # -- configs built but not passed to a load ----------------------------------------------

    def _standalone_config(self, call: ast.Call) -> None:
        """A config built but not passed to a load in this module (a shared config module):
        judged on its own, without the model it will meet. One whose name is assigned again
        before anything reads it is dead code and never reaches a model: skipped."""
        if self._overwritten_unread(call) or self._never_read(call):
            return
        facts = self.quant.facts(call)
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

    # -- small facts ------------------------------------------------------------------------

    def _model(self, expr: ast.expr | None) -> ModelSpec:
        value = self.index.constant(expr) if expr is not None else UNKNOWN
        if not isinstance(value, str) or not value.strip():
            return ModelSpec()
        return self.resolve_model(value) or ModelSpec(id=value)

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


def _engine_bs1_wording(callee: str, seqs_name: str) -> tuple[tuple[str, str], ...]:
    """batch-size-one said of an engine built to run one sequence at a time."""
    return (
        (
            "message",
            f"{callee}({seqs_name}=1) lets the engine run one sequence at a time, so every "
            f"generated token pays for a full pass over the weights that a batch of "
            "concurrent requests would share.",
        ),
        ("fix", f"{callee}(..., {seqs_name}=256)  # or drop {seqs_name}: the engine batches"),
        ("fix_summary", f"raise {seqs_name} above 1"),
    )


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
