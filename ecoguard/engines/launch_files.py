"""Finding serving-engine command lines in launch files, with the line of every argument.

Reads shell scripts, Dockerfiles (``CMD``/``ENTRYPOINT`` in exec or shell form, with the base
image's entrypoint when only ``CMD`` is given), docker-compose files (``entrypoint:`` +
``command:``) and Kubernetes manifests, Helm-rendered ones included (``command:`` + ``args:`` of
each container). Nothing is run: the text is tokenised as the shell (``shlex``) or read as YAML.

Each command found becomes a :class:`LaunchCommand`: its tokens, the 1-based line of each token
and the engine configuration they amount to (``ecoguard.engines.engine_args``).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ecoguard.engines.engine_args import EngineConfig, parse_command

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

_SEPARATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", ";;", "|&"})
_SHELLS = re.compile(r"(^|/)(ba|da|z)?sh$")


class LaunchFileError(ValueError):
    """The file could not be read as its kind (YAML syntax, for one); ``line`` when known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


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
        return list(_commands(_shell_words(text, 1)))
    if kind == "dockerfile":
        return _dockerfile(text)
    if kind == "yaml":
        return _yaml(text)
    raise ValueError(f"unknown launch file kind {kind!r}; accepted: shell, dockerfile, yaml")


# -- shell ----------------------------------------------------------------------------------

Word = tuple[str, int]  # (token, line)


def _logical_lines(text: str, first_line: int) -> Iterator[list[tuple[int, str]]]:
    """Physical lines grouped by backslash continuation: [(line number, text without the
    trailing backslash), ...]."""
    group: list[tuple[int, str]] = []
    for offset, raw in enumerate(text.split("\n")):
        line = raw.rstrip("\r")
        stripped = line.rstrip()
        trailing = len(stripped) - len(stripped.rstrip("\\"))
        if trailing % 2 == 1:
            group.append((first_line + offset, stripped[:-1]))
            continue
        group.append((first_line + offset, line))
        yield group
        group = []
    if group:
        yield group


def _split(text: str) -> list[str]:
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    return list(lexer)


def _shell_words(text: str, first_line: int) -> list[list[Word]]:
    """The simple commands of a shell text, each as [(word, line)], split at ``;``, ``&&``,
    ``|``, ``&`` and newlines. A continued line is tokenised piece by piece so each word keeps
    its own line; a quote spanning pieces falls back to the whole logical line."""
    commands: list[list[Word]] = []
    for group in _logical_lines(text, first_line):
        words: list[Word] = []
        try:
            for line, piece in group:
                words.extend((word, line) for word in _split(piece))
        except ValueError:
            try:
                joined = " ".join(piece for _, piece in group)
                words = [(word, group[0][0]) for word in _split(joined)]
            except ValueError:
                continue  # unbalanced quotes: not a command we can read
        current: list[Word] = []
        for word in words:
            if word[0] in _SEPARATORS:
                if current:
                    commands.append(current)
                current = []
            else:
                current.append(word)
        if current:
            commands.append(current)
    return commands


def _commands(simple_commands: Sequence[Sequence[Word]]) -> Iterator[LaunchCommand]:
    for words in simple_commands:
        yield from _command(list(words))


def _command(words: list[Word]) -> Iterator[LaunchCommand]:
    """Engine commands in one argv: directly, through ``sh -c STRING``, or as the arguments of
    ``docker run`` / ``podman run`` on an engine image."""
    if not words:
        return
    tokens = [word for word, _ in words]
    index = _skip_prefix(tokens)
    if index < len(tokens) and _SHELLS.search(tokens[index]):
        rest = tokens[index + 1 :]
        if "-c" in rest and rest.index("-c") + 1 < len(rest):
            at = index + 1 + rest.index("-c") + 1
            yield from _commands(_shell_words(tokens[at], words[at][1]))
            return
    if index + 1 < len(tokens) and tokens[index] in ("docker", "podman") and "run" in tokens:
        yield from _docker_run(words, tokens)
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


def _docker_run(words: list[Word], tokens: list[str]) -> Iterator[LaunchCommand]:
    if "--entrypoint" in tokens or any(t.startswith("--entrypoint=") for t in tokens):
        return  # the image's entrypoint is replaced: what follows is not its arguments
    for position, token in enumerate(tokens):
        implied = implied_entrypoint(token)
        if implied is not None and position > tokens.index("run"):
            line = words[position][1]
            argv = [(part, line) for part in implied] + words[position + 1 :]
            if len(words) > position + 1 and parse_command(tokens[position + 1 :]) is not None:
                argv = words[position + 1 :]  # the image runs an explicit engine command
            yield from _command(argv)
            return


def implied_entrypoint(image: str) -> tuple[str, ...] | None:
    """The engine entrypoint of a known engine image (``vllm/vllm-openai:v0.9``); None else."""
    for pattern, entrypoint in IMAGE_ENTRYPOINTS:
        if pattern.search(image):
            return entrypoint
    return None


# -- Dockerfile -----------------------------------------------------------------------------


def _dockerfile(text: str) -> list[LaunchCommand]:
    found: list[LaunchCommand] = []
    image: str | None = None
    entrypoint: list[Word] | None = None
    entry_exec = False
    cmd: list[Word] | None = None
    cmd_exec = False

    def close_stage() -> None:
        if entrypoint is not None and not entry_exec:
            found.extend(_command(entrypoint))  # shell form ignores CMD
            return
        argv: list[Word] | None = None
        if entrypoint is not None:
            argv = entrypoint + (cmd if cmd is not None and cmd_exec else [])
        elif cmd is not None and not cmd_exec:
            found.extend(_command(cmd))
            return
        elif cmd is not None:
            implied = implied_entrypoint(image or "")
            if implied is not None and parse_command([w for w, _ in cmd]) is None:
                line = cmd[0][1] if cmd else 1
                argv = [(part, line) for part in implied] + cmd
            else:
                argv = cmd
        if argv:
            found.extend(_command(argv))

    for group in _logical_lines(text, 1):
        pieces = [(line, piece) for line, piece in group if not piece.lstrip().startswith("#")]
        if not pieces:
            continue
        first_line, first = pieces[0]
        keyword, _, rest = first.strip().partition(" ")
        keyword = keyword.upper()
        pieces = [(first_line, rest), *pieces[1:]]
        if keyword == "FROM":
            if image is not None:
                close_stage()
            parts = rest.split()
            image = next((p for p in parts if not p.startswith("--")), None)
            entrypoint, cmd, entry_exec, cmd_exec = None, None, False, False
        elif keyword in ("CMD", "ENTRYPOINT"):
            words, is_exec = _instruction_words(pieces)
            if keyword == "CMD":
                cmd, cmd_exec = words, is_exec
            else:
                entrypoint, entry_exec = words, is_exec
                cmd = None  # a new ENTRYPOINT resets an inherited CMD
    close_stage()
    return found


def _instruction_words(pieces: list[tuple[int, str]]) -> tuple[list[Word], bool]:
    """A CMD/ENTRYPOINT argument: exec form (a JSON array) or shell form."""
    joined = " ".join(piece for _, piece in pieces).strip()
    if joined.startswith("["):
        try:
            items = json.loads(joined)
        except ValueError:
            items = None
        if isinstance(items, list) and all(isinstance(item, str) for item in items):
            return _place(items, pieces), True
    text = "\\\n".join(piece for _, piece in pieces)  # keep the continuations
    words = [word for command in _shell_words(text, 1) for word in command]
    # Re-number: _shell_words counted from 1 over the pieces.
    lines = [line for line, _ in pieces]
    return [(word, lines[min(line - 1, len(lines) - 1)]) for word, line in words], False


def _place(items: list[str], pieces: list[tuple[int, str]]) -> list[Word]:
    """The line of each exec-form element: the first piece, from the previous element's on,
    that contains it as a JSON string."""
    placed: list[Word] = []
    cursor = 0
    for item in items:
        needle = json.dumps(item)
        for index in range(cursor, len(pieces)):
            if needle in pieces[index][1] or item in pieces[index][1]:
                cursor = index
                break
        placed.append((item, pieces[cursor][0]))
    return placed


# -- YAML (docker-compose, Kubernetes, Helm output) -------------------------------------------


def _yaml(text: str) -> list[LaunchCommand]:
    try:
        import yaml
    except ImportError as exc:  # an optional extra: ecoguard[launch]
        raise LaunchFileError(
            "reading YAML launch files needs PyYAML: pip install 'ecoguard[launch]'"
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
    for document in documents:
        if document is not None:
            _walk_yaml(document, None, found)
    return found


def _walk_yaml(root, parent_key: str | None, found: list[LaunchCommand]) -> None:
    """Every mapping with ``command``/``args``/``entrypoint`` under ``root``. Iterative, and
    each node once: aliases share nodes, so a recursive walk of an alias bomb ("billion
    laughs") would take forever, and deep nesting would overflow the stack."""
    import yaml

    seen: set[int] = set()
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
                found.extend(_container(keys, key_name))
            stack.extend(
                (value, key.value if isinstance(key, yaml.ScalarNode) else None)
                for key, value in reversed(node.value)
            )
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, key_name) for item in reversed(node.value))


def _container(keys: dict, parent_key: str | None) -> list[LaunchCommand]:
    """A Kubernetes container (``command`` = entrypoint, ``args``) or a compose service
    (``entrypoint``, ``command`` = its arguments)."""
    kubernetes = "args" in keys or parent_key in ("containers", "initContainers")
    if kubernetes:
        entry, arguments = keys.get("command"), keys.get("args")
    else:
        entry, arguments = keys.get("entrypoint"), keys.get("command")
    entry_words = _yaml_words(entry) if entry is not None else None
    arg_words = _yaml_words(arguments) if arguments is not None else []
    if entry_words is None:
        image = keys.get("image")
        implied = implied_entrypoint(getattr(image, "value", "") or "") if image else None
        arg_tokens = [word for word, _ in arg_words]
        if implied is not None and parse_command(arg_tokens) is None:
            line = arg_words[0][1] if arg_words else image.start_mark.line + 1
            entry_words = [(part, line) for part in implied]
        else:
            entry_words = []
    return list(_command(entry_words + arg_words))


def _yaml_words(node) -> list[Word]:
    """A YAML value as argv words: a list of scalars, each on its own line; a string is split
    as a shell would (compose does the same)."""
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return [
            (str(item.value), item.start_mark.line + 1 + (1 if item.style in ("|", ">") else 0))
            for item in node.value
            if isinstance(item, yaml.ScalarNode)
        ]
    if isinstance(node, yaml.ScalarNode) and isinstance(node.value, str):
        # Literal (|) and folded (>) blocks start on the line after their indicator.
        first = node.start_mark.line + 1 + (1 if node.style in ("|", ">") else 0)
        if node.style != "|":
            # Plain, quoted and folded scalars fold line breaks into spaces: the first line
            # stands for the whole value.
            return [
                (word, first) for command in _shell_words(node.value, first) for word, _ in command
            ]
        return [word for command in _shell_words(node.value, first) for word in command]
    return []
