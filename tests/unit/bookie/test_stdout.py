"""`checking_stdout`, `program_main`: a command whose output cannot be written says so in
one line and ends with status 1 (quietly for a reader that left); any other error stays the
command's; Ctrl-C ends it with 130, without a traceback."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

import pytest

from bookie.tools.stdout import (
    EXIT_INTERRUPTED,
    EXIT_UNWRITABLE,
    checking_stdout,
    program_main,
)

pytestmark = pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")

BIG = "x" * 100_000
"""More than a text stream buffers: its write fails inside the command."""


@contextlib.contextmanager
def standard_streams(stdout: TextIO) -> Iterator[io.StringIO]:
    """`stdout` as sys.stdout and a fresh sys.stderr, whose text the block gets (pytest sets
    its own streams just before a test runs, so a fixture could not)."""
    stderr = io.StringIO()
    with contextlib.ExitStack() as stack:
        saved = sys.stdout, sys.stderr
        stack.callback(setattr, sys, "stdout", saved[0])
        stack.callback(setattr, sys, "stderr", saved[1])
        sys.stdout, sys.stderr = stdout, stderr
        yield stderr


@contextlib.contextmanager
def full_disk() -> Iterator[tuple[TextIO, io.StringIO]]:
    with Path("/dev/full").open("w") as full, standard_streams(full) as stderr:
        yield full, stderr


@contextlib.contextmanager
def reader_that_left() -> Iterator[io.StringIO]:
    reader, writer = os.pipe()
    os.close(reader)
    with os.fdopen(writer, "w") as pipe, standard_streams(pipe) as stderr:
        yield stderr


def printing(text: str, status: int = 0) -> Callable[[], int]:
    def command() -> int:
        print(text)
        return status

    return command


@pytest.mark.parametrize("text", ["a short line", BIG], ids=["fails at the flush", "fails inside"])
def test_a_full_disk_is_one_line_and_status_1(text: str) -> None:
    with full_disk() as (full, stderr):
        assert checking_stdout("tool: ", printing(text)) == EXIT_UNWRITABLE
        assert sys.stdout is full
        full.write(BIG)
        full.flush()  # what the buffer held went to /dev/null: nothing fails at exit
    assert stderr.getvalue() == "tool: OSError: [Errno 28] No space left on device\n"


@pytest.mark.parametrize("text", ["a short line", BIG], ids=["fails at the flush", "fails inside"])
def test_a_reader_that_left_ends_it_quietly(text: str) -> None:
    with reader_that_left() as stderr:
        assert checking_stdout("tool: ", printing(text)) == EXIT_UNWRITABLE
    assert stderr.getvalue() == ""


def test_a_command_that_reports_the_failure_itself_is_not_reported_twice() -> None:
    def reporting() -> int:
        try:
            printing(BIG)()
        except OSError:
            print("tool: said once", file=sys.stderr)
            return 7
        return 0

    with full_disk() as (_, stderr):
        assert checking_stdout("tool: ", reporting) == 7
    assert stderr.getvalue() == "tool: said once\n"


def test_another_os_error_is_not_taken_for_the_output() -> None:
    def failing() -> int:
        raise FileNotFoundError("not the output")

    with full_disk() as (full, _):
        with pytest.raises(FileNotFoundError, match="not the output"):
            checking_stdout("tool: ", failing)
        assert sys.stdout is full


def test_a_written_output_keeps_the_command_status(tmp_path: Path) -> None:
    with (tmp_path / "out").open("w") as out, standard_streams(out) as stderr:
        assert checking_stdout("tool: ", printing("hello", status=3)) == 3
    assert (tmp_path / "out").read_text() == "hello\n"
    assert stderr.getvalue() == ""


@pytest.mark.parametrize("grouped", [False, True], ids=["alone", "in a task group's group"])
def test_ctrl_c_is_status_130_without_a_traceback(grouped: bool) -> None:
    def interrupted() -> int:
        if grouped:
            raise BaseExceptionGroup("unhandled errors in a TaskGroup", [KeyboardInterrupt()])
        raise KeyboardInterrupt

    with full_disk() as (_, stderr):
        assert program_main("tool: ", interrupted) == EXIT_INTERRUPTED
    assert stderr.getvalue() == ""


def test_a_program_s_output_is_checked() -> None:
    with full_disk() as (_, stderr):
        assert program_main("tool: ", printing("a line")) == EXIT_UNWRITABLE
    assert stderr.getvalue() == "tool: OSError: [Errno 28] No space left on device\n"
