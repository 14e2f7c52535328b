"""A reader following a Markdown page: its marked blocks (doc_blocks.py) run in page order.

`PageReader` is an `async with` block.  It works in a directory of its own
(the reader's: files are saved there, commands run there) with the
interpreter's `bin` directory first on `PATH`, as the pages ask
(`.venv/bin` on your `PATH`).  A transcript's commands run on a terminal
(a pseudo-terminal), as typed ones do, since some programs print otherwise
to a pipe (redis-cli quotes strings only on a terminal).  Started processes
write to a pipe, with `PYTHONUNBUFFERED=1` so that Python programs print
their lines as a terminal would show them.  Commands run in `bash`; a
command the pages show as a `make` target runs what the target runs
(`ALIASES`), without the target's bootstrap.

Each started process is a `ReplicaProcess` (rsm_processes.py), whatever it
runs: its stdout and stderr are read as lines as they come (and kept in
`terminal-N.log` of the reader's directory); waits are on its lines or its
exit, with a timeout.
Leaving the block sends Ctrl-C (SIGINT) to every process still running,
last started first, as the reader would, and checks that each stops with
status 0 (SIGKILL past the wait, and the check fails).
"""

from __future__ import annotations

import contextlib
import os
import pty
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import anyio
import anyio.abc
import anyio.to_thread

from bookie.local.zookeeper import free_port, port_is_free

from .doc_blocks import Block, Matcher, mismatch
from .rsm_processes import ReplicaProcess

WAIT_S = 60.0
"""Bound on a command run to its end."""
ALIASES = {"make cluster": "python -m bookie.local.cluster"}


class PageReader:
    """Runs a page's blocks in order (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.venv_bin = str(Path(sys.executable).parent)
        self.matcher = Matcher(self.venv_bin)
        self.terminals: list[ReplicaProcess] = []
        self.environment = {
            **os.environ,
            "PATH": f"{self.venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1",
        }
        self._ports: set[int] = set()
        self._task_group: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> PageReader:
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        assert self._task_group is not None
        statuses: dict[str, int] = {}
        with anyio.CancelScope(shield=True):
            for terminal in reversed(self.terminals):
                if terminal.process.returncode is None:
                    statuses[terminal.name] = await self._interrupt(terminal)
            for terminal in self.terminals:
                await terminal.process.aclose()
        await self._task_group.__aexit__(exc_type, exc, traceback)
        if exc is None:
            failed = {command: status for command, status in statuses.items() if status != 0}
            assert not failed, f"not stopped cleanly by Ctrl-C: {failed}"
        return None

    async def _interrupt(self, terminal: ReplicaProcess) -> int:
        terminal.process.send_signal(signal.SIGINT)
        try:
            return await terminal.wait_exit()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                terminal.process.kill()
            await terminal.process.wait()
            return -signal.SIGKILL

    # --- blocks -------------------------------------------------------------------------------

    async def follow(self, block: Block) -> None:
        """Do what `block` says (`skip` blocks are not passed here)."""
        where = f"block at line {block.line}"
        if block.kind == "file":
            (self.directory / block.argument).write_text(self.translate(block.text))
        elif block.kind == "python":
            script = self.directory / f"block-{block.line}.py"
            script.write_text(self.translate(block.text))
            printed, status = await self._run(f"python {script.name}")
            assert status == 0, f"{where} failed:\n" + "\n".join(printed)
        elif block.kind == "run":
            for command, shown in block.commands():
                printed, _ = await self._run(self.translate(command))
                self.expect(shown, printed, f"{where}, `{command}`")
        elif block.kind == "start":
            until = block.argument.removeprefix("until ").strip()
            for command, shown in block.commands():
                terminal = await self._start(self.translate(command))
                await terminal.wait_lines(
                    lambda lines: any(until in line for line in lines), repr(until)
                )
                if shown:
                    printed = terminal.lines
                    end = next(n for n, line in enumerate(printed) if until in line)
                    self.expect(shown, printed[: end + 1], f"{where}, `{command}`")
        elif block.kind == "log":
            terminal = self.terminal(block.process)
            if block.after_ctrl_c:
                assert await self._interrupt(terminal) == 0, terminal.tail()
            await terminal.wait_lines(self.among(block.lines), f"the lines of the {where}")
        elif block.kind == "output":
            terminal = self.terminal(block.process)
            status = await terminal.wait_exit()
            assert status == 0, f"{where}: `{terminal.name}` exited {status}:\n{terminal.tail()}"
            self.expect(block.lines, terminal.lines, where)
        else:
            raise AssertionError(f"{where}: cannot follow a `{block.kind}` block")

    def translate(self, text: str) -> str:
        for shown, actual in ALIASES.items():
            if text.startswith(shown):
                text = actual + text[len(shown) :]
        return self.matcher.translate(text, self._allocate)

    def _allocate(self, kind: str, shown: str) -> str:
        assert kind == "port", f"the page uses {kind} {shown} before showing where it comes from"
        port = int(shown)
        if port in self._ports or not port_is_free(port):
            port = free_port(taken=self._ports)
        self._ports.add(port)
        return str(port)

    def terminal(self, text: str) -> ReplicaProcess:
        """The started process whose (translated) command holds `text`."""
        wanted = self.translate(text)
        found = [terminal for terminal in self.terminals if wanted in terminal.name]
        assert len(found) == 1, f"{len(found)} started commands hold {wanted!r}"
        return found[0]

    def expect(self, shown: list[str], printed: list[str], where: str) -> None:
        shown = _trimmed(shown)
        printed = _trimmed(printed)
        same = len(shown) == len(printed) and all(
            self.matcher.match(line, out) for line, out in zip(shown, printed, strict=True)
        )
        assert same, f"{where}: {mismatch(shown, printed)}"

    def among(self, shown: list[str]) -> Callable[[list[str]], bool]:
        """Whether printed lines hold the `shown` ones in order (others between them);
        asked again as lines come, it goes on from the lines it matched before."""
        matched = 0
        position = 0

        def found(printed: list[str]) -> bool:
            nonlocal matched, position
            while matched < len(shown) and position < len(printed):
                if self.matcher.match(shown[matched], printed[position]):
                    matched += 1
                position += 1
            return matched == len(shown)

        return found

    # --- processes ----------------------------------------------------------------------------

    async def _run(self, command: str) -> tuple[list[str], int]:
        """Run `command` to its end on a terminal of its own; its lines and exit status."""
        primary, secondary = pty.openpty()
        try:
            with anyio.fail_after(WAIT_S):
                try:
                    process = await anyio.open_process(
                        ["bash", "-c", command],
                        cwd=self.directory,
                        env=self.environment,
                        stdin=subprocess.DEVNULL,
                        stdout=secondary,
                        stderr=secondary,
                    )
                finally:
                    os.close(secondary)
                async with process:
                    output = await anyio.to_thread.run_sync(
                        _read_to_end, primary, abandon_on_cancel=True
                    )
                    status = await process.wait()
        finally:
            os.close(primary)
        return output.decode(errors="replace").splitlines(), status

    async def _start(self, command: str) -> ReplicaProcess:
        assert self._task_group is not None
        process = await anyio.open_process(
            ["bash", "-c", f"exec {command}"],
            cwd=self.directory,
            env=self.environment,
            stdin=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        log_file = self.directory / f"terminal-{len(self.terminals) + 1}.log"
        terminal = ReplicaProcess(command, "", process, log_file)
        self.terminals.append(terminal)
        self._task_group.start_soon(terminal.read_log)
        return terminal


def _read_to_end(primary: int) -> bytes:
    """What a terminal showed, once every process holding it closed it."""
    chunks: list[bytes] = []
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # EIO: no process holds the terminal any more
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _trimmed(lines: list[str]) -> list[str]:
    """Without trailing blank lines."""
    end = len(lines)
    while end and not lines[end - 1].strip():
        end -= 1
    return lines[:end]
