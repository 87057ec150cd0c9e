"""Quantization configs in a module's syntax tree, read as what they amount to (``QuantFacts``):
the settings are gathered from the syntax here and judged by :mod:`ecoguard.quantization`, the
reading the guard, the engines and the advisor share.

BitsAndBytesConfig (and its dict, ``from_dict`` and old ``load_in_*`` keyword forms),
TorchAoConfig and torchao's ``quantize_`` configs, GPTQ/AWQ configs and pre-quantized checkpoint
names. AWQ and GPTQ go through the engine-argument mapping (``ecoguard.engines.engine_args``),
so a script and a launch file with the same settings are judged alike. Only syntax is read.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from ecoguard.audit.index import UNKNOWN, ModuleIndex
from ecoguard.deployment import GpuSpec, QuantSpec
from ecoguard.engines.engine_args import EngineConfig, engine_deployment
from ecoguard.quantization import (
    BNB_DEFAULT_THRESHOLD,
    BNB_RULES,
    QUANT_RULES,
    bnb_4bit,
    bnb_8bit,
    dtype_name,
    torchao_facts,
)
from ecoguard.quantization import QuantFacts as Reading

_PER_MODULE = frozenset({"FqnToConfig", "ModuleFqnToConfig", "AOPerModuleConfig"})


@dataclass(frozen=True, slots=True)
class QuantFacts:
    """What a quantization config amounts to. ``node`` is where it was built (the fix goes
    there); ``unknown`` names rules whose facts could not be read from it."""

    precision: str | None
    quant: QuantSpec
    node: ast.AST
    unknown: frozenset[str] = frozenset()

    @classmethod
    def of(cls, reading: Reading, node: ast.AST) -> QuantFacts:
        """The shared reading (:mod:`ecoguard.quantization`) of a config built at ``node``."""
        return cls(reading.precision, reading.quant, node, reading.unknown)


def dtype_of(index: ModuleIndex, expr: ast.expr | None) -> str | None:
    """``bf16``/``fp16``/``fp32`` for ``torch.bfloat16``, ``"float16"`` and the like; else None."""
    if expr is None:
        return None
    value = index.constant(expr)
    return dtype_name(value) if isinstance(value, str) else None


def module_compiles(index: ModuleIndex) -> bool:
    """Whether the module applies torch.compile anywhere (call, method or decorator)."""
    non_torch = {
        local for local, qualified in index.imports.items() if not qualified.startswith("torch")
    }
    for node in ast.walk(index.tree):
        target = node.func if isinstance(node, ast.Call) else None
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for decorator in node.decorator_list:
                func = decorator.func if isinstance(decorator, ast.Call) else decorator
                if (index.qualified_name(func) or "") == "torch.compile":
                    return True
        if target is None:
            continue
        qualified = index.qualified_name(target) or ""
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


class QuantReader:
    """Reads the quantization configs of one module. ``consumed`` holds the config calls that
    reached a load, so the extractor judges only the others on their own."""

    def __init__(self, index: ModuleIndex, gpu: GpuSpec) -> None:
        self.index = index
        self.gpu = gpu
        self.compiled = module_compiles(index)  # torchao float8 is judged with it
        self.consumed: set[ast.AST] = set()

    def from_kwargs(self, kwargs: dict[str, ast.expr], call: ast.Call) -> QuantFacts | None:
        """The quantization a load's keywords ask for, or None when they ask for none."""
        if "quantization_config" in kwargs:
            facts = self.facts(kwargs["quantization_config"])
            if facts is None and self.index.constant(kwargs["quantization_config"]) is None:
                return None
            if facts is None:
                # Passed, but built somewhere the audit cannot see: do not guess.
                return QuantFacts(None, QuantSpec(), call, QUANT_RULES)
            return facts
        if "load_in_8bit" in kwargs or "load_in_4bit" in kwargs:
            # Old style: the flags straight on from_pretrained (the fix goes on the call).
            return self._bnb(kwargs, call)
        return None

    def facts(self, expr: ast.expr) -> QuantFacts | None:
        """What the config ``expr`` (a call, a dict, or a name leading to one) amounts to."""
        resolved = self.index.resolve(expr)
        if resolved is None:
            return None
        node = resolved.expr
        overrides = dict(resolved.overrides)
        if isinstance(node, ast.Call):
            return self._config_call(node, overrides)
        items = self.index.mapping(node)
        if items is None:
            return None
        items.update(overrides)
        method = self.index.constant(items.get("quant_method"))
        if method == "torchao":
            return self.torchao(items.get("quant_type"), node)
        if method not in (UNKNOWN, "bitsandbytes") and "quant_method" in items:
            return QuantFacts(None, QuantSpec(method=str(method)), node)
        return self._bnb(items, node)

    def _config_call(self, node: ast.Call, overrides: dict[str, ast.expr]) -> QuantFacts | None:
        name = self.index.callee(node)
        self.consumed.add(node)
        if name == "BitsAndBytesConfig":
            kwargs = self.index.keywords(node)
            if kwargs is None:
                return QuantFacts(None, QuantSpec(method="bitsandbytes"), node, BNB_RULES)
            return self._bnb({**kwargs, **overrides}, node)
        if name == "from_dict" and node.args:
            items = self.index.mapping(node.args[0])
            if items is not None:
                return self._bnb({**items, **overrides}, node)
            return None
        if name == "TorchAoConfig":
            kwargs = self.index.keyword_nodes(node)
            quant_type = node.args[0] if node.args else kwargs.get("quant_type")
            return self.torchao(quant_type, node)
        if name in ("GPTQConfig", "AwqConfig"):
            bits = self.index.constant(self.index.keyword_nodes(node).get("bits"))
            quant_config = {"bits": bits} if isinstance(bits, int) else {}
            return self.engine(name[:-6].lower(), quant_config, node)
        return None

    def from_name(self, model_expr: ast.expr | None, call: ast.Call) -> QuantFacts | None:
        """A pre-quantized checkpoint named as such (``...-AWQ``, ``...-GPTQ-Int4``): its own
        config carries the quantization, as vLLM's auto-detection reads it."""
        text = self.index.constant(model_expr) if model_expr is not None else UNKNOWN
        if not isinstance(text, str):
            return None
        facts = self.engine(None, {}, call, text)
        return facts if facts.quant.method in ("awq", "gptq") else None

    def engine(
        self, method: str | None, quant_config: dict, node: ast.AST, model: str | None = None
    ) -> QuantFacts:
        """AWQ / GPTQ (and what a checkpoint name says) as the engine-argument mapping judges
        them: weight-only 4-bit against NF4's measured rows, 8-bit against pure INT8's."""
        config = EngineConfig(
            engine="vllm", model=model, quantization=method, quant_config=quant_config or None
        )
        facts = engine_deployment(config, gpu=self.gpu)
        if facts.deployment.quant.method is None:
            return QuantFacts(None, QuantSpec(method="other"), node, QUANT_RULES)
        return QuantFacts(facts.deployment.precision, facts.deployment.quant, node, facts.unknown)

    def _bnb(self, items: dict[str, ast.expr], node: ast.AST) -> QuantFacts | None:
        constant = self.index.constant
        load_8 = constant(items["load_in_8bit"]) if "load_in_8bit" in items else False
        load_4 = constant(items["load_in_4bit"]) if "load_in_4bit" in items else False
        if load_8 is UNKNOWN or load_4 is UNKNOWN:
            return QuantFacts(None, QuantSpec(method="bitsandbytes"), node, BNB_RULES)
        if load_8 is True:
            return self._bnb_8bit(items, node)
        if load_4 is True:
            quant_type = constant(items.get("bnb_4bit_quant_type"))
            double = constant(items.get("bnb_4bit_use_double_quant"))
            reading = bnb_4bit(
                quant_type if isinstance(quant_type, str) else None,
                double_quant=double is True,
                compute_dtype=dtype_of(self.index, items.get("bnb_4bit_compute_dtype")),
            )
            return QuantFacts.of(reading, node)
        # load_in_8bit=False and load_in_4bit=False: a config that quantizes nothing.
        return QuantFacts(None, QuantSpec(), node)

    def _bnb_8bit(self, items: dict[str, ast.expr], node: ast.AST) -> QuantFacts:
        threshold: float | None = BNB_DEFAULT_THRESHOLD  # the mixed-precision outlier path
        if "llm_int8_threshold" in items:
            value = self.index.constant(items["llm_int8_threshold"])
            given = isinstance(value, int | float) and not isinstance(value, bool)
            threshold = float(value) if given else None  # None: the rule cannot tell
        return QuantFacts.of(bnb_8bit(threshold), node)

    def torchao(self, expr: ast.expr | None, node: ast.AST) -> QuantFacts | None:
        """What a torchao quant type (``TorchAoConfig``'s or ``quantize_``'s) amounts to."""
        reading = torchao_facts(self._torchao_label(expr), compiled=self.compiled)
        return QuantFacts.of(reading, node)

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
