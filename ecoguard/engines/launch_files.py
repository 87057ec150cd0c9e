"""Finding serving-engine command lines in launch files, with the line of every argument.

Reads shell scripts, Dockerfiles (``CMD``/``ENTRYPOINT`` in exec or shell form, with the base
image's entrypoint when only ``CMD`` is given), docker-compose files (``entrypoint:`` +
``command:``) and Kubernetes manifests, Helm-rendered ones included (``command:`` + ``args:`` of
each container). Nothing is run: the text is read as the shell reads it
(``ecoguard.engines.shell_lex``: quoting, comments, ``$VAR`` and ``${VAR:-default}`` from the
file's own assignments and a Dockerfile's ``ENV``) or as YAML.

Every reader is linear in its input: a YAML alias reused many times is counted at its expanded
size against a budget proportional to the file (``YAML_EXPANSION_PER_CHAR``), and a shell
variable's expansions likewise (``shell_lex.ShellEnv``).

Each command found becomes a :class:`LaunchCommand`: its tokens, the 1-based line of each token
and the engine configuration they amount to (``ecoguard.engines.command_line``).
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ecoguard.engines.command_line import EngineConfig, parse_command
from ecoguard.engines.shell_lex import ShellEnv, ShellLexer, Word, shell_commands

# Images whose entrypoint is an engine: arguments given to them (``docker run IMAGE --model x``,
# a compose ``command:``, Kubernetes ``args:``) are that engine's arguments.
IMAGE_ENTRYPOINTS: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = (
    (re.compile(r"(^|/)vllm-openai([-:@]|$)"), ("vllm", "serve")),
    (re.compile(r"(^|/)text-generation-inference([:@]|$)"), ("text-generation-launcher",)),
    (re.compile(r"(^|/)llama\.cpp:(full-)?server"), ("llama-server",)),
)

# Cheap pre-check: a file that mentions none of these starts no engine, and is not parsed.
ENGINE_MARKERS = re.compile(
    r"vllm|text-generation-launcher|text-generation-inference|sglang|llama-server|llama\.cpp"
)

_SHELLS = re.compile(r"(^|/)(ba|da|z)?sh$")
# Characters of argument text read from YAML values, aliases counted each time they are used,
# per character of the file, plus a floor: past it the file is refused as too large.
YAML_EXPANSION_PER_CHAR = 4
YAML_EXPANSION_FLOOR = 262_144


class LaunchFileError(ValueError):
    """The file could not be read as its kind (YAML syntax, for one); ``line`` when known;
    ``kind`` is the audit's problem kind (``syntax-error``, ``too-large``)."""

    def __init__(self, message: str, line: int | None = None, kind: str = "syntax-error") -> None:
        super().__init__(message)
        self.line = line
        self.kind = kind


@dataclass(frozen=True, slots=True)
class LaunchCommand:
    """One engine command line found in a file. ``lines[i]`` is the line of ``tokens[i]``."""

    tokens: tuple[str, ...]
    lines: tuple[int, ...]
    config: EngineConfig

    @property
    def line(self) -> int:
        """The line the command starts on."""
        return self.lines[0] if self.lines else 1

    def line_of(self, field_name: str) -> int:
        """The line of the token that set ``field_name`` (the command's first line if unset)."""
        index = self.config.positions.get(field_name)
        return self.lines[index] if index is not None and index < len(self.lines) else self.line


def launch_kind(name: str) -> str | None:
    """``shell``, ``dockerfile`` or ``yaml`` from a file name; None for anything else."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    lowered = base.lower()
    if lowered.endswith((".sh", ".bash")):
        return "shell"
    if (
        lowered in ("dockerfile", "containerfile")
        or lowered.startswith(("dockerfile.", "containerfile."))
        or lowered.endswith((".dockerfile", ".containerfile"))
    ):
        return "dockerfile"
    if lowered.endswith((".yaml", ".yml")):
        return "yaml"
    return None


def find_commands(text: str, kind: str) -> list[LaunchCommand]:
    """Every engine command in ``text`` read as ``kind`` (see ``launch_kind``). Raises
    LaunchFileError when a YAML file does not parse."""
    if not ENGINE_MARKERS.search(text):
        return []
    if kind == "shell":
        env = ShellEnv.for_text(text)
        return list(_commands(shell_commands(text, 1, env), env))
    if kind == "dockerfile":
        return _dockerfile(text)
    if kind == "yaml":
        return _yaml(text)
    raise ValueError(f"unknown launch file kind {kind!r}; accepted: shell, dockerfile, yaml")


# -- shell ----------------------------------------------------------------------------------


def _logical_lines(
    text: str, first_line: int, escape: str = "\\"
) -> Iterator[list[tuple[int, str]]]:
    """Physical lines grouped by ``escape``-newline continuation (a Dockerfile's ``# escape=``
    directive may make it a backtick): [(line number, text without the trailing escape)]."""
    group: list[tuple[int, str]] = []
    for offset, raw in enumerate(text.split("\n")):
        line = raw.rstrip("\r")
        stripped = line.rstrip()
        trailing = len(stripped) - len(stripped.rstrip(escape))
        if trailing % 2 == 1:
            group.append((first_line + offset, stripped[:-1]))
            continue
        group.append((first_line + offset, line))
        yield group
        group = []
    if group:
        yield group


def _commands(
    simple_commands: Iterator[list[Word]] | Sequence[list[Word]], env: ShellEnv | None = None
) -> Iterator[LaunchCommand]:
    for words in simple_commands:
        yield from _command(list(words), env)


def _command(words: list[Word], env: ShellEnv | None = None) -> Iterator[LaunchCommand]:
    """Engine commands in one argv: directly, through ``sh -c STRING``, or as the arguments of
    ``docker run`` / ``podman run`` on an engine image. ``env``: the variables the file set so
    far (``sh -c`` strings read them; None: a string is read on its own)."""
    if not words:
        return
    tokens = [word for word, _ in words]
    index = _skip_prefix(tokens)
    if index < len(tokens) and _SHELLS.search(tokens[index]):
        rest = tokens[index + 1 :]
        if "-c" in rest and rest.index("-c") + 1 < len(rest):
            at = index + 1 + rest.index("-c") + 1
            yield from _commands(shell_commands(tokens[at], words[at][1], env), env)
            return
    if index + 1 < len(tokens) and tokens[index] in ("docker", "podman") and "run" in tokens:
        yield from _docker_run(words, tokens, env)
        return
    config = parse_command(tokens)
    if config is not None:
        yield LaunchCommand(tuple(tokens), tuple(line for _, line in words), config)


def _skip_prefix(tokens: Sequence[str]) -> int:
    index = 0
    while index < len(tokens) and (
        tokens[index] in ("exec", "nohup", "env", "time", "command", "sudo")
        or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", tokens[index])
    ):
        index += 1
    return index


def _docker_run(
    words: list[Word], tokens: list[str], env: ShellEnv | None
) -> Iterator[LaunchCommand]:
    if "--entrypoint" in tokens or any(t.startswith("--entrypoint=") for t in tokens):
        return  # the image's entrypoint is replaced: what follows is not its arguments
    run = tokens.index("run")
    for position in range(run + 1, len(tokens)):
        implied = implied_entrypoint(tokens[position])
        if implied is not None:
            line = words[position][1]
            argv = [(part, line) for part in implied] + words[position + 1 :]
            if len(words) > position + 1 and parse_command(tokens[position + 1 :]) is not None:
                argv = words[position + 1 :]  # the image runs an explicit engine command
            yield from _command(argv, env)
            return


def implied_entrypoint(image: str) -> tuple[str, ...] | None:
    """The engine entrypoint of a known engine image (``vllm/vllm-openai:v0.9``); None else."""
    for pattern, entrypoint in IMAGE_ENTRYPOINTS:
        if pattern.search(image):
            return entrypoint
    return None


# -- Dockerfile -----------------------------------------------------------------------------


@dataclass(slots=True)
class _Stage:
    """One ``FROM`` stage of a Dockerfile: its image, ENTRYPOINT and CMD (exec form or not)."""

    image: str | None = None
    entrypoint: list[Word] | None = None
    entry_exec: bool = False
    cmd: list[Word] | None = None
    cmd_exec: bool = False

    def argv(self) -> list[Word] | None:
        """The command the stage's container runs (None: none is given)."""
        entrypoint, cmd = self.entrypoint, self.cmd
        if entrypoint is not None:
            if not self.entry_exec:
                return entrypoint  # shell form ignores CMD
            return entrypoint + (cmd if cmd is not None and self.cmd_exec else [])
        if cmd is None or not self.cmd_exec:
            return cmd
        implied = implied_entrypoint(self.image or "")
        if implied is not None and parse_command([w for w, _ in cmd]) is None:
            line = cmd[0][1] if cmd else 1
            return [(part, line) for part in implied] + cmd
        return cmd


# Parser directives: ``# name=value`` lines before anything else (``# escape=``` for one).
_DIRECTIVES = re.compile(r"(?:[ \t]*#[ \t]*[A-Za-z]+[ \t]*=[^\n]*\n)*")
_ESCAPE = re.compile(r"#[ \t]*escape[ \t]*=[ \t]*(\S)", re.IGNORECASE)


def _dockerfile(text: str) -> list[LaunchCommand]:
    found: list[LaunchCommand] = []
    stage: _Stage | None = None
    build_env = ShellEnv.for_text(text)  # ARG and ENV: what Docker substitutes in ENV values
    run_env = build_env.fresh()  # ENV: what the container's shell sees
    escape = _ESCAPE.search(_DIRECTIVES.match(text).group())  # type: ignore[union-attr]
    for group in _logical_lines(text, 1, escape.group(1) if escape else "\\"):
        pieces = [(line, piece) for line, piece in group if not piece.lstrip().startswith("#")]
        if not pieces:
            continue
        first_line, first = pieces[0]
        parts = first.split(None, 1)  # any blank ends the keyword: FROM<TAB>image is valid
        keyword = parts[0].upper() if parts else ""
        rest = parts[1] if len(parts) > 1 else ""
        pieces = [(first_line, rest), *pieces[1:]]
        if keyword == "FROM":
            if stage is not None:
                found.extend(_command(stage.argv() or [], run_env))
            stage = _Stage(image=next((p for p in rest.split() if not p.startswith("--")), None))
            run_env = build_env.fresh()
        elif keyword in ("ENV", "ARG"):
            _docker_variables(keyword, pieces, build_env, run_env)
        elif keyword in ("CMD", "ENTRYPOINT"):
            stage = stage or _Stage()
            words, is_exec = _instruction_words(pieces, run_env)
            if keyword == "CMD":
                stage.cmd, stage.cmd_exec = words, is_exec
            else:
                stage.entrypoint, stage.entry_exec = words, is_exec
                stage.cmd = None  # a new ENTRYPOINT resets an inherited CMD
    if stage is not None:
        found.extend(_command(stage.argv() or [], run_env))
    return found


def _docker_variables(
    keyword: str, pieces: list[tuple[int, str]], build_env: ShellEnv, run_env: ShellEnv
) -> None:
    """``ENV A=1 B=2`` / ``ENV A 1`` / ``ARG A=1``: values as Docker substitutes them."""
    text = "\\\n".join(piece for _, piece in pieces)
    lexer = ShellLexer(text, 1, build_env, record=False)  # substituted, nothing assigned yet
    words = [word for command in lexer.commands() for word, _ in command]
    if not words:
        return
    if "=" in words[0]:
        pairs = [word.partition("=")[::2] for word in words if "=" in word]
    elif keyword == "ENV":
        pairs = [(words[0], " ".join(words[1:]))]  # the legacy ``ENV NAME value`` form
    else:
        return  # ``ARG NAME``: no default
    for name, value in pairs:
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            build_env.values[name] = value
            if keyword == "ENV":
                run_env.values[name] = value


def _instruction_words(
    pieces: list[tuple[int, str]], env: ShellEnv | None = None
) -> tuple[list[Word], bool]:
    """A CMD/ENTRYPOINT argument: exec form (a JSON array) or shell form."""
    placed = _exec_form(pieces)
    if placed is not None:
        return placed, True
    text = "\\\n".join(piece for _, piece in pieces)  # keep the continuations
    words = [word for command in shell_commands(text, 1, env) for word in command]
    # Re-number: the lexer counted from 1 over the pieces.
    lines = [line for line, _ in pieces]
    return [(word, lines[min(line - 1, len(lines) - 1)]) for word, line in words], False


_BLANKS = re.compile(r"[ \t\r\n]*")


def _exec_form(pieces: list[tuple[int, str]]) -> list[Word] | None:
    """The exec form (a JSON array of strings) with the line of each element, read in one pass
    (searching each element's text in the lines, JSON escapes and all, was quadratic); None
    when the text is not one."""
    raw = " ".join(piece for _, piece in pieces)
    starts: list[int] = []
    offset = 0
    for _, piece in pieces:
        starts.append(offset)
        offset += len(piece) + 1
    index = _BLANKS.match(raw).end()  # type: ignore[union-attr]
    if not raw.startswith("[", index):
        return None
    index = _BLANKS.match(raw, index + 1).end()  # type: ignore[union-attr]
    placed: list[Word] = []
    decoder = json.JSONDecoder()
    while not (raw.startswith("]", index) and not placed):
        try:
            item, end = decoder.raw_decode(raw, index)
        except ValueError:
            return None
        if not isinstance(item, str):
            return None
        placed.append((item, pieces[bisect_right(starts, index) - 1][0]))
        index = _BLANKS.match(raw, end).end()  # type: ignore[union-attr]
        if not raw.startswith(",", index):
            break
        index = _BLANKS.match(raw, index + 1).end()  # type: ignore[union-attr]
    if not raw.startswith("]", index) or raw[index + 1 :].strip():
        return None
    return placed


# -- YAML (docker-compose, Kubernetes, Helm output) -------------------------------------------


def _yaml(text: str) -> list[LaunchCommand]:
    try:
        import yaml
    except ImportError as exc:  # an optional extra: ecoguard[launch]
        raise LaunchFileError(
            "reading YAML launch files needs PyYAML: pip install pyyaml (from a clone: pip install -e "
            "'.[launch]')"
        ) from exc
    try:
        documents = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise LaunchFileError(f"not valid YAML: {exc}".split("\n")[0], line) from exc
    except RecursionError as exc:  # PyYAML's composer recurses per nesting level
        raise LaunchFileError("YAML nested too deep to read; not audited") from exc
    found: list[LaunchCommand] = []
    budget = _YamlBudget(text)
    for document in documents:
        if document is not None:
            _walk_yaml(document, None, found, budget)
    return found


# Compose's interpolation with a default: ${VAR:-default} and ${VAR-default}.
_COMPOSE_DEFAULT = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*:?-([^}]*)\}")


class _YamlBudget:
    """Characters of argument text still to read. Aliases share nodes, so one anchored list
    used by thousands of services is read once per use: counted at its expanded size, the
    reading stays proportional to the file, and a file past it is refused (not half-read)."""

    __slots__ = ("left", "limit", "shell")

    def __init__(self, text: str) -> None:
        self.limit = YAML_EXPANSION_PER_CHAR * len(text) + YAML_EXPANSION_FLOOR
        self.left = self.limit
        self.shell = ShellEnv.for_text(text)  # shared by every string value's expansions

    def take(self, size: int) -> None:
        self.left -= size
        if self.left < 0:
            raise LaunchFileError(
                f"YAML aliases expand the commands past {self.limit:,} characters "
                f"({YAML_EXPANSION_PER_CHAR}x the file, and 256 KiB at least); not audited",
                kind="too-large",
            )


def _walk_yaml(
    root, parent_key: str | None, found: list[LaunchCommand], budget: _YamlBudget
) -> None:
    """Every mapping with ``command``/``args``/``entrypoint`` under ``root``. Iterative, and
    each node once: aliases share nodes, so a recursive walk of an alias bomb ("billion
    laughs") would take forever, and deep nesting would overflow the stack."""
    import yaml

    seen: set[int] = set()
    repeats: set[tuple] = set()
    stack = [(root, parent_key)]
    while stack:
        node, key_name = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys = {
                key.value: value
                for key, value in node.value
                if isinstance(key, yaml.ScalarNode) and isinstance(key.value, str)
            }
            if keys.keys() & {"command", "args", "entrypoint"}:
                found.extend(_container(keys, key_name, budget, repeats))
            stack.extend(
                (value, key.value if isinstance(key, yaml.ScalarNode) else None)
                for key, value in reversed(node.value)
            )
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, key_name) for item in reversed(node.value))


def _container(
    keys: dict, parent_key: str | None, budget: _YamlBudget, repeats: set[tuple]
) -> list[LaunchCommand]:
    """A Kubernetes container (``command`` = entrypoint, ``args``) or a compose service
    (``entrypoint``, ``command`` = its arguments). A field of an unexpected shape (a list or
    mapping where a string belongs) is left out, as if absent. The same nodes met again
    (services sharing anchored commands and image) are the same command: read once."""
    kubernetes = "args" in keys or parent_key in ("containers", "initContainers")
    if kubernetes:
        entry, arguments = keys.get("command"), keys.get("args")
    else:
        entry, arguments = keys.get("entrypoint"), keys.get("command")
    repeat = (kubernetes, id(entry), id(arguments), _scalar_text(keys.get("image")))
    if repeat in repeats:
        return []
    repeats.add(repeat)
    compose = not kubernetes  # compose fills ${VAR:-default} in every value; Kubernetes not
    entry_words = _yaml_words(entry, budget, compose) if entry is not None else None
    arg_words = _yaml_words(arguments, budget, compose) if arguments is not None else []
    if entry_words is None:
        image = _scalar_text(keys.get("image"))
        implied = implied_entrypoint(image) if image else None
        arg_tokens = [word for word, _ in arg_words]
        if implied is not None and parse_command(arg_tokens) is None:
            line = arg_words[0][1] if arg_words else keys["image"].start_mark.line + 1
            entry_words = [(part, line) for part in implied]
        else:
            entry_words = []
    return list(_command(entry_words + arg_words))


def _scalar_text(node) -> str | None:
    """A YAML node's text when it is a string scalar; None for anything else."""
    import yaml

    if isinstance(node, yaml.ScalarNode) and isinstance(node.value, str):
        return node.value
    return None


def _yaml_words(node, budget: _YamlBudget, compose: bool = False) -> list[Word]:
    """A YAML value as argv words: a list of scalars, each on its own line; a string is split
    as a shell would (compose does the same). Anything else (a mapping) gives no words.
    ``compose``: a list item's ``${VAR:-default}`` stands for its default, as compose fills it
    in when the variable is not set."""
    import yaml

    if isinstance(node, yaml.SequenceNode):
        budget.take(len(node.value))
        words: list[Word] = []
        for item in node.value:
            text = _scalar_text(item)
            if text is not None:
                budget.take(len(text))
                line = item.start_mark.line + 1 + (1 if item.style in ("|", ">") else 0)
                words.append((_COMPOSE_DEFAULT.sub(r"\1", text) if compose else text, line))
        return words
    text = _scalar_text(node)
    if text is None:
        return []
    budget.take(len(text) + 1)
    # Literal (|) and folded (>) blocks start on the line after their indicator.
    first = node.start_mark.line + 1 + (1 if node.style in ("|", ">") else 0)
    commands = shell_commands(text, first, budget.shell.fresh())
    if node.style != "|":
        # Plain, quoted and folded scalars fold line breaks into spaces: the first line
        # stands for the whole value.
        return [(word, first) for command in commands for word, _ in command]
    return [word for command in commands for word in command]
