"""Shell text -> simple commands of words, each word with its line, read as bash would read it
and never run.

One pass over the text, so the work is linear in its size (``shlex`` needed the text cut into
logical lines first, and read ``foo#bar`` as ``foo`` plus a comment and ``$'--flag'`` as
``$--flag``). What it reads:

* quoting: ``'...'``, ``"..."`` (with ``\\`` escapes), ANSI-C ``$'...'``, backslashes, and
  backslash-newline continuations; ``#`` starts a comment only at the start of a word;
* commands split at newlines and ``;`` ``&`` ``&&`` ``|`` ``||`` ``|&`` ``(`` ``)`` ``;;``
  (``2>&1`` stays one word);
* parameters: ``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``, ``${VAR:=default}``
  and ``${VAR=default}``, from the assignments met so far (``VAR=value`` alone on its command,
  ``export``/``readonly``/``declare``/``local``/``typeset VAR=value``) or the default; unquoted
  expansions are split into words at blanks. An unknown variable stays as written (``$MODEL``),
  as do command substitutions and special parameters (``$1``, ``$@``).

A quote that never closes drops the command it is in, and reading goes on at the next line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

Word = tuple[str, int]  # (word, 1-based line)

# Characters variable expansions may add, per character of the file read, plus a floor.
EXPANSION_PER_CHAR = 4
EXPANSION_FLOOR = 65_536

_PLAIN = re.compile(r"[^\s'\"\\$`;&|()#<>]+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)
_BRACED = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-=+?])([^}]*))?\}")
_DECLARERS = frozenset({"export", "readonly", "declare", "local", "typeset"})
_OPERATORS = ("&&", "||", ";;", "|&", ";", "&", "|", "(", ")")
_ANSI_C = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
    "e": "\x1b",
    "E": "\x1b",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}
_DOUBLE_QUOTED_RUN = re.compile(r'[^"\\$`\n]+')
_ANSI_C_CODES = re.compile(r"x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{1,4}|U[0-9A-Fa-f]{1,8}|[0-7]{1,3}")


class _Unclosed(Exception):
    """A quote, ``${`` or ``$(`` that never closes."""


class _Budget:
    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left


class ShellEnv:
    """The variables a file assigns (name -> value), and how many characters their expansions
    may still add: a value read back many times (``A=<100 KB>`` then ``$A $A $A ...``) would
    otherwise grow the words far past the file. Past the budget a variable stays as written.
    ``fresh()`` gives an empty set of variables drawing on the same budget."""

    __slots__ = ("_budget", "values")

    def __init__(self, budget: int | _Budget) -> None:
        self.values: dict[str, str] = {}
        self._budget = budget if isinstance(budget, _Budget) else _Budget(budget)

    @classmethod
    def for_text(cls, text: str) -> ShellEnv:
        """The budget for one file: four times its size, and 64 KiB at least."""
        return cls(EXPANSION_PER_CHAR * len(text) + EXPANSION_FLOOR)

    def fresh(self) -> ShellEnv:
        return ShellEnv(self._budget)

    def take(self, value: str) -> bool:
        """Whether ``value`` may be expanded (and charge it to the budget)."""
        if len(value) > self._budget.left:
            self._budget.left = 0
            return False
        self._budget.left -= len(value)
        return True


@dataclass
class _WordBuilder:
    """The parts of one word: (text, split_ok). Unquoted expansions may be split at blanks."""

    line: int
    parts: list[tuple[str, bool]] = field(default_factory=list)

    def add(self, text: str, split_ok: bool = False) -> None:
        self.parts.append((text, split_ok))

    def words(self) -> list[Word]:
        if self.parts and not self.parts[0][1] and _ASSIGNMENT.match(self.parts[0][0]):
            # NAME=value: the value is never split (bash assigns the whole of it)
            return [("".join(text for text, _ in self.parts), self.line)]
        fields: list[str] = []
        current: list[str] = []
        started = False  # a quoted empty string ("") is still a word
        for text, split_ok in self.parts:
            if not split_ok:
                current.append(text)
                started = True
                continue
            pieces = text.split()
            if not pieces:
                continue
            if text[:1].isspace() and (current or started):
                fields.append("".join(current))
                current, started = [], False
            for index, piece in enumerate(pieces):
                if index:
                    fields.append("".join(current))
                    current = []
                current.append(piece)
                started = True
            if text[-1:].isspace():
                fields.append("".join(current))
                current, started = [], False
        if current or started:
            fields.append("".join(current))
        return [(word, self.line) for word in fields]


class ShellLexer:
    """Reads one shell text; ``env`` holds the variables assigned so far (updated in place)."""

    def __init__(
        self, text: str, first_line: int = 1, env: ShellEnv | None = None, *, record: bool = True
    ) -> None:
        self.text = text
        self.env = env if env is not None else ShellEnv.for_text(text)
        self.record = record  # False: a ${VAR:-default}'s default, which assigns nothing
        self.pos = 0
        self.line = first_line
        # Where a quote of each kind was found never to close: any later one cannot close
        # either, so it is not searched for again (which made many stray quotes quadratic).
        self._dead: dict[str, int] = {}

    def commands(self) -> Iterator[list[Word]]:
        """The simple commands, each yielded once it ends, so ``env`` then holds what the
        text assigned before it."""
        current: list[Word] = []
        text, size = self.text, len(self.text)
        while self.pos < size:
            char = text[self.pos]
            if char in " \t\r":
                self.pos += 1
            elif char == "\n" or text.startswith(_OPERATORS, self.pos):
                if char == "\n":
                    self.pos, self.line = self.pos + 1, self.line + 1
                else:
                    self.pos += next(len(op) for op in _OPERATORS if text.startswith(op, self.pos))
                if current:
                    yield self._finish(current)
                current = []
            elif char == "#":
                end = text.find("\n", self.pos)
                self.pos = size if end < 0 else end
            elif _continuation(text, self.pos):
                self.pos, self.line = self.pos + _continuation(text, self.pos), self.line + 1
            else:
                start_line, start = self.line, self.pos
                try:
                    current.extend(self._word())
                except _Unclosed:
                    current = []  # the command with the stray quote is not read
                    end = text.find("\n", start)
                    self.pos, self.line = (size if end < 0 else end), start_line
        if current:
            yield self._finish(current)

    def _finish(self, words: list[Word]) -> list[Word]:
        """``words`` as a command, its assignments recorded."""
        tokens = [word for word, _ in words]
        if not self.record:
            return words
        if all(_ASSIGNMENT.fullmatch(token) for token in tokens):
            assignments = tokens  # ``A=1 B=2`` alone: shell variables from here on
        elif tokens[0] in _DECLARERS:
            assignments = [t for t in tokens[1:] if _ASSIGNMENT.fullmatch(t)]
        else:
            return words  # ``A=1 cmd``: only cmd's environment, not this shell's
        for token in assignments:
            name, value = _ASSIGNMENT.fullmatch(token).groups()  # type: ignore[union-attr]
            self.env.values[name] = value
        return words

    def _word(self) -> list[Word]:
        """One word from ``pos``: up to a blank, a newline or an operator."""
        text, size = self.text, len(self.text)
        word = _WordBuilder(self.line)
        while self.pos < size:
            char = text[self.pos]
            plain = _PLAIN.match(text, self.pos)
            if plain is not None:
                word.add(plain.group())
                self.pos = plain.end()
            elif char in "<>":
                word.add(char)
                self.pos += 1
                if text.startswith("&", self.pos):  # 2>&1, <&3: a redirection, not a separator
                    word.add("&")
                    self.pos += 1
            elif char == "#":
                word.add("#")  # inside a word, not a comment
                self.pos += 1
            elif char == "'":
                word.add(self._closing("'", self.pos + 1))
            elif char == '"':
                word.add(self._double_quoted())
            elif char == "\\":
                if _continuation(text, self.pos):
                    self.pos, self.line = self.pos + _continuation(text, self.pos), self.line + 1
                else:
                    word.add(text[self.pos + 1 : self.pos + 2])
                    self.pos += 2
            elif char == "$" and text.startswith("$'", self.pos):
                word.add(_ansi_c(self._closing_ansi_c()))
            elif char in "$`":
                value, known = self._expansion()
                word.add(value, split_ok=known)
            else:  # a blank, a newline or an operator ends the word
                break
        return word.words()

    def _closing(self, quote: str, start: int) -> str:
        """The text up to the closing ``quote`` (no escapes); ``pos`` moves past it."""
        if self._dead.get(quote, len(self.text)) < start:
            raise _Unclosed
        end = self.text.find(quote, start)
        if end < 0:
            self._dead[quote] = start
            raise _Unclosed
        inner = self.text[start:end]
        self.line += inner.count("\n")
        self.pos = end + 1
        return inner

    def _closing_ansi_c(self) -> str:
        """The raw text of ``$'...'`` (``\\'`` does not close it)."""
        text, start = self.text, self.pos + 2
        if self._dead.get("$'", len(text)) < start:
            raise _Unclosed
        index = start
        while True:
            end = text.find("'", index)
            if end < 0:
                self._dead["$'"] = start
                raise _Unclosed
            before = end  # count the backslashes just before the quote: odd escapes it
            while before > start and text[before - 1] == "\\":
                before -= 1
            if (end - before) % 2 == 0:
                break
            index = end + 1
        inner = text[start:end]
        self.line += inner.count("\n")
        self.pos = end + 1
        return inner

    def _double_quoted(self) -> str:
        text, size = self.text, len(self.text)
        start = self.pos + 1
        if self._dead.get('"', size) < start:
            raise _Unclosed
        self.pos = start
        out: list[str] = []
        while self.pos < size:
            char = text[self.pos]
            if char == '"':
                self.pos += 1
                return "".join(out)
            if char == "\\" and self.pos + 1 < size and text[self.pos + 1] in '$`"\\\n':
                if text[self.pos + 1] == "\n":
                    self.line += 1
                else:
                    out.append(text[self.pos + 1])
                self.pos += 2
            elif char in "$`" and not text.startswith("$'", self.pos):
                out.append(self._expansion()[0])
            else:
                run = _DOUBLE_QUOTED_RUN.match(text, self.pos)
                if run is not None:
                    out.append(run.group())
                    self.pos = run.end()
                else:
                    out.append(char)  # a newline, or a backslash escaping nothing
                    if char == "\n":
                        self.line += 1
                    self.pos += 1
        self._dead['"'] = start
        raise _Unclosed

    def _expansion(self) -> tuple[str, bool]:
        """The value of ``$...`` or a backquote at ``pos``, and whether it is a value read
        from a variable (which an unquoted word splits at blanks)."""
        text = self.text
        if text[self.pos] == "`":
            return "`" + self._closing("`", self.pos + 1) + "`", False
        if text.startswith("$(", self.pos):
            return self._substitution(), False
        if text.startswith("${", self.pos):
            return self._braced()
        name = _NAME.match(text, self.pos + 1)
        if name is None:
            self.pos += 1
            return "$", False  # $1, $@, a lone $: kept as written
        self.pos = name.end()
        value = self._value(name.group())
        return (value, True) if value is not None else ("$" + name.group(), False)

    def _value(self, name: str) -> str | None:
        value = self.env.values.get(name)
        return value if value is not None and self.env.take(value) else None

    def _braced(self) -> tuple[str, bool]:
        text = self.text
        if self._dead.get("${", len(text)) < self.pos:
            raise _Unclosed
        close = text.find("}", self.pos)
        if close < 0:
            self._dead["${"] = self.pos
            raise _Unclosed
        raw = text[self.pos : close + 1]
        self.line += raw.count("\n")
        self.pos = close + 1
        parsed = _BRACED.fullmatch(raw, 1)
        if parsed is None:
            return raw, False  # ${#x}, ${x/a/b}, ${arr[0]}: kept as written
        name, operator, default = parsed.groups()
        value = self._value(name)
        if operator is None:
            return (value, True) if value is not None else (raw, False)
        unset = value is None or (operator.startswith(":") and value == "")
        if operator.endswith(("-", "=")) and unset:
            value = _unquoted(default, self.env)
            if operator.endswith("="):
                self.env.values[name] = value
        elif operator.endswith("+"):
            value = "" if unset else _unquoted(default, self.env)
        elif unset:  # ${VAR:?message}
            return raw, False
        return value, True

    def _substitution(self) -> str:
        """``$(...)`` kept as written (nothing is run), nesting counted."""
        text, start = self.text, self.pos
        if self._dead.get("$(", len(text)) < start:
            raise _Unclosed
        depth, index = 0, start + 1
        for match in re.compile(r"[()]").finditer(text, index):
            depth += 1 if match.group() == "(" else -1
            if depth == 0:
                raw = text[start : match.end()]
                self.line += raw.count("\n")
                self.pos = match.end()
                return raw
        self._dead["$("] = start
        raise _Unclosed


def _continuation(text: str, pos: int) -> int:
    """The length of a backslash-newline at ``pos`` (CRLF too), 0 if there is none."""
    if text.startswith("\\\n", pos):
        return 2
    return 3 if text.startswith("\\\r\n", pos) else 0


def _unquoted(default: str, env: ShellEnv) -> str:
    """A ``${VAR:-default}`` default as one value: quotes removed, variables expanded."""
    words = list(ShellLexer(default, 1, env, record=False).commands())
    return " ".join(word for command in words for word, _ in command)


def _ansi_c(raw: str) -> str:
    """The value of ``$'...'``: C escapes decoded."""
    out: list[str] = []
    index = 0
    while index < len(raw):
        char = raw[index]
        if char != "\\" or index + 1 == len(raw):
            out.append(char)
            index += 1
            continue
        following = raw[index + 1]
        if following in _ANSI_C:
            out.append(_ANSI_C[following])
            index += 2
            continue
        code = _ANSI_C_CODES.match(raw, index + 1)
        if code is None:
            out.append(char + following)
            index += 2
            continue
        digits = code.group()
        number = int(digits, 8) if digits[0].isdigit() else int(digits[1:], 16)
        out.append(chr(min(number, 0x10FFFF)))
        index = code.end()
    return "".join(out)


def shell_commands(
    text: str, first_line: int = 1, env: ShellEnv | None = None
) -> Iterator[list[Word]]:
    """The simple commands of ``text``, each as [(word, line)]; ``env`` (updated in place as
    they are yielded) holds the variables known before it and gains those it assigns (a fresh
    one, budgeted for ``text``, when None)."""
    return ShellLexer(text, first_line, env).commands()
