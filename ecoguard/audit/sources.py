"""Reading what will be audited: finding files under the given paths, decoding them safely,
and turning notebooks into one module with a map back to cell and line.

Nothing here imports or runs the audited code. Symlinks are followed only when they stay
inside the tree being audited, and each directory is entered once (so a link loop ends).
"""

from __future__ import annotations

import errno
import fnmatch
import io
import json
import os
import stat
import tokenize
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ecoguard.audit.result import FileProblem
from ecoguard.engines.launch_files import launch_kind

# Larger files are reported, not read: generated or vendored code, and a cheap guard against
# a file that would make the parser churn.
MAX_FILE_BYTES = 2 * 1024 * 1024

# Directories never walked into (virtual environments, caches, VCS data). Hidden directories
# (".git", ".venv", ".ipynb_checkpoints") are skipped too. A path named on the command line is
# always audited.
SKIP_DIRS = frozenset({"__pycache__", "node_modules", "site-packages", "venv", "env"})

SUFFIXES = (".py", ".pyi", ".ipynb")


@dataclass(frozen=True, slots=True)
class SourceFile:
    """A file to audit: ``display`` is the path shown to the user (built from the argument
    they gave, with forward slashes), ``real`` the file actually read."""

    display: str
    real: Path
    via_link: bool = False


@dataclass(frozen=True, slots=True)
class Text:
    """Decoded source, ready to parse. For notebooks ``cells`` maps each line of ``text``
    (1-based) to (cell number, line in cell); None for plain Python."""

    text: str
    cells: tuple[tuple[int, int], ...] | None = None
    cell_ranges: tuple[tuple[int, int, int], ...] = ()  # (cell, first line, last line)


def discover(
    paths: Iterable[str | os.PathLike[str]], exclude: Iterable[str] = ()
) -> tuple[list[SourceFile], list[FileProblem]]:
    """The files under ``paths`` (recursively), each once, in a stable order."""
    patterns = tuple(exclude)
    chosen: dict[Path, SourceFile] = {}
    problems: list[FileProblem] = []

    def keep(item: SourceFile) -> None:
        # One file reached by several paths is audited once, under its own name rather
        # than a link's.
        current = chosen.get(item.real)
        if current is None or (current.via_link and not item.via_link):
            chosen[item.real] = item

    for raw in paths:
        given = Path(raw)
        display = _display(given)
        if not os.path.lexists(given):
            problems.append(FileProblem(display, "not-found", "no such file or directory"))
            continue
        try:
            real = given.resolve(strict=True)
        except (OSError, RuntimeError) as exc:
            kind = "symlink-loop" if _is_loop_error(exc) else "unreadable"
            problems.append(FileProblem(display, kind, _reason(exc)))
            continue
        if real.is_dir():
            for item in _walk(given, real, patterns, problems):
                keep(item)
        elif not _excluded(display, given.name, patterns):
            keep(SourceFile(display, real))
    return sorted(chosen.values(), key=lambda item: item.display), problems


def _walk(
    given: Path, root: Path, patterns: tuple[str, ...], problems: list[FileProblem]
) -> Iterator[SourceFile]:
    visited: set[Path] = set()
    stack: list[tuple[Path, Path, str]] = [(root, given, "")]
    while stack:
        real_dir, shown_dir, relative = stack.pop()
        if real_dir in visited:
            problems.append(
                FileProblem(
                    _display(shown_dir),
                    "symlink-loop",
                    "directory already audited through another path (symlink loop); skipped",
                )
            )
            continue
        visited.add(real_dir)
        try:
            entries = sorted(os.scandir(real_dir), key=lambda e: e.name)
        except OSError as exc:
            problems.append(FileProblem(_display(shown_dir), "unreadable", _reason(exc)))
            continue
        subdirs: list[tuple[Path, Path, str]] = []
        for entry in entries:
            shown = shown_dir / entry.name
            rel = f"{relative}{entry.name}"
            display = _display(shown)
            if _excluded(display, rel, patterns) or _excluded(display, entry.name, patterns):
                continue
            is_link = False
            try:
                is_link = entry.is_symlink()
                target = Path(entry.path).resolve(strict=True) if is_link else Path(entry.path)
                mode = os.stat(target).st_mode
            except (OSError, RuntimeError) as exc:
                if _is_loop_error(exc):
                    problems.append(FileProblem(display, "symlink-loop", "symlink loop; skipped"))
                elif is_link:
                    problems.append(FileProblem(display, "unreadable", "broken symlink; skipped"))
                else:
                    problems.append(FileProblem(display, "unreadable", _reason(exc)))
                continue
            if is_link and not _inside(target, root):
                if stat.S_ISDIR(mode) or _wanted(entry.name):
                    problems.append(
                        FileProblem(
                            display,
                            "symlink-outside",
                            f"symlink points outside the audited tree ({target}); not followed",
                        )
                    )
                continue
            if stat.S_ISDIR(mode):
                if entry.name.startswith(".") or entry.name in SKIP_DIRS:
                    continue
                subdirs.append((target.resolve(), shown, rel + "/"))
            elif stat.S_ISREG(mode) and _wanted(entry.name):
                yield SourceFile(display, target.resolve(), via_link=is_link)
        stack.extend(reversed(subdirs))


def read_source(source: SourceFile) -> Text | FileProblem:
    """Decode one file (Python's own encoding rules: UTF-8 unless a coding line says
    otherwise); notebooks are flattened to their code cells. Never raises for bad input."""
    display = source.display
    data = _read_regular(source.real, display)
    if isinstance(data, FileProblem):
        return data
    if source.real.suffix == ".ipynb":
        return _notebook(display, data)
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
        return FileProblem(
            display, "decode-error", f"not valid UTF-8 (or its declared encoding): {exc}"
        )
    if text.startswith("\ufeff"):
        text = text[1:]
    return Text(text)


def _read_regular(path: Path, display: str) -> bytes | FileProblem:
    """The bytes of a regular file, at most MAX_FILE_BYTES of them. A device (a link to
    /dev/zero reports size 0 and never ends), a fifo (opening it waits for a writer) or a
    socket is refused, and the size is counted while reading rather than taken from stat."""
    try:
        # O_NONBLOCK: opening a fifo returns at once instead of waiting for a writer; it has
        # no effect on a regular file's reads.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        return FileProblem(display, "unreadable", _reason(exc))
    with os.fdopen(fd, "rb", buffering=0) as handle:
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                return FileProblem(
                    display,
                    "unreadable",
                    f"not a regular file ({_file_type(mode)}); only regular files are audited",
                )
            chunks: list[bytes] = []
            total = 0
            while total <= MAX_FILE_BYTES:
                chunk = handle.read(min(1 << 20, MAX_FILE_BYTES + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
        except OSError as exc:
            return FileProblem(display, "unreadable", _reason(exc))
    if total > MAX_FILE_BYTES:
        return FileProblem(
            display,
            "too-large",
            f"over the {MAX_FILE_BYTES / 1e6:.0f} MB limit; not audited",
        )
    return b"".join(chunks)


def _file_type(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a fifo"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def _notebook(display: str, data: bytes) -> Text | FileProblem:
    try:
        document = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return FileProblem(display, "decode-error", f"notebook is not valid UTF-8: {exc}")
    except RecursionError:
        # json's decoder recurses per level: "[[[[...]]]]" 3,000 deep exhausts the stack.
        return FileProblem(
            display, "bad-notebook", "JSON nested too deeply to read; not a notebook, not audited"
        )
    except ValueError as exc:
        return FileProblem(display, "bad-notebook", f"not a JSON notebook: {exc}")
    cells = document.get("cells") if isinstance(document, dict) else None
    if not isinstance(cells, list):
        # nbformat 3 kept cells under worksheets; older still is not worth reading.
        worksheets = document.get("worksheets") if isinstance(document, dict) else None
        if isinstance(worksheets, list) and worksheets and isinstance(worksheets[0], dict):
            cells = worksheets[0].get("cells")
    if not isinstance(cells, list):
        return FileProblem(display, "bad-notebook", "notebook has no list of cells")
    lines: list[str] = []
    mapping: list[tuple[int, int]] = []
    ranges: list[tuple[int, int, int]] = []
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", cell.get("input", ""))
        if isinstance(source, list):
            source = "".join(part for part in source if isinstance(part, str))
        if not isinstance(source, str):
            continue
        cell_lines = source.splitlines()
        magic_cell = bool(cell_lines) and cell_lines[0].lstrip().startswith("%%")
        first = len(lines) + 1
        for line_number, line in enumerate(cell_lines, start=1):
            stripped = line.lstrip()
            if (
                magic_cell
                or stripped.startswith(("%", "!", "?"))
                or stripped.rstrip().endswith("?")
            ):
                # IPython magics, shell escapes and help lookups (``print?``, ``?print``,
                # ``??print``) are not Python: keep the line (so numbering holds) but blank it.
                line = ""
            lines.append(line)
            mapping.append((number, line_number))
        if len(lines) >= first:
            ranges.append((number, first, len(lines)))
    return Text("\n".join(lines) + "\n", tuple(mapping), tuple(ranges))


def _wanted(name: str) -> bool:
    """Python sources, notebooks, and launch files that may start a serving engine (shell
    scripts, Dockerfiles, YAML: see ``ecoguard.engines.launch_files``)."""
    return name.endswith(SUFFIXES) or launch_kind(name) is not None


def _display(path: Path) -> str:
    text = path.as_posix()
    return text[2:] if text.startswith("./") else text


def _excluded(display: str, relative: str, patterns: tuple[str, ...]) -> bool:
    return any(
        fnmatch.fnmatch(display, pattern) or fnmatch.fnmatch(relative, pattern)
        for pattern in patterns
    )


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def _is_loop_error(exc: BaseException) -> bool:
    return isinstance(exc, RuntimeError) or getattr(exc, "errno", None) == errno.ELOOP


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
