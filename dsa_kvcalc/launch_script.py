"""A launch script (or a pasted command) as a POSIX shell reads it, as far as finding the vLLM servers it starts:
its commands in order, quotes (across lines too), backslash continuations, comments, redirections and here-documents,
and the variables it assigns, expanded where a later command uses them (${NAME:-default} too), with word splitting.
A variable the script does not assign stays as written and is named, so that the reader can say which value to give
with --set.

A server is `vllm serve ...` (a full path to vllm too), `python -m vllm.entrypoints.openai.api_server ...`, `docker run
... IMAGE ...` of vLLM's OpenAI image (whose entrypoint is vllm serve; its tag names the release), or any of these
inside `bash -c '...'`, behind the usual runners (env, exec, nohup, sudo, numactl, uv run, ...) and environment
assignments.
"""

import re
from dataclasses import dataclass, field

from dsa_kvcalc.keys import RecipeError

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=")
RESERVED = {"if", "then", "else", "elif", "do", "while", "until", "!", "{", "time"}
# Commands that run the next command of the line (with their options); anything else before a server means the
# line does not start one (echo vllm serve ..., grep vllm serve ...)
RUNNERS = {"env", "exec", "nohup", "sudo", "time", "numactl", "taskset", "timeout", "uv", "run", "srun", "setsid",
           "stdbuf", "nice", "ionice", "chrt", "command", "builtin", "xargs"}
SHELLS = {"bash", "sh", "zsh", "dash"}
API_SERVER = "vllm.entrypoints.openai.api_server"
CLI_MAIN = "vllm.entrypoints.cli.main"
DOCKERS = {"docker", "podman", "nerdctl"}
# docker run's options that take no value (the rest take one, as --name=value or --name value)
DOCKER_FLAGS = {"-d", "--detach", "-i", "--interactive", "-t", "--tty", "--rm", "--privileged", "--init", "-P",
                "--publish-all", "--read-only", "--no-healthcheck", "--oom-kill-disable", "-q", "--quiet",
                "--help", "--disable-content-trust"}
VLLM_IMAGE = re.compile(r"(?:^|/)vllm-openai(?:-rocm)?(?::|$)")


@dataclass(frozen=True)
class Word:
    text: str
    unexpanded: tuple[str, ...] = ()  # the variables and command substitutions in it the script does not give
    assignment: str | None = None  # NAME of a NAME=value word


@dataclass
class Server:
    """One vLLM server a script starts: where, its environment, its arguments (after `vllm serve`), and the image
    it runs in (docker)."""
    line: int
    env: dict
    args: list[Word]
    image: str | None = None
    env_unexpanded: dict = field(default_factory=dict)  # NAME -> the variables its value holds, not expanded


class Lexer:
    """The script's commands, one at a time: each a line number and its words, expanded with `variables` as they are
    when the command is reached (the caller assigns between commands)."""

    def __init__(self, text: str, variables: dict):
        self.text, self.i, self.line, self.variables = text, 0, 1, variables
        self.heredocs: list[tuple[str, bool]] = []
        self.bodies: list[str] = []  # the here-documents of the command last read: its standard input

    def peek(self, ahead: int = 0) -> str:
        return self.text[self.i + ahead] if self.i + ahead < len(self.text) else ""

    def take(self) -> str:
        char = self.peek()
        self.i += 1
        if char == "\n":
            self.line += 1
        return char

    def error(self, problem: str):
        raise RecipeError("command", f"line {self.line}: {problem}")

    def commands(self):
        """(line, words, the here-document it reads, if any) for each command."""
        while self.i < len(self.text):
            self.bodies = []
            start, words = self.line, self.command()
            if words:
                yield start, words, "\n".join(self.bodies) or None

    def command(self) -> list[Word]:
        """The words up to the end of the command (a newline, ;, &, &&, ||, |, or a parenthesis)."""
        words: list[Word] = []
        while self.i < len(self.text):
            char = self.peek()
            if char in " \t\r":
                self.take()
            elif char == "\\" and self.peek(1) == "\n":
                self.take(), self.take()
            elif char == "#":
                while self.peek() not in ("\n", ""):
                    self.take()
            elif char == "\n":
                self.take()
                self.skip_heredocs()
                if words:
                    return words
            elif char in ";&|()":
                self.take()
                if self.peek() in "&|;" and self.peek():
                    self.take()
                if words:
                    return words
            elif char in "<>" or (char.isdigit() and self.redirection_ahead()):
                self.redirection()
            else:
                words += self.word()
        return words

    def redirection_ahead(self) -> bool:
        j = self.i
        while j < len(self.text) and self.text[j].isdigit():
            j += 1
        return j < len(self.text) and self.text[j] in "<>" and (j == self.i or self.text[j - 1].isdigit())

    def redirection(self) -> None:
        """A redirection and its target, skipped; a here-document's body is skipped at the end of its line."""
        while self.peek().isdigit():
            self.take()
        operator = self.take()
        while self.peek() in "<>&-|":
            operator += self.take()
        if operator.endswith("&") and self.peek().isdigit() or self.peek() == "-" and operator.endswith("&"):
            while self.peek().isdigit() or self.peek() == "-":
                self.take()
            return
        while self.peek() in " \t":
            self.take()
        target = self.word()
        if operator.startswith("<<") and not operator.startswith("<<<") and target:
            self.heredocs.append((target[0].text, operator.startswith("<<-")))

    def skip_heredocs(self) -> None:
        """The here-documents opened on the line just ended: their bodies, kept as the command's input."""
        for delimiter, tabs in self.heredocs:
            body = []
            while self.i < len(self.text):
                end = self.text.find("\n", self.i)
                end = len(self.text) if end < 0 else end
                line = self.text[self.i:end]
                self.i, self.line = end + 1, self.line + 1
                if (line.lstrip("\t") if tabs else line).strip() == delimiter:
                    break
                body.append(line.lstrip("\t") if tabs else line)
            self.bodies.append("\n".join(body))
        self.heredocs = []

    def word(self) -> list[Word]:
        """One shell word: quotes, escapes and expansions, split where an unquoted expansion holds blanks (so it may
        be none or several words)."""
        fields: list[list] = [["", False, []]]  # text, quoted or not empty, unexpanded
        match = ASSIGNMENT.match(self.text, self.i)
        assignment = match.group(1) if match else None
        split = assignment is None

        def add(text: str, splittable: bool, unexpanded=()):
            if splittable and split and re.search(r"\s", text):
                parts = re.split(r"\s+", text)
                fields[-1][0] += parts[0]
                fields.extend([part, False, []] for part in parts[1:])
            else:
                fields[-1][0] += text
                fields[-1][1] = fields[-1][1] or not splittable
            fields[-1][2] += list(unexpanded)

        while self.i < len(self.text):
            char = self.peek()
            if char in " \t\r\n;&|()<>":
                break
            if char == "\\":
                self.take()
                escaped = self.take()
                if escaped != "\n":
                    add(escaped, False)
            elif char == "'":
                self.take()
                end = self.text.find("'", self.i)
                if end < 0:
                    self.error("no closing quotation")
                add(self.text[self.i:end], False)
                while self.i <= end:
                    self.take()
            elif char == '"':
                self.take()
                self.double_quoted(add)
            elif char == "$":
                self.expansion(add, quoted=False)
            elif char == "`":
                add(*self.substitution("`", "`"))
            else:
                add(self.take(), False)
        words = [Word(text, tuple(unexpanded), assignment) for text, quoted, unexpanded in fields if text or quoted]
        return words or ([Word("", (), assignment)] if assignment else [])

    def double_quoted(self, add) -> None:
        while True:
            char = self.peek()
            if not char:
                self.error("no closing quotation")
            if char == '"':
                self.take()
                return
            if char == "\\" and self.peek(1) in '$`"\\\n':
                self.take()
                escaped = self.take()
                if escaped != "\n":
                    add(escaped, False)
            elif char == "$":
                self.expansion(add, quoted=True)
            elif char == "`":
                text, _, unexpanded = self.substitution("`", "`")
                add(text, False, unexpanded)
            else:
                add(self.take(), False)

    def expansion(self, add, quoted: bool) -> None:
        """$NAME, ${NAME}, ${NAME:-word} (and -, :=, =, :+, +), $(...), $'...'; positional and special parameters
        are not given."""
        self.take()
        char = self.peek()
        if char == "(":
            text, _, unexpanded = self.substitution("$(", ")")
            add(text, False, unexpanded)
            return
        if char == "'" and not quoted:
            self.take()
            end = self.text.find("'", self.i)
            if end < 0:
                self.error("no closing quotation")
            body = self.text[self.i:end]
            add(re.sub(r"\\([ntr\\'])", lambda m: {"n": "\n", "t": "\t", "r": "\r"}.get(m[1], m[1]), body), False)
            while self.i <= end:
                self.take()
            return
        if char == "{":
            depth, start = 0, self.i
            while True:
                c = self.take()
                if not c:
                    self.error("no closing brace")
                depth += {"{": 1, "}": -1}.get(c, 0)
                if depth == 0:
                    break
            body = self.text[start + 1:self.i - 1]
            match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-=+])(.*))?", body, re.S)
            if match is None:
                add(f"${{{body}}}", False, [f"${{{body}}}"])
                return
            name, operator, word = match.groups()
            default, held = self.expanded(word or "")
            value = self.variables.get(name)
            empty = value is None or (operator or "").startswith(":") and value == ""
            if operator and operator.endswith("+"):
                add("" if empty else default, not quoted, () if empty else held)
            elif operator and empty:
                if operator.endswith("="):
                    self.variables[name] = default
                add(default, not quoted, held)
            elif value is None:
                add(f"${{{body}}}", False, [f"${{{body}}}"])
            else:
                add(value, not quoted)
            return
        match = NAME.match(self.text, self.i)
        if match is None:
            special = self.take() if char and char in "@*#?$!-0123456789" else ""
            if special in ("@", "*"):  # the script's arguments: it is read as run without any
                add("", True)
            else:
                add(f"${special}", False, [f"${special}"] if special else [])
            return
        self.i = match.end()
        name = match.group()
        if name in self.variables:
            add(self.variables[name], not quoted)
        else:
            add(f"${name}", False, [f"${name}"])

    def expanded(self, word: str) -> tuple[str, list[str]]:
        """A ${NAME:-word}'s word, expanded as a word is (its variables, quotes), and the variables it holds that
        the script does not give."""
        words = Lexer(word, self.variables).word() if word else []
        return " ".join(w.text for w in words), [m for w in words for m in w.unexpanded]

    def substitution(self, opening: str, closing: str) -> tuple[str, bool, list[str]]:
        """A command substitution, kept as written: the reader cannot run it."""
        start = self.i
        self.i += len(opening)
        depth = 1
        while depth:
            c = self.take()
            if not c:
                self.error(f"no closing {closing}")
            if opening == "$(" and c == "(":
                depth += 1
            elif c == closing:
                depth -= 1
        text = self.text[start:self.i]
        return text, False, [text]


def basename(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def servers(text: str, variables: dict | None = None, exported: set | None = None, line: int = 0) -> list[Server]:
    """The vLLM servers a script starts, in order, with the variables it assigns before each expanded."""
    variables = {} if variables is None else variables
    exported = set() if exported is None else exported
    found = []
    for number, words, stdin in Lexer(text, variables).commands():
        while words and words[0].text in RESERVED and not words[0].unexpanded:
            words = words[1:]
        if not words:
            continue
        head = words[0].text
        if all(w.assignment for w in words):
            variables |= {w.assignment: w.text.split("=", 1)[1] for w in words}
        elif head in ("export", "declare", "typeset", "readonly", "local"):
            for w in words[1:]:
                if w.assignment:
                    variables[w.assignment] = w.text.split("=", 1)[1]
                if head == "export" and not w.text.startswith("-"):
                    exported.add(w.text.split("=", 1)[0])
        elif head == "unset":
            for w in words[1:]:
                variables.pop(w.text, None)
        else:
            found += command_servers(words, variables, exported, line + number, stdin)
    return found


def environment(variables: dict, exported: set) -> dict:
    return {name: variables[name] for name in exported if name in variables}


def command_servers(words: list[Word], variables: dict, exported: set, line: int, stdin: str | None = None) \
        -> list[Server]:
    """The servers one command starts: none, or one (several inside bash -c, or a script bash reads from a
    here-document)."""
    env: dict = environment(variables, exported)
    unexpanded: dict = {}
    i, runner = 0, False
    while i < len(words):
        word, name = words[i], basename(words[i].text)
        if word.assignment and (i == 0 or runner or all(w.assignment for w in words[:i])):
            env[word.assignment] = word.text.split("=", 1)[1]
            if word.unexpanded:
                unexpanded[word.assignment] = word.unexpanded
        elif name == "vllm" and i + 1 < len(words) and words[i + 1].text == "serve":
            return [Server(line, env, words[i + 2:], env_unexpanded=unexpanded)]
        elif re.fullmatch(r"python[\d.]*", name):
            module = next((j for j in range(i + 1, len(words) - 1) if words[j].text == "-m"), None)
            if module is None:
                return []
            target = words[module + 1].text
            if target == API_SERVER:
                return [Server(line, env, words[module + 2:], env_unexpanded=unexpanded)]
            if target == CLI_MAIN and module + 2 < len(words) and words[module + 2].text == "serve":
                return [Server(line, env, words[module + 3:], env_unexpanded=unexpanded)]
            return []
        elif name in DOCKERS and i + 1 < len(words) and words[i + 1].text == "run":
            return docker_servers(words[i + 2:], variables, exported, env, line, stdin)
        elif name in SHELLS:
            return shell_servers(words[i + 1:], variables, exported, env, line, stdin)
        elif name in RUNNERS or (runner and (word.text.startswith("-") or not NAME.fullmatch(word.text))):
            runner = True
        elif not runner:
            return []
        i += 1
    return []


def shell_servers(words: list[Word], variables: dict, exported: set, env: dict, line: int, stdin: str | None) \
        -> list[Server]:
    """bash -c 'SCRIPT' (-lc, -ec, ...), or bash reading a here-document (bash -s <<EOF): the servers the script
    starts, in the environment bash was given (its exported variables and those given to it)."""
    inner = {**environment(variables, exported), **env}
    for i, word in enumerate(words):
        if re.fullmatch(r"-[a-z]*c[a-z]*", word.text) and i + 1 < len(words):
            return servers(words[i + 1].text, inner, set(inner), line - 1)
        if not word.text.startswith("-"):
            return []
    return [] if stdin is None else servers(stdin, inner, set(inner), line)


def docker_servers(words: list[Word], variables: dict, exported: set, env: dict, line: int, stdin: str | None) \
        -> list[Server]:
    """docker run [OPTIONS] IMAGE [ARGS]: -e/--env add to the environment; vLLM's OpenAI image runs `vllm serve ARGS`
    unless ARGS (or --entrypoint) name another command."""
    env, entrypoint, i = dict(env), None, 0
    while i < len(words) and words[i].text.startswith("-"):
        option, equals, value = words[i].text.partition("=")
        if option in DOCKER_FLAGS or re.fullmatch(r"-[dit]+", option) or option.startswith("--") and equals:
            if not equals:
                i += 1
                continue
        else:
            value = words[i + 1].text if i + 1 < len(words) else ""
            i += 1
        if option in ("-e", "--env"):
            name, has_value, setting = value.partition("=")
            if has_value:
                env[name] = setting
            elif name in variables:
                env[name] = variables[name]
        elif option == "--entrypoint":
            entrypoint = value
        i += 1
    if i >= len(words):
        return []
    image, args = words[i].text, words[i + 1:]
    inner = ([Word(entrypoint)] + args) if entrypoint else args
    if entrypoint or (args and basename(args[0].text) in {"vllm", "python", "python3", *SHELLS, *RUNNERS}):
        found = command_servers(inner, {**variables, **env}, set(env) | exported, line, stdin)
    elif VLLM_IMAGE.search(image):
        found = [Server(line, env, args)]
    else:
        found = []
    for server in found:
        server.image = image
    return found
