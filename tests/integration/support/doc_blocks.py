"""The code blocks of a Markdown page, each with the instruction that says how a test runs it.

Every fenced block of a page the tests run carries an HTML comment on the
line before its fence (invisible when the page is rendered)::

    <!-- test: file NAME -->        save the block as NAME in the reader's directory
    <!-- test: python -->           run the block as a Python program; it must exit 0
    <!-- test: run -->              a shell transcript: each `$ command` runs to its end,
                                    the lines under it are its output (stdout and stderr)
    <!-- test: start until TEXT --> each `$ command` starts a process that keeps running
                                    (a terminal of its own), read until it prints a line
                                    holding TEXT; the lines under it are what it printed
    <!-- test: log of TEXT -->      these lines are among those the started process whose
                                    command holds TEXT printed, in this order
    <!-- test: log of TEXT after ctrl-c -->  the same, once Ctrl-C (SIGINT) stopped it
    <!-- test: output of TEXT -->   everything the started process whose command holds
                                    TEXT printed, once it ended by itself
    <!-- test: skip REASON -->      not run, for the reason given

A block without one is an error (`UnmarkedBlock`), so a new block cannot
silently go untested.

`Matcher` compares a line of the page with a line a program printed.  Only
what legitimately varies from run to run is not compared literally:

* placeholders, bound on first sight and then required to agree: ports
  (after `127.0.0.1:`, `-p ` and `port=`), process ids (`pid=`,
  `process_id:`, `kill -9 `) and ledger ids (`ledger_id=`, `ledger `); the
  page's value stands for the run's, both ways (`translate` turns a
  command or file of the page into the run's);
* times of day (`03:03:40.434`) and durations (`73 ms`, `9.6 s`);
* the path of the reader's `.venv/bin` (`/home/you/rsm/.venv/bin`, and
  `.venv/bin/` that starts a command run from the repository);
* runs of spaces, so that a column moved by a port of another width still
  matches;
* the order of a line's list of addresses (`bookies: 127.0.0.1:3181, ...`),
  which follows their ports: the ports it lists must be bound already.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

MARKER = re.compile(r"^<!--\s*test:\s*(?P<kind>[a-z]+)\s*(?P<argument>.*?)\s*-->$")
FENCE = re.compile(r"^(?P<fence>```|~~~)(?P<info>[\w+-]*)\s*$")
KINDS = ("file", "python", "run", "start", "log", "output", "skip")
PROMPT = "$ "
READER_VENV_BIN = "/home/you/rsm/.venv/bin"
"""Where the pages show the repository's `.venv/bin` (the reader's own path varies)."""
RELATIVE_VENV_BIN = re.compile(r"(?<![\w/])\.venv/bin/")
"""`.venv/bin/` in a command run from the repository."""
AFTER_CTRL_C = " after ctrl-c"


class UnmarkedBlock(AssertionError):
    """A code block has no test instruction, or one that is not understood."""


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced block of a page and its instruction."""

    line: int
    """The line of its opening fence (1-based)."""
    kind: str
    argument: str
    text: str

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()

    def commands(self) -> list[tuple[str, list[str]]]:
        """A transcript's `$ command` lines, each with the output lines under it."""
        steps: list[tuple[str, list[str]]] = []
        for line in self.lines:
            if line.startswith(PROMPT):
                steps.append((line[len(PROMPT) :], []))
            elif steps:
                steps[-1][1].append(line)
            else:
                raise UnmarkedBlock(f"line {self.line}: output before any `$ command`")
        return steps

    @property
    def process(self) -> str:
        """For `log` and `output`: the text that names the started process."""
        argument = self.argument.removeprefix("of ").removesuffix(AFTER_CTRL_C)
        return argument.strip()

    @property
    def after_ctrl_c(self) -> bool:
        return self.argument.endswith(AFTER_CTRL_C)


def marked_blocks(page: Path) -> list[Block]:
    """The page's fenced blocks with their instructions; `UnmarkedBlock` if one has none."""
    lines = page.read_text().splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        start = index
        end = next(
            (
                later
                for later in range(start + 1, len(lines))
                if lines[later].strip() == opening["fence"]
            ),
            None,
        )
        if end is None:
            raise UnmarkedBlock(f"{page}:{start + 1}: the block is never closed")
        previous = lines[start - 1].strip() if start > 0 else ""
        marker = MARKER.match(previous)
        if marker is None or marker["kind"] not in KINDS:
            raise UnmarkedBlock(
                f"{page}:{start + 1}: the block has no test instruction on the line before "
                f"it (one of {', '.join(KINDS)}; see tests/integration/support/doc_blocks.py)"
            )
        if marker["kind"] in ("file", "start", "log", "output", "skip") and not marker["argument"]:
            raise UnmarkedBlock(f"{page}:{start + 1}: `{marker['kind']}` needs an argument")
        blocks.append(
            Block(
                line=start + 1,
                kind=marker["kind"],
                argument=marker["argument"],
                text="\n".join(lines[start + 1 : end]) + "\n",
            )
        )
        index = end + 1
    return blocks


# --- matching ---------------------------------------------------------------------------------

PLACEHOLDERS: dict[str, re.Pattern[str]] = {
    "port": re.compile(r"(?:(?<=127\.0\.0\.1:)|(?<=-p )|(?<=port=))(\d+)"),
    "pid": re.compile(r"(?:(?<=pid=)|(?<=process_id:)|(?<=kill -9 ))(\d+)"),
    "ledger": re.compile(r"(?:(?<=ledger_id=)|(?<=ledger ))(\d+)"),
}
ADDRESS_LIST = re.compile(r"(?P<head>[\w ]+: )(?P<items>127\.0\.0\.1:\d+(?:, 127\.0\.0\.1:\d+)+)")
"""A line listing addresses (`bookies: 127.0.0.1:3181, ...`): in the order of their ids,
which follows the ports."""
VARYING = re.compile(
    r"(?P<time>\b\d\d:\d\d:\d\d\.\d{3}\b)"
    r"|(?P<duration>\b\d+(?:\.\d+)? (?:ms|s)\b)"
    r"|(?P<spaces> {2,})"
)
VARYING_PATTERNS = {
    "time": r"\d\d:\d\d:\d\d\.\d{3}",
    "duration": r"\d+(?:\.\d+)? (?:ms|s)",
    "spaces": r" +",
}


@dataclass(slots=True)
class Matcher:
    """Placeholder bindings (the page's value -> the run's) and the comparison of lines."""

    venv_bin: str
    bound: dict[str, dict[str, str]] = field(
        default_factory=lambda: {kind: {} for kind in PLACEHOLDERS}
    )

    def bind(self, kind: str, shown: str, actual: str) -> None:
        known = self.bound[kind]
        assert known.get(shown, actual) == actual, (kind, shown, known[shown], actual)
        assert actual not in known.values() or known.get(shown) == actual, (kind, shown, actual)
        known[shown] = actual

    def translate(self, text: str, allocate: Callable[[str, str], str]) -> str:
        """The page's `text` (a command, a file) with the run's values; an unbound
        placeholder gets `allocate(kind, shown)`, bound from then on."""

        def replace(kind: str) -> Callable[[re.Match[str]], str]:
            def one(match: re.Match[str]) -> str:
                shown = match.group(1)
                if shown not in self.bound[kind]:
                    self.bind(kind, shown, allocate(kind, shown))
                return self.bound[kind][shown]

            return one

        for kind, pattern in PLACEHOLDERS.items():
            text = pattern.sub(replace(kind), text)
        text = text.replace(READER_VENV_BIN, self.venv_bin)
        return RELATIVE_VENV_BIN.sub(self.venv_bin + "/", text)

    def match(self, shown: str, printed: str) -> bool:
        """Whether the page's line `shown` matches the printed line; binds what it learns."""
        listed = ADDRESS_LIST.fullmatch(shown.rstrip())
        if listed is not None:
            return self._match_list(listed, printed.rstrip())
        pattern, slots = self._pattern(shown.rstrip())
        found = re.fullmatch(pattern, printed.rstrip())
        if found is None:
            return False
        learned = {(kind, value): found.group(name) for name, (kind, value) in slots.items()}
        for (kind, _value), actual in learned.items():
            if actual in self.bound[kind].values():
                return False
        for (kind, value), actual in learned.items():
            self.bind(kind, value, actual)
        return True

    def _match_list(self, listed: re.Match[str], printed: str) -> bool:
        found = ADDRESS_LIST.fullmatch(printed)
        if found is None or found["head"] != listed["head"]:
            return False
        ports = self.bound["port"]
        shown = [ports.get(port, "?") for port in re.findall(r":(\d+)", listed["items"])]
        return sorted(shown) == sorted(re.findall(r":(\d+)", found["items"]))

    def _pattern(self, shown: str) -> tuple[str, dict[str, tuple[str, str]]]:
        tokens: list[tuple[int, int, str]] = []
        for kind, placeholder in PLACEHOLDERS.items():
            tokens += [
                (found.start(1), found.end(1), kind) for found in placeholder.finditer(shown)
            ]
        tokens += [
            (found.start(), found.end(), str(found.lastgroup)) for found in VARYING.finditer(shown)
        ]
        tokens.sort()
        parts: list[str] = []
        slots: dict[str, tuple[str, str]] = {}
        names: dict[tuple[str, str], str] = {}
        position = 0
        for start, end, kind in tokens:
            if start < position:
                continue
            parts.append(re.escape(shown[position:start]))
            value = shown[start:end]
            if kind in VARYING_PATTERNS:
                parts.append(VARYING_PATTERNS[kind])
            elif value in self.bound[kind]:
                parts.append(re.escape(self.bound[kind][value]))
            elif (kind, value) in names:
                parts.append(f"(?P={names[kind, value]})")
            else:
                name = names[kind, value] = f"slot{len(names)}"
                slots[name] = (kind, value)
                parts.append(rf"(?P<{name}>\d+)")
            position = end
        parts.append(re.escape(shown[position:]))
        pattern = "".join(parts).replace(re.escape(READER_VENV_BIN), re.escape(self.venv_bin))
        # A program the output names as `.venv/bin/...` (relative to the repository, where the
        # reader runs it) is the test's virtualenv's, by whatever path the test runs it.
        relative = re.escape(".venv/bin/")
        either = f"(?:{relative}|{re.escape(self.venv_bin + '/')})"
        return pattern.replace(relative, either), slots


def mismatch(shown: list[str], printed: list[str]) -> str:
    """A readable report of an expected output and what was printed instead."""
    return (
        "the page shows:\n"
        + "\n".join(f"    {line}" for line in shown)
        + "\nthe run printed:\n"
        + "\n".join(f"    {line}" for line in printed)
    )
