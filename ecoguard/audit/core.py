"""The audit itself: source text -> syntax tree -> call sites -> the guard's rules -> findings
with file, line and column.

The rules are the runtime guard's own (``ecoguard.rules.evaluate``), so a trap found in a file
reads exactly as it does in a live process; the audit only adds where it is.
"""

from __future__ import annotations

import ast
import os
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import replace
from functools import lru_cache

from ecoguard.audit.extract import Extractor
from ecoguard.audit.launch import audit_launch_text, is_launch_file
from ecoguard.audit.moe import moe_total_b
from ecoguard.audit.result import AuditNote, AuditResult, FileProblem
from ecoguard.audit.site import RawNote, Site
from ecoguard.audit.sources import SourceFile, Text, discover, read_source
from ecoguard.deployment import GpuSpec, ModelSpec
from ecoguard.engines.engine_args import resolve_model_spec
from ecoguard.errors import UsageError
from ecoguard.faults import record_fault
from ecoguard.findings import RULE_IDS, Finding, Location
from ecoguard.knowledge import resolve_gpu
from ecoguard.rules import BS1_SUSTAINED_CALLS, evaluate

# Findings whose fix belongs where the quantization config is built, not where it is used.
_AT_CONFIG = frozenset({"int8-mixed", "fp8-eager"})
# Findings whose fix names the load call (reworded to the call the code used).
_AT_LOAD = frozenset({"small-model-quant", "fp8-eager", "bf16-unsupported"})
# Rules that need the model's size.
_NEEDS_SIZE = frozenset({"small-model-quant", "vram-overflow"})


class AuditTimeLimitError(UsageError):
    """The audit of one source ran past its time limit (``audit_source(time_limit_s=...)``)."""


def audit_source(
    text: str,
    filename: str = "<string>",
    *,
    gpu: str | None = None,
    time_limit_s: float | None = None,
) -> AuditResult:
    """Audit one Python source text. ``gpu`` (a name ``resolve_gpu`` accepts: ``T4``,
    ``rtx4090``) enables the GPU-dependent rules; UsageError if it is unknown. A syntax error
    is reported in the result, not raised. ``time_limit_s`` bounds the analysis (checked
    between call sites): past it, AuditTimeLimitError. A server auditing text from others
    sets it; the audit is linear in the size of the source, so it is a backstop."""
    advice = "send a smaller module, or run `ecoguard audit PATH` locally (`--time-limit 0`: none)"
    return _audit_text(Text(text), filename, _gpu_spec(gpu), _time_check(time_limit_s, advice))


def _time_check(limit_s: float | None, advice: str) -> Callable[[], None] | None:
    """A check that raises AuditTimeLimitError once ``limit_s`` seconds have passed since it
    was made (None: no limit). The one deadline mechanism of the MCP tool and the CLI."""
    if limit_s is None:
        return None
    end = time.monotonic() + limit_s

    def check() -> None:
        if time.monotonic() > end:
            raise AuditTimeLimitError(
                f"the audit ran past its {limit_s:g} s limit and was stopped; {advice}"
            )

    return check


def audit_paths(
    paths: Iterable[str | os.PathLike[str]],
    *,
    gpu: str | None = None,
    exclude: Iterable[str] = (),
    time_limit_s: float | None = None,
) -> AuditResult:
    """Audit files and directories (Python files, notebooks and launch files: shell scripts,
    Dockerfiles, compose and Kubernetes YAML; recursively). ``exclude`` holds glob patterns
    matched against each path as shown and relative to its argument. Problems with single
    files land in ``result.problems``; the rest are still audited: a file that breaks the
    analysis itself is reported (and counted as an ``audit.file`` fault), never the run.

    ``time_limit_s`` bounds the whole run, as ``audit_source``'s does one source: past it, the
    file in progress is reported as a ``time-limit`` problem naming how many files were left,
    and the findings of the files before it stay in the result."""
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    gpu_spec = _gpu_spec(gpu)
    check = _time_check(time_limit_s, "raise --time-limit, or audit fewer files at once")
    files, problems = discover(paths, exclude)
    result = AuditResult(problems=problems)
    for position, source in enumerate(files):
        try:
            if check is not None:
                check()
            result.extend(_audit_file(source, gpu_spec, check))
        except AuditTimeLimitError as exc:
            left = len(files) - position - 1
            result.problems.append(
                FileProblem(source.display, "time-limit", f"{exc} ({left} more file(s) not read)")
            )
            break
        except (RecursionError, MemoryError) as exc:
            # One pathological file is reported and the audit goes on to the next one.
            result.problems.append(
                FileProblem(
                    source.display,
                    "unreadable",
                    f"too large or deeply nested to analyse ({type(exc).__name__}); not audited",
                )
            )
        except Exception as exc:  # a defect of ours must not hide the other files' findings
            record_fault("audit.file", exc)
            result.problems.append(
                FileProblem(
                    source.display,
                    "unreadable",
                    f"the audit failed on this file ({type(exc).__name__}: {exc}); not audited "
                    "(an ecoguard defect: please report it)",
                )
            )
    return result.sort()


def _audit_file(source: SourceFile, gpu: GpuSpec, check: Callable[[], None] | None) -> AuditResult:
    text = read_source(source)
    if isinstance(text, FileProblem):
        return AuditResult(problems=[text])
    if is_launch_file(source.display):
        return audit_launch_text(text.text, source.display, gpu)
    return _audit_text(text, source.display, gpu, check)


def _audit_text(
    text: Text, filename: str, gpu: GpuSpec, check: Callable[[], None] | None = None
) -> AuditResult:
    result = AuditResult(files=[filename])
    tree, problems = _parse(text, filename)
    result.problems.extend(problems)
    if tree is None:
        return result
    try:
        extraction = Extractor(
            tree,
            gpu=gpu,
            resolve_model=_model_spec,
            bs1_calls=BS1_SUSTAINED_CALLS,
            lines=_lines(text.text),
            line_label=lambda line: _line_label(text, line),
        ).run(check)
    except RecursionError:
        result.problems.append(
            FileProblem(filename, "syntax-error", "nesting too deep to analyse; not audited")
        )
        return result
    seen: set[tuple[str, int | None, int | None, int | None]] = set()
    judged: dict[tuple, list[Finding]] = {}
    for site in extraction.sites:
        if check is not None:
            check()
        for finding in _evaluate(site, judged):
            anchor = (
                site.config_node if finding.rule in _AT_CONFIG and site.config_node else site.node
            )
            location = _location(anchor, filename, text)
            key = (finding.rule, location.cell, location.line, location.column)
            if key in seen:
                continue  # one config used by several loads: one finding where it is built
            seen.add(key)
            finding = _worded(finding, site, text)
            result.findings.append(finding.at(location))
    for note in extraction.notes:
        result.notes.append(_note(note, filename, text))
    return result.sort()


def _line_label(text: Text, line: int | None) -> str:
    if text.cells and line is not None:
        cell, cell_line = _cell_of(text, line)
        if cell is not None:
            return f"cell {cell}, line {cell_line}"
    return f"line {line}"


def _site_details(site: Site, text: Text) -> tuple[tuple[str, object], ...]:
    """The site's details, with a notebook's loop line counted inside its cell."""
    if not text.cells:
        return site.details
    out: list[tuple[str, object]] = []
    for key, value in site.details:
        if key == "loop_line" and isinstance(value, int):
            cell, cell_line = _cell_of(text, value)
            out.extend([("loop_line", cell_line), ("loop_cell", cell)])
        else:
            out.append((key, value))
    return tuple(out)


def _worded(finding: Finding, site: Site, text: Text) -> Finding:
    """The finding with the site's own wording and details. A static wording replaces what
    only a live process can observe: its runtime figure (``consecutive_bs1_calls``) goes."""
    wording = dict(dict(site.wording).get(finding.rule, ()))
    details = finding.details
    if site.fix_replace and finding.rule in _AT_LOAD:
        fix = finding.fix
        for old, new in site.fix_replace:
            fix = fix.replace(old, new)
        wording.setdefault("fix", fix)
    if wording:
        details = tuple(item for item in details if item[0] != "consecutive_bs1_calls")
        finding = replace(finding, **wording)
    if site.details:
        details = (*details, *_site_details(site, text))
    return replace(finding, details=details) if details != finding.details else finding


def _evaluate(site: Site, judged: dict[tuple, list[Finding]]) -> list[Finding]:
    """The rules' findings for one site. Sites with the same facts (thousands of generate
    calls in one loop) are judged once: ``judged`` holds the answers of this audit."""
    key = (site.deployment, site.only, site.vram_precision, site.unknown)
    if key not in judged:
        judged[key] = _judge(site)
    return judged[key]


def _judge(site: Site) -> list[Finding]:
    if site.vram_precision is None:
        findings = evaluate(site.deployment, only=site.only)
    else:
        # The weights are sized as the proxy precision, and called by their own name.
        rules = site.only or RULE_IDS
        others = tuple(r for r in rules if r != "vram-overflow")
        findings = evaluate(site.deployment, only=others) if others else []
        if "vram-overflow" in rules:
            proxy, label = site.vram_precision
            sized = site.deployment.with_(precision=proxy)
            for found in evaluate(sized, only=("vram-overflow",)):
                findings.append(_relabelled(found, f"{proxy} weights", f"{label} weights"))
                findings[-1] = _relabelled(findings[-1], f"({proxy})", f"({label})")
    unknown = site.unknown
    if site.deployment.model.id and moe_total_b(site.deployment.model.id) == (None, True):
        # An MoE whose total is not known: the size in its name may be the active count,
        # which the rules would otherwise read from the name themselves.
        unknown = unknown | _NEEDS_SIZE
    return [f for f in findings if f.rule not in unknown]


def _relabelled(finding: Finding, old: str, new: str) -> Finding:
    details = tuple(
        (key, value.replace(old, new) if isinstance(value, str) else value)
        for key, value in finding.details
    )
    return replace(finding, message=finding.message.replace(old, new), details=details)


def _parse(text: Text, filename: str) -> tuple[ast.Module | None, list[FileProblem]]:
    """Parse the text; for a notebook, a cell that does not parse is blanked, reported, and the
    other cells are still audited."""
    flags = ast.PyCF_ONLY_AST | (ast.PyCF_ALLOW_TOP_LEVEL_AWAIT if text.cells else 0)
    tree = _compile(text.text, filename, flags)
    if not isinstance(tree, BaseException):
        return tree, []
    if not text.cells:
        line = getattr(tree, "lineno", None)
        return None, [FileProblem(filename, "syntax-error", _syntax_message(tree), line)]
    # A notebook: each cell is compiled alone (as Jupyter runs it), once, so a notebook of
    # many broken cells costs one pass, not one pass per broken cell; those that fail are
    # reported and blanked, and the rest is audited.
    problems: list[FileProblem] = []
    lines = text.text.split("\n")
    for number, first, last in text.cell_ranges:
        error = _compile("\n".join(lines[first - 1 : last]) + "\n", filename, flags)
        if isinstance(error, BaseException):
            line = getattr(error, "lineno", None)
            # (an error at the end of a cell may name the line after its last)
            cell_line = text.cells[min(first + line - 2, last - 1)][1] if line else None
            message = _syntax_message(error)
            problems.append(FileProblem(filename, "syntax-error", message, cell_line, number))
            lines[first - 1 : last] = [""] * (last - first + 1)
    tree = _compile("\n".join(lines), filename, flags)
    if isinstance(tree, BaseException):
        line = getattr(tree, "lineno", None)
        cell, cell_line = _cell_of(text, line) if line else (None, None)
        problems.append(
            FileProblem(filename, "syntax-error", _syntax_message(tree), cell_line, cell)
        )
        return None, problems
    return tree, problems


def _compile(source: str, filename: str, flags: int) -> ast.Module | BaseException:
    try:
        with warnings.catch_warnings():
            # Invalid escape sequences etc. are the audited code's business, not ours.
            warnings.simplefilter("ignore")
            return compile(source, filename, "exec", flags=flags, dont_inherit=True)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        return exc


def _syntax_message(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {getattr(exc, 'msg', None) or exc}"


def _cell_of(text: Text, line: int) -> tuple[int | None, int | None]:
    if text.cells and 1 <= line <= len(text.cells):
        return text.cells[line - 1]
    return None, None


def _location(node: ast.AST, filename: str, text: Text) -> Location:
    line = getattr(node, "lineno", None)
    offset = getattr(node, "col_offset", None)
    column = None
    if offset is not None:
        # ast counts UTF-8 bytes; editors and SARIF count characters, from 1.
        source_line = _line_text(text, line)
        column = len(source_line.encode("utf-8")[:offset].decode("utf-8", "replace")) + 1
    if text.cells and line is not None:
        cell, cell_line = _cell_of(text, line)
        return Location(filename, cell_line, column, cell=cell)
    return Location(filename, line, column)


def _line_text(text: Text, line: int | None) -> str:
    if line is None:
        return ""
    lines = _lines(text.text)
    return lines[line - 1] if 1 <= line <= len(lines) else ""


@lru_cache(maxsize=4)
def _lines(source: str) -> tuple[str, ...]:
    """The source's lines, split once per file rather than once per finding (4,000 findings
    in a 150 KB file made the split alone quadratic)."""
    return tuple(source.split("\n"))


def _note(note: RawNote, filename: str, text: Text) -> AuditNote:
    return AuditNote(
        note.kind, note.mood, note.message, note.fix, _location(note.node, filename, text)
    )


def _gpu_spec(gpu: str | None) -> GpuSpec:
    if gpu is None:
        return GpuSpec()
    if not isinstance(gpu, str) or not gpu.strip():
        raise UsageError("empty --gpu; give a GPU name such as T4, A100, rtx4090")
    return resolve_gpu(gpu).to_gpu_spec()


@lru_cache(maxsize=512)
def _model_spec(text: str) -> ModelSpec | None:
    """The model a string literal names, with its size when the knowledge registry or the name
    itself says it; None when it names no model we can size."""
    total_b, mixture = moe_total_b(text)
    if mixture:
        # Every expert's weights are in memory: the total, never the active count.
        return ModelSpec(id=text.strip(), params_b=total_b) if total_b else None
    return resolve_model_spec(text)
