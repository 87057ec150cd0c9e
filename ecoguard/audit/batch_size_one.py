"""Batch-size-one call sites: ``generate`` or a pipeline called once per item of a loop, a
comprehension, a ``while`` or a web route, or a pipeline run over a collection at
``batch_size=1``. The wording is the audit's own: it says what the code shows, not what ran.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

from ecoguard.audit.index import ModuleIndex
from ecoguard.audit.loops import Loops, PerItem
from ecoguard.audit.site import Site, user_code
from ecoguard.deployment import Deployment, GpuSpec

# The runtime fix (the guard's batcher) cannot help a loop that sends one call after another.
_BS1_TAIL = "so every token pays for a full pass over the weights that a batch would share."
# The fix in the file's own names; a marked <slot> where the file does not show one.
_BATCH_FIX = (
    "for i in range(0, len({data}), 16): {model}.generate(**{tokenizer}({data}[i : i + 16], "
    'return_tensors="pt", padding=True))  # 16 prompts per call; left padding for decoder-only'
)
_TOKENIZER = re.compile(r"Tokenizer|Processor")
# Calls whose first argument is the data a loop walks (``enumerate(prompts)``).
_WRAPPERS = frozenset({"enumerate", "list", "tuple", "sorted", "reversed", "iter", "tqdm"})
_WHILE_FIX = (
    "collect the waiting requests (up to 16) into one generate call, or serve with an engine "
    "that batches continuously (vLLM, TGI, SGLang)"
)


class BatchSizeOneSites:
    """Appends a batch-size-one site to ``sites`` per call made one item at a time. A site
    takes the module's model from ``load_sites`` when there is exactly one."""

    def __init__(
        self,
        index: ModuleIndex,
        loops: Loops,
        *,
        gpu: GpuSpec,
        bs1_calls: int,
        line_label: Callable[[int | None], str],
        sites: list[Site],
        load_sites: list[Site],
    ) -> None:
        self.index = index
        self.loops = loops
        self.gpu = gpu
        self.bs1_calls = bs1_calls
        self.line_label = line_label
        self.sites = sites
        self.load_sites = load_sites
        self._tokenizer: str | None = None

    def generate(self, call: ast.Call) -> None:
        """``model.generate(...)`` once per item."""
        per_item = self.loops.per_item(call, self.bs1_calls)
        if per_item is None:
            return
        where = f"generate (in `{per_item.via}`)" if per_item.via else "generate"
        message = (
            f"{where} is called {per_item_text(per_item, self.line_label)}, one prompt per "
            f"call, {_BS1_TAIL}"
        )
        if per_item.kind in ("while", "handler"):
            fix = _WHILE_FIX
        else:
            fix = _BATCH_FIX.format(
                data=self._data_code(per_item),
                model=user_code(call.func.value, "model")  # type: ignore[attr-defined]
                if isinstance(call.func, ast.Attribute)
                else "model",
                tokenizer=self._tokenizer_code(call),
            )
        self._site("generate", call, per_item, message, fix)

    def _data_code(self, per_item: PerItem) -> str:
        """The data the loop walks, as the file names it (``questions``, ``df["text"]``)."""
        loop = per_item.node
        if isinstance(loop, ast.For | ast.AsyncFor):
            data = loop.iter
        elif isinstance(loop, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            data = loop.generators[0].iter
        elif per_item.kind in ("map", "apply") and isinstance(loop, ast.Call):
            data = loop.args[1] if per_item.kind == "map" else loop.func.value  # type: ignore[attr-defined]
        else:
            return "<prompts>"
        while isinstance(data, ast.Call) and self.index.callee(data) in _WRAPPERS and data.args:
            data = data.args[0]
        if isinstance(data, ast.Name | ast.Attribute | ast.Subscript):
            return user_code(data, "<prompts>")
        return "<prompts>"

    def _tokenizer_code(self, call: ast.Call) -> str:
        """The tokenizer the call's inputs come from (``**tok(q, ...)``, or ``**inputs`` with
        ``inputs = tok(q, ...)``), else the marked slot ``<tokenizer>``."""
        for value in (*call.args, *(k.value for k in call.keywords)):
            resolved = self.index.resolve(value)
            node = resolved.expr if resolved is not None else value
            if isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Attribute) and func.attr in ("to", "cuda"):
                    func = func.value.func if isinstance(func.value, ast.Call) else func
                if isinstance(func, ast.Name):
                    return func.id
        return self._module_tokenizer()

    def _module_tokenizer(self) -> str:
        """The one name the module binds to ``...Tokenizer.from_pretrained(...)`` (or a
        processor), once per module; the marked slot ``<tokenizer>`` when none or several."""
        if self._tokenizer is None:
            names = {
                name
                for (_, name), entries in self.index.assigns.items()
                for _, value in entries
                if isinstance(value, ast.Call)
                and self.index.callee(value) == "from_pretrained"
                and _TOKENIZER.search(self.index.qualified_name(value.func) or "")
            }
            self._tokenizer = names.pop() if len(names) == 1 else "<tokenizer>"
        return self._tokenizer

    def pipeline_call(self, call: ast.Call, construction: ast.Call) -> None:
        """A pipeline object called: once per item of a loop, or over a collection of inputs
        with ``batch_size`` left at the pipeline default of 1 (or set to 1)."""
        kwargs = self.index.keyword_nodes(call)
        built = self.index.keyword_nodes(construction)
        given = kwargs.get("batch_size", built.get("batch_size"))
        batch = 1 if given is None else self.index.constant(given)
        name = call.func.id if isinstance(call.func, ast.Name) else "pipe"
        per_item = self.loops.per_item(call, self.bs1_calls)
        if per_item is not None:
            message = (
                f"the pipeline `{name}` is called {per_item_text(per_item, self.line_label)}, "
                f"one input per call, {_BS1_TAIL}"
            )
            fix = f"{name}({per_item.over or 'inputs'}, batch_size=16)  # all inputs in one call"
            self._site("pipeline-call", call, per_item, message, fix)
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
            self._site("pipeline-call", call, data, message, fix)
        elif given is not None:
            message = f"the pipeline `{name}` is called with batch_size=1, {_BS1_TAIL}"
            fix = f"{name}(list_of_inputs, batch_size=16)"
            self._site("pipeline-call", call, None, message, fix)

    def _site(
        self, kind: str, call: ast.Call, per_item: PerItem | None, message: str, fix: str
    ) -> None:
        base = self.load_sites[0].deployment if len(self.load_sites) == 1 else Deployment()
        looping = per_item is not None and per_item.kind in ("for", "while", "comprehension")
        interactive = looping and self.loops.reads_stdin(per_item.node)  # type: ignore[union-attr]
        items = per_item.items if per_item is not None else None
        deployment = base.with_(
            gpu=self.gpu,
            batch_size=1,
            consecutive_bs1_calls=max(items or 0, self.bs1_calls),
            interactive=interactive,
        )
        wording = {"message": message, "fix_summary": "send several prompts per call"}
        if fix:
            wording["fix"] = fix
        self.sites.append(
            Site(
                kind,
                call,
                deployment,
                only=("batch-size-one",),
                details=_loop_details(per_item),
                wording=(("batch-size-one", tuple(wording.items())),),
            )
        )


def _loop_details(per_item: PerItem | None) -> tuple[tuple[str, object], ...]:
    if per_item is None:
        return ()
    details: list[tuple[str, object]] = [("loop_line", per_item.line), ("loop_kind", per_item.kind)]
    if per_item.over is not None:
        details.append(("loop_over", per_item.over))
    details.append(("loop_items", per_item.items))
    if per_item.via is not None:
        details.append(("helper", per_item.via))
    return tuple(details)


def per_item_text(per_item: PerItem, label: Callable[[int | None], str]) -> str:
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
