"""A read-only index of one parsed module: parents, scopes, assignments, imports, helpers.

The audit never runs the code it reads, so every value is found by following the syntax:
a name leads to its last assignment before the use (in its own function, then the enclosing
ones, then the module), a call to a local helper leads to what the helper returns. That is
deliberately simple (no flow through branches, no cross-module tracking): when the trail goes
cold the value is *unknown*, and a rule that needs an unknown fact stays silent.
"""

from __future__ import annotations

import ast
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

# Sentinel for "could not be worked out statically" (distinct from a literal None).
UNKNOWN = object()

# How many hops (name -> value -> helper -> ...) one resolution may take; bounds cycles
# such as ``x = x`` and keeps pathological files fast.
MAX_HOPS = 16

_SCOPE_TYPES = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_FUNCTION_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True, slots=True)
class Resolved:
    """Where a trail of names ended: the defining expression plus attribute overrides met on
    the way (``cfg.llm_int8_threshold = 0.0`` after ``cfg = BitsAndBytesConfig(...)``)."""

    expr: ast.expr
    overrides: tuple[tuple[str, ast.expr], ...] = ()


class ModuleIndex:
    """Facts about one module's syntax tree, computed once and queried by the extractor."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.parent: dict[ast.AST, ast.AST] = {}
        # child -> the name of the parent's field holding it ("body", "orelse", "iter", ...),
        # so "is this node in the loop's else?" is a lookup, not a scan of a long list.
        self.field: dict[ast.AST, str] = {}
        for node in ast.walk(tree):
            for name, value in ast.iter_fields(node):
                if isinstance(value, ast.AST):
                    self.parent[value] = node
                    self.field[value] = name
                elif isinstance(value, list):
                    for item in value:
                        if isinstance(item, ast.AST):
                            self.parent[item] = node
                            self.field[item] = name
        # Every node's scope, computed top-down in one pass (asking each node's ancestors
        # would cost the nesting depth per node: quadratic for a long chained expression).
        self._scopes: dict[ast.AST, ast.AST] = self._scope_map()
        # (scope, name) -> [(line, value or None when unknown)]
        self.assigns: dict[tuple[ast.AST, str], list[tuple[int, ast.expr | None]]] = defaultdict(
            list
        )
        # (scope, name) -> [(line, attribute, value)]
        self.attr_assigns: dict[tuple[ast.AST, str], list[tuple[int, str, ast.expr]]] = defaultdict(
            list
        )
        self.params: dict[ast.AST, set[str]] = defaultdict(set)
        self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.imports: dict[str, str] = {}  # local name -> qualified name
        self._returned: dict[ast.AST, ast.expr | None] = {}
        self._by_attr: dict[tuple[ast.AST, str], dict[str, list[tuple[int, ast.expr]]]] = {}
        self._mappings: dict[ast.AST, dict[str, ast.expr] | None] = {}
        self._collect()
        # Bindings in source order, so "the last one before line N" is a binary search.
        for table in (self.assigns, self.attr_assigns):
            for entries in table.values():
                entries.sort(key=_line_of)

    # -- collection -------------------------------------------------------------------------

    def _scope_map(self) -> dict[ast.AST, ast.AST]:
        scopes: dict[ast.AST, ast.AST] = {self.tree: self.tree}
        stack: list[ast.AST] = [self.tree]
        while stack:
            node = stack.pop()
            for child in ast.iter_child_nodes(node):
                # A function's body is its own scope; its decorators, defaults and annotations
                # are evaluated in the enclosing one, like everything else the parent's.
                own_body = node is self.tree or (
                    isinstance(node, _SCOPE_TYPES) and _in_body(node, child)
                )
                scopes[child] = node if own_body else scopes[node]
                stack.append(child)
        return scopes

    def _collect(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, _FUNCTION_TYPES):
                self.functions[node.name] = node
                args = node.args
                for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs):
                    self.params[node].add(arg.arg)
                for arg in (args.vararg, args.kwarg):
                    if arg is not None:
                        self.params[node].add(arg.arg)
            elif isinstance(node, ast.Lambda):
                for arg in node.args.args:
                    self.params[node].add(arg.arg)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.imports[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        self.imports[top] = top
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    self._bind(target, node.value, node)
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                self._bind(node.target, node.value, node)
            elif isinstance(node, ast.AugAssign):
                self._bind(node.target, None, node)
            elif isinstance(node, ast.NamedExpr):
                self._bind(node.target, node.value, node)
            elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
                self._bind(node.target, None, node.target)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                self._bind(node.optional_vars, None, node.optional_vars)

    def _bind(self, target: ast.expr, value: ast.expr | None, stmt: ast.AST) -> None:
        scope = self.scope_of(stmt)
        line = getattr(stmt, "lineno", 0)
        if isinstance(target, ast.Name):
            self.assigns[(scope, target.id)].append((line, value))
        elif isinstance(target, ast.Tuple | ast.List):
            values = value.elts if isinstance(value, ast.Tuple | ast.List) else None
            if values is not None and len(values) == len(target.elts):
                for sub_target, sub_value in zip(target.elts, values, strict=True):
                    self._bind(sub_target, sub_value, stmt)
            else:
                for sub_target in target.elts:
                    self._bind(sub_target, None, stmt)
        elif isinstance(target, ast.Starred):
            self._bind(target.value, None, stmt)
        elif (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and value is not None
        ):
            self.attr_assigns[(scope, target.value.id)].append((line, target.attr, value))

    # -- structure --------------------------------------------------------------------------

    def scope_of(self, node: ast.AST) -> ast.AST:
        """The innermost function (or the module) whose body holds ``node``. Default values
        and decorators belong to the enclosing scope, as Python evaluates them there."""
        known = self._scopes.get(node)
        if known is not None:
            return known
        current = self.parent.get(node)
        child = node
        while current is not None:
            if isinstance(current, _SCOPE_TYPES):
                if isinstance(current, (*_FUNCTION_TYPES, ast.Lambda)) and not _in_body(
                    current, child
                ):
                    child, current = current, self.parent.get(current)
                    continue
                return current
            child, current = current, self.parent.get(current)
        return self.tree

    def enclosing_scopes(self, node: ast.AST) -> Iterator[ast.AST]:
        scope = self.scope_of(node)
        while True:
            yield scope
            if scope is self.tree:
                return
            scope = self.scope_of(scope)

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        current = self.parent.get(node)
        while current is not None:
            yield current
            current = self.parent.get(current)

    # -- names and calls --------------------------------------------------------------------

    def qualified_name(self, expr: ast.expr) -> str | None:
        """``torch.bfloat16``, ``transformers.BitsAndBytesConfig`` for a name or attribute
        chain, with import aliases expanded; None for anything else."""
        parts: list[str] = []
        while isinstance(expr, ast.Attribute):
            parts.append(expr.attr)
            expr = expr.value
        if not isinstance(expr, ast.Name):
            return None
        parts.append(self.imports.get(expr.id, expr.id))
        return ".".join(reversed(parts))

    def callee(self, call: ast.Call) -> str:
        """The last segment of a call's function name (``from_pretrained``, ``pipeline``)."""
        func = call.func
        if isinstance(func, ast.Attribute):
            return func.attr
        if isinstance(func, ast.Name):
            return self.imports.get(func.id, func.id).rsplit(".", 1)[-1]
        return ""

    def lookup(self, name: str, use: ast.AST) -> object:
        """The value last bound to ``name`` before ``use``; UNKNOWN when it cannot be told
        (a parameter, a loop variable, never assigned in this module)."""
        line = getattr(use, "lineno", 0)
        for depth, scope in enumerate(self.enclosing_scopes(use)):
            entries = self.assigns.get((scope, name), [])
            before = bisect_left(entries, line, key=_line_of)
            if before:
                value = entries[before - 1][1]
                return value if value is not None else UNKNOWN
            if depth > 0 and entries:
                # An enclosing scope's binding made after the function's text: the function
                # runs later, so the last binding is the one it sees.
                last = entries[-1][1]
                return last if last is not None else UNKNOWN
            if name in self.params.get(scope, ()):
                return UNKNOWN
        return UNKNOWN

    def overrides_for(
        self, name: str, defined: ast.AST, use: ast.AST
    ) -> list[tuple[str, ast.expr]]:
        """``name.attr = value`` statements between the definition and the use (same scope)."""
        scope = self.scope_of(defined)
        start, end = getattr(defined, "lineno", 0), getattr(use, "lineno", 0)
        found: list[tuple[int, str, ast.expr]] = []
        # Only the last assignment to each attribute in the range counts, so each attribute
        # costs one binary search however often it is assigned.
        for attr, entries in self._attr_lines(scope, name).items():
            stop = len(entries) if end < start else bisect_left(entries, end, key=_line_of)
            if stop and entries[stop - 1][0] >= start:
                found.append((entries[stop - 1][0], attr, entries[stop - 1][1]))
        return [(attr, value) for _, attr, value in sorted(found, key=_line_of)]

    def _attr_lines(self, scope: ast.AST, name: str) -> dict[str, list[tuple[int, ast.expr]]]:
        key = (scope, name)
        by_attr = self._by_attr.get(key)
        if by_attr is None:
            by_attr = {}
            for line, attr, value in self.attr_assigns.get(key, ()):
                by_attr.setdefault(attr, []).append((line, value))
            self._by_attr[key] = by_attr
        return by_attr

    def returned(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.expr | None:
        """The single value a helper returns, or None when it has none or several."""
        if function not in self._returned:
            values = [
                node.value
                for node in walk_scope(function)
                if isinstance(node, ast.Return) and node.value is not None
            ]
            self._returned[function] = values[0] if len(values) == 1 else None
        return self._returned[function]

    def resolve(self, expr: ast.expr | None, hops: int = 0) -> Resolved | None:
        """Follow names and local helper calls to the expression that builds the value."""
        if expr is None or hops > MAX_HOPS:
            return None
        if isinstance(expr, ast.Name):
            value = self.lookup(expr.id, expr)
            if value is UNKNOWN or value is None:
                return None
            assert isinstance(value, ast.expr)
            inner = self.resolve(value, hops + 1)
            if inner is None:
                return None
            extra = self.overrides_for(expr.id, value, expr)
            return Resolved(inner.expr, (*inner.overrides, *extra))
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
            function = self.functions.get(expr.func.id)
            if function is not None and expr.func.id not in self.imports:
                value = self.returned(function)
                if value is None:
                    return None
                return self.resolve(value, hops + 1)
        return Resolved(expr)

    def constant(self, expr: ast.expr | None, hops: int = 0) -> object:
        """A literal value (number, string, bool, None), following names; UNKNOWN otherwise.
        ``torch.bfloat16``-style attributes come back as their dotted name (a str)."""
        if expr is None or hops > MAX_HOPS:
            return UNKNOWN
        resolved = self.resolve(expr, hops)
        if resolved is None:
            return UNKNOWN
        node = resolved.expr
        if isinstance(node, ast.Constant):
            return node.value
        if (
            isinstance(node, ast.UnaryOp)
            and isinstance(node.op, ast.USub | ast.UAdd)
            and isinstance(node.operand, ast.Constant)
            and isinstance(node.operand.value, int | float)
            and not isinstance(node.operand.value, bool)
        ):
            value = node.operand.value
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.Attribute):
            return self.qualified_name(node) or UNKNOWN
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("float", "int", "bool")
            and len(node.args) == 1
            and not node.keywords
        ):
            inner = self.constant(node.args[0], hops + 1)
            if isinstance(inner, int | float | str) and not isinstance(inner, bool):
                try:
                    return {"float": float, "int": int, "bool": bool}[node.func.id](inner)
                except ValueError:
                    return UNKNOWN
        return UNKNOWN

    def mapping(self, expr: ast.expr | None, hops: int = 0) -> dict[str, ast.expr] | None:
        """The string-keyed items of a dict literal or ``dict(...)`` call (following names and
        ``**`` merges); None when it is not one or a key cannot be read. Each expression is
        read once (``{**a, **a}`` nested 16 deep would otherwise cost 2**16 reads); callers
        get their own copy."""
        if expr is None or hops > MAX_HOPS:
            return None
        if expr not in self._mappings:
            self._mappings[expr] = None  # a cycle back to this expression reads as unknown
            self._mappings[expr] = self._read_mapping(expr, hops)
        found = self._mappings[expr]
        return dict(found) if found is not None else None

    def _read_mapping(self, expr: ast.expr, hops: int) -> dict[str, ast.expr] | None:
        resolved = self.resolve(expr, hops)
        if resolved is None:
            return None
        node = resolved.expr
        items: dict[str, ast.expr] = {}
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if key is None:
                    merged = self.mapping(value, hops + 1)
                    if merged is None:
                        return None
                    items.update(merged)
                elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                    items[key.value] = value
                else:
                    return None
        elif isinstance(node, ast.Call) and self.callee(node) == "dict" and not node.args:
            merged_kwargs = self.keywords(node)
            if merged_kwargs is None:
                return None
            items.update(merged_kwargs)
        else:
            return None
        for attr, value in resolved.overrides:
            items[attr] = value
        return items

    def keywords(self, call: ast.Call) -> dict[str, ast.expr] | None:
        """A call's keyword arguments, ``**mapping`` expanded; None if a ``**`` is unreadable."""
        out: dict[str, ast.expr] = {}
        for keyword in call.keywords:
            if keyword.arg is None:
                merged = self.mapping(keyword.value)
                if merged is None:
                    return None
                out.update(merged)
            else:
                out[keyword.arg] = keyword.value
        return out

    def keyword_nodes(self, call: ast.Call) -> dict[str, ast.expr]:
        """Like :meth:`keywords` but never None: unreadable ``**`` parts are skipped."""
        out: dict[str, ast.expr] = {}
        for keyword in call.keywords:
            if keyword.arg is None:
                out.update(self.mapping(keyword.value) or {})
            else:
                out[keyword.arg] = keyword.value
        return out


def walk_scope(scope: ast.AST) -> Iterator[ast.AST]:
    """Every node in ``scope``'s own body, not descending into nested functions/classes."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (*_FUNCTION_TYPES, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(node))


def _in_body(function: ast.AST, child: ast.AST) -> bool:
    if isinstance(function, ast.Lambda):
        return child is function.body
    # A def's only statement children are its body (decorators, defaults, annotations and
    # type parameters are expressions or other nodes), so no scan of a long body is needed.
    return isinstance(child, ast.stmt)


def _line_of(entry: tuple) -> int:
    return entry[0]
