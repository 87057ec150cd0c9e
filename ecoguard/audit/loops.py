"""Which calls run once per item of some data: loops, comprehensions, per-row ``apply`` and
``map``, and helpers called from them; how many items (when the code says); and whether each
turn handles one item or a batch.

Everything is worked out once per module (a loop map from the top, a bit set of what each
subtree holds, one answer per loop and per helper), so a module with thousands of generate
calls stays linear in its size.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace

from ecoguard.audit.index import UNKNOWN, ModuleIndex

_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# What a subtree holds (bits of Loops.holds).
SLICE, BATCH_STORE, STDIN, DRAIN = 1, 2, 4, 8
# Queue reads whose results, appended in a loop of their own, make a batch (a serving worker
# draining its queue: ``while ...: pending.append(q.get_nowait())``).
_QUEUE_READS = frozenset({"get", "get_nowait", "popleft", "pop", "recv"})

# Methods that call their function argument once per element or row (pandas, datasets,
# tqdm's pandas hook, swifter/pandarallel), and the builtin ``map``.
PER_ITEM_METHODS = frozenset(
    {"apply", "progress_apply", "parallel_apply", "map", "progress_map", "applymap", "transform"}
)
# Decorators that make a function a web handler (FastAPI, Flask, Starlette-style routers).
ROUTE_DECORATORS = frozenset({"post", "get", "put", "route", "api_route", "websocket"})
# Calls that build a data collection a pipeline iterates over item by item.
DATASET_CALLS = frozenset(
    {
        "KeyDataset",
        "KeyPairDataset",
        "load_dataset",
        "load_from_disk",
        "from_pandas",
        "from_dict",
        "from_list",
        "from_generator",
        "tolist",
        "to_list",
        "readlines",
    }
)

_TEXT_LIMIT = 48
# Call sites read to resolve step parameters (``range(0, n, step)``), per call in the module
# plus a floor: linear work however the functions and calls are arranged.
_CALL_READS_PER_CALL = 16
_CALL_READS_FLOOR = 20_000


@dataclass(frozen=True, slots=True)
class PerItem:
    """Where a call runs once per item. ``node`` is the loop, comprehension or per-item call
    (``df.apply(...)``); ``over`` the code of what it iterates; ``items`` the number of items
    when the code fixes it (a literal list, ``range(10)``), else None; ``via`` the helper
    function the call sits in when the loop calls that helper, else None; ``unbounded`` for a
    ``while`` loop. ``step`` names the step of a ``range(0, n, step)`` that is 1 where the
    function is called."""

    node: ast.AST
    kind: str  # for, while, comprehension, apply, map, handler, pipeline
    over: str | None
    items: int | None
    via: str | None = None
    unbounded: bool = False
    step: str | None = None  # range(0, n, step) whose step (a name) resolves to 1

    @property
    def line(self) -> int | None:
        return getattr(self.node, "lineno", None)


class Loops:
    """Loop facts for one module (see the module docstring)."""

    def __init__(self, index: ModuleIndex, batchy_name, batching_call) -> None:
        self.index = index
        self._batchy_name = batchy_name
        self._batching_call = batching_call
        self._loops: dict[ast.AST, ast.AST | None] | None = None
        self._batched: dict[ast.AST, bool] = {}
        self._helper: dict[ast.AST, PerItem | None] = {}
        self._described: dict[ast.AST, PerItem] = {}
        self._holds: dict[ast.AST, int] | None = None
        self._param_values: dict[tuple[object, ...], object] = {}
        self._caller_by_name: dict[str, PerItem | None] = {}
        self._call_reads = 0
        self._budget: int | None = None
        self.calls_by_name: dict[str, list[ast.Call]] = {}
        # Function name -> calls that pass it by name (``df.apply(helper)``, ``map(helper, xs)``).
        self.passed_by_name: dict[str, list[ast.Call]] = {}

    def add_call(self, call: ast.Call) -> None:
        """Record a call (in source order) for the helper lookups."""
        if isinstance(call.func, ast.Name):
            self.calls_by_name.setdefault(call.func.id, []).append(call)
        for arg in (*call.args, *(k.value for k in call.keywords)):
            if isinstance(arg, ast.Name):
                self.passed_by_name.setdefault(arg.id, []).append(call)

    # -- the question the extractor asks ------------------------------------------------

    def per_item(self, call: ast.Call, min_items: int) -> PerItem | None:
        """How ``call`` runs once per item of some data, if it does (a loop of fewer than
        ``min_items`` known items does not count: a few prompts are not a serving pattern).
        One level of helpers is followed: a function holding the call, itself called once
        per item (from a loop, a per-row ``apply``, ``map``, or a lambda given to one)."""
        found = self._direct(call)
        if found is None:
            scope = self.index.scope_of(call)
            if isinstance(scope, _FUNCTIONS):
                if scope not in self._helper:
                    self._helper[scope] = self._helper_caller(scope)
                found = self._helper[scope]
        if found is None or (found.items is not None and found.items < min_items):
            return None
        return found

    def _direct(self, node: ast.AST) -> PerItem | None:
        loop = self.enclosing_loop(node)
        if loop is not None:
            return None if self.batched(loop) else self.describe(loop)
        scope = self.index.scope_of(node)
        if isinstance(scope, ast.Lambda):
            return self._lambda_caller(scope)
        return None

    def _helper_caller(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> PerItem | None:
        name = function.name
        route = _route(function)
        if route is not None:
            # A web handler (FastAPI, Flask): the server calls it once per request.
            return PerItem(route, "handler", None, None, name)
        # The callers are found by name, so functions sharing a name (redefinitions) share
        # the answer: asked once per name, not once per function (8,000 same-named functions
        # with as many calls read 68 million calls).
        if name not in self._caller_by_name:
            self._caller_by_name[name] = self._caller_of(name)
        return self._caller_by_name[name]

    def _caller_of(self, name: str) -> PerItem | None:
        for node in self.calls_by_name.get(name, ()):
            found = self._direct(node)
            if found is not None:
                return _via(found, name)
        for node in self.passed_by_name.get(name, ()):
            found = self._per_item_call(node)
            if found is not None:
                return _via(found, name)
        return None

    def _lambda_caller(self, function: ast.Lambda) -> PerItem | None:
        parent = self.index.parent.get(function)
        if isinstance(parent, ast.keyword):
            parent = self.index.parent.get(parent)
        return self._per_item_call(parent) if isinstance(parent, ast.Call) else None

    def _per_item_call(self, call: ast.Call) -> PerItem | None:
        """``df.apply(f)``, ``series.progress_apply(f)``, ``ds.map(f)`` (not ``batched=True``),
        ``map(f, xs)``: the function runs once per item."""
        func = call.func
        if isinstance(func, ast.Name) and self.index.callee(call) == "map" and len(call.args) > 1:
            return PerItem(call, "map", _text(call.args[1]), self.items(call.args[1]))
        if not (isinstance(func, ast.Attribute) and func.attr in PER_ITEM_METHODS):
            return None
        kwargs = self.index.keyword_nodes(call)
        if self.index.constant(kwargs.get("batched")) is True:
            return None  # datasets' map(batched=True) hands the function whole batches
        return PerItem(call, "apply", _text(func.value), None)

    # -- loops ----------------------------------------------------------------------------

    def enclosing_loop(self, node: ast.AST) -> ast.AST | None:
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
        if isinstance(node, (*_FUNCTIONS, ast.Lambda)):
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

    def describe(self, loop: ast.AST) -> PerItem:
        """What ``loop`` iterates, once per loop however many calls it holds."""
        if loop not in self._described:
            self._described[loop] = self._describe(loop)
        return self._described[loop]

    def _describe(self, loop: ast.AST) -> PerItem:
        if isinstance(loop, ast.While):
            return PerItem(loop, "while", None, None, unbounded=_forever(loop))
        if isinstance(loop, ast.For | ast.AsyncFor):
            step = None
            if self.range_step(loop.iter) == 1:
                step_arg = loop.iter.args[2]  # type: ignore[attr-defined]
                step = None if isinstance(step_arg, ast.Constant) else _text(step_arg)
            return PerItem(loop, "for", _text(loop.iter), self.items(loop.iter), step=step)
        assert isinstance(loop, _COMPREHENSIONS)
        first = loop.generators[0].iter
        return PerItem(loop, "comprehension", _text(first), self.items(first))

    def items(self, iterable: ast.expr) -> int | None:
        """How many items ``iterable`` yields when the code fixes it: a literal list, tuple,
        set or dict (through names), ``range`` with literal bounds, ``enumerate``/``list``/
        ``sorted`` of one of those; None when the data decides."""
        resolved = self.index.resolve(iterable)
        node = resolved.expr if resolved is not None else iterable
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            if any(isinstance(e, ast.Starred) for e in node.elts):
                return None
            return len(node.elts)
        if isinstance(node, ast.Dict):
            return None if any(k is None for k in node.keys) else len(node.keys)
        if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
            return len(node.value)
        if not isinstance(node, ast.Call):
            return None
        name = self.index.callee(node)
        if name == "range" and 1 <= len(node.args) <= 3:
            bounds = [self.index.constant(a) for a in node.args]
            if all(isinstance(b, int) and not isinstance(b, bool) for b in bounds):
                try:
                    return len(range(*bounds))  # type: ignore[arg-type]
                except ValueError:  # a step of 0
                    return None
            return None
        if (
            name in ("enumerate", "list", "tuple", "sorted", "reversed", "iter", "set")
            and node.args
        ):
            return self.items(node.args[0])
        return None

    # -- batched or not -------------------------------------------------------------------

    def batched(self, loop: ast.AST) -> bool:
        """Whether each turn of ``loop`` handles several items (so its calls are batched)."""
        if loop not in self._batched:
            self._batched[loop] = self._reads_batches(loop)
        return self._batched[loop]

    def _reads_batches(self, loop: ast.AST) -> bool:
        targets: list[ast.expr] = []
        iters: list[ast.expr] = []
        if isinstance(loop, ast.For | ast.AsyncFor):
            targets, iters = [loop.target], [loop.iter]
            if self.range_step(loop.iter) == 1:
                # range(0, n, batch_size) with batch_size 1: the slice holds one item.
                return False
        elif isinstance(loop, _COMPREHENSIONS):
            targets = [g.target for g in loop.generators]
            iters = [g.iter for g in loop.generators]
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name) and self._batchy_name.search(name.id):
                    return True
        for iterable in iters:
            if self._batching_iterable(iterable):
                return True
        # Slicing inside the loop (prompts[i:i + bs]) feeds several items per turn; a
        # serving loop that drains a queue into a named batch is batched.
        holds = self.holds()
        body = loop.body if isinstance(loop, ast.For | ast.AsyncFor | ast.While) else [loop]
        marks = (SLICE, BATCH_STORE, DRAIN) if isinstance(loop, ast.While) else (SLICE,)
        return any(holds.get(statement, 0) & mark for statement in body for mark in marks)

    def range_step(self, iterable: ast.expr) -> object:
        """The step of ``range(start, stop, step)`` as the code fixes it: a literal, a name
        bound to one, or a parameter of the enclosing function that every call of that
        function in the module sets (or leaves at its default) to the same literal. UNKNOWN
        otherwise, and for anything that is not a three-argument range."""
        if not (
            isinstance(iterable, ast.Call)
            and self.index.callee(iterable) == "range"
            and len(iterable.args) == 3
        ):
            return UNKNOWN
        step = iterable.args[2]
        value = self.index.constant(step)
        if value is not UNKNOWN or not isinstance(step, ast.Name):
            return value
        return self._argument_value(step)

    def _argument_value(self, name: ast.Name) -> object:
        """The literal every call site passes for parameter ``name`` of the function around
        it (its default where a call leaves it out); UNKNOWN when they differ or one cannot
        be read. No call in the module: the default."""
        function = self.index.scope_of(name)
        if not isinstance(function, _FUNCTIONS) or name.id not in self.index.params[function]:
            return UNKNOWN
        # Only a parameter that is not rebound before the loop: the lookup leads to it.
        if self.index.lookup(name.id, name) is not UNKNOWN:
            return UNKNOWN
        # The call sites' answer is the same for every loop of the function, and for every
        # function of that name and signature: worked out once (per loop it cost loops x
        # calls: 1,500 of each took 45 s).
        args = function.args
        names = [a.arg for a in (*args.posonlyargs, *args.args)]
        position = names.index(name.id) if name.id in names else None
        default = _default_of(function, name.id)
        default_value = self.index.constant(default) if default is not None else None
        key = (function.name, name.id, position, default is None, _hashable(default_value))
        if key not in self._param_values:
            self._param_values[key] = self._param_value(function.name, name.id, position, default)
        return self._param_values[key]

    def _param_value(
        self, function: str, param: str, position: int | None, default: ast.expr | None
    ) -> object:
        """What every call of ``function`` passes for ``param``. The calls read across the
        module are bounded by a budget proportional to its calls (many functions of one name,
        each with its own step parameter, would otherwise read every call once per function);
        past it the value is UNKNOWN, as for any value the trail cannot follow."""
        calls = self.calls_by_name.get(function, ())
        self._call_reads += len(calls)
        if self._call_reads > self._call_read_budget():
            return UNKNOWN
        values: set[object] = set()
        for call in calls:
            kwargs = self.index.keywords(call)
            if kwargs is None or any(isinstance(a, ast.Starred) for a in call.args):
                return UNKNOWN
            if param in kwargs:
                value = self.index.constant(kwargs[param])
            elif position is not None and position < len(call.args):
                value = self.index.constant(call.args[position])
            elif default is not None:
                value = self.index.constant(default)
            else:
                return UNKNOWN
            values.add(_hashable(value))
            if len(values) > 1:
                return UNKNOWN
        if not values:
            return self.index.constant(default) if default is not None else UNKNOWN
        return values.pop()

    def _call_read_budget(self) -> int:
        if self._budget is None:  # the calls are all recorded before the first question
            calls = sum(map(len, self.calls_by_name.values()))
            self._budget = _CALL_READS_PER_CALL * calls + _CALL_READS_FLOOR
        return self._budget

    def _batching_iterable(self, iterable: ast.expr) -> bool:
        resolved = self.index.resolve(iterable)
        node = resolved.expr if resolved is not None else iterable
        if not isinstance(node, ast.Call):
            return False
        name = self.index.callee(node)
        if name == "range":
            return len(node.args) == 3 and self.range_step(node) != 1
        if name == "DataLoader":
            kwargs = self.index.keyword_nodes(node)
            if "batch_size" not in kwargs:
                return False  # DataLoader's default batch size is 1
            size = self.index.constant(kwargs["batch_size"])
            # An unreadable size (a variable from the CLI) is given the benefit of the doubt.
            return size is UNKNOWN or (isinstance(size, int) and size > 1)
        if name in ("enumerate", "zip", "list", "tuple", "sorted", "reversed", "iter"):
            return any(self._batching_iterable(arg) for arg in node.args)
        # splitlines() matches "split" but yields one line per item
        return name != "splitlines" and bool(self._batching_call.search(name))

    def reads_stdin(self, loop: ast.AST) -> bool:
        return bool(self.holds().get(loop, 0) & STDIN)

    def holds(self) -> dict[ast.AST, int]:
        """Node -> bit set of what its subtree holds (a slice, a store to a batch-like name,
        a stdin read), in one pass over the module however many loops ask."""
        if self._holds is None:
            marks: dict[ast.AST, int] = {}
            for node in ast.walk(self.index.tree):
                mark = 0
                if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
                    mark = SLICE
                elif (
                    isinstance(node, ast.Name)
                    and isinstance(node.ctx, ast.Store)
                    and self._batchy_name.search(node.id)
                ):
                    mark = BATCH_STORE
                elif isinstance(node, ast.Call) and self.index.callee(node) in (
                    "input",
                    "readline",
                ):
                    mark = STDIN
                current: ast.AST | None = node
                if self._drains(node):
                    # Marked from the loop that does the draining upwards: the loop around
                    # it (whose body holds that loop) is the one that turns with a batch.
                    mark, current = DRAIN, self.enclosing_loop(node)
                # Climb while the mark is news: each node gains each bit once, so the
                # whole pass stays linear in the size of the module.
                while mark and current is not None and marks.get(current, 0) & mark != mark:
                    marks[current] = marks.get(current, 0) | mark
                    current = self.index.parent.get(current)
            self._holds = marks
        return self._holds

    def _drains(self, node: ast.AST) -> bool:
        """``pending.append(q.get_nowait())`` (or ``extend``) inside a loop."""
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("append", "extend")
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Call)
            and self.index.callee(node.args[0]) in _QUEUE_READS
        ):
            return False
        return self.enclosing_loop(node) is not None

    # -- collections a pipeline is given ------------------------------------------------

    def collection(self, expr: ast.expr | None) -> PerItem | None:
        """``expr`` as data a pipeline iterates over (a dataset, ``KeyDataset``, a list or
        generator of prompts), with its size when known; None for a single input or anything
        the code does not show."""
        if expr is None:
            return None
        resolved = self.index.resolve(expr)
        node = resolved.expr if resolved is not None else expr
        if isinstance(node, ast.List | ast.Tuple | ast.ListComp | ast.GeneratorExp):
            return PerItem(expr, "pipeline", _text(expr), self.items(node))
        if isinstance(node, ast.Call):
            if self.index.callee(node) in DATASET_CALLS:
                return PerItem(expr, "pipeline", _text(expr), None)
            if self.index.callee(node) in ("list", "tuple") and node.args:
                return PerItem(expr, "pipeline", _text(expr), self.items(node.args[0]))
        if isinstance(node, ast.Subscript):
            # dataset["text"]: a column of a loaded dataset
            inner = self.index.resolve(node.value)
            base = inner.expr if inner is not None else node.value
            if isinstance(base, ast.Call) and self.index.callee(base) in DATASET_CALLS:
                return PerItem(expr, "pipeline", _text(expr), None)
        return None


def _hashable(value: object) -> object:
    """``value``, or UNKNOWN when it cannot be compared as a set member (a list literal)."""
    try:
        hash(value)
    except TypeError:
        return UNKNOWN
    return value


def _route(function: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.expr | None:
    """The ``@app.post(...)``-style decorator that makes ``function`` a web handler."""
    for decorator in function.decorator_list:
        func = decorator.func if isinstance(decorator, ast.Call) else None
        if isinstance(func, ast.Attribute) and func.attr in ROUTE_DECORATORS:
            return decorator
    return None


def _via(found: PerItem, name: str) -> PerItem:
    return replace(found, via=name)


def _forever(loop: ast.While) -> bool:
    return isinstance(loop.test, ast.Constant) and bool(loop.test.value)


def _default_of(function: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> ast.expr | None:
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    offset = len(positional) - len(args.defaults)
    for position, arg in enumerate(positional):
        if arg.arg == name and position >= offset:
            return args.defaults[position - offset]
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        if arg.arg == name:
            return default
    return None


def _text(expr: ast.expr) -> str:
    """Code for a message, shortened to one line of readable length."""
    try:
        text = ast.unparse(expr)
    except (ValueError, RecursionError):  # pragma: no cover - unparse of a parsed tree
        return "..."
    text = " ".join(text.split())
    return text if len(text) <= _TEXT_LIMIT else text[: _TEXT_LIMIT - 3] + "..."
