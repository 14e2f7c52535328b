"""The pages a newcomer follows, run as written: docs/tutorial.md and the key-value store's
README, every code block in page order on a real local cluster.

Each page starts its own cluster the way it tells the reader to (`make
cluster`, `kvstore up`: a real ZooKeeper, real bookie and replica processes),
in a directory of the test's own; every command, file and printed output is
the page's, with only what varies from run to run (ports, process ids, ledger
ids, times) told apart by `doc_blocks.Matcher`.  How blocks are marked is in
tests/integration/support/doc_blocks.py; a block without a mark fails
`test_every_block_is_marked` before anything runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .support.doc_blocks import Block, Matcher, UnmarkedBlock, marked_blocks
from .support.doc_runner import PageReader
from .support.tools import required_tool

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
KVSTORE_README = ROOT / "examples" / "kvstore" / "README.md"
PAGES = (TUTORIAL, KVSTORE_README)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_block_is_marked(page: Path) -> None:
    blocks = marked_blocks(page)
    assert blocks
    for block in blocks:
        if block.kind in ("run", "start"):
            assert block.commands(), f"{page}:{block.line}: a transcript without a command"


async def follow(page: Path, directory: Path) -> list[Block]:
    """Every block of `page` that is not skipped, followed in order; the blocks followed."""
    followed = [block for block in marked_blocks(page) if block.kind != "skip"]
    async with PageReader(directory) as reader:
        for block in followed:
            await reader.follow(block)
    return followed


@pytest.mark.anyio
@pytest.mark.integration
@pytest.mark.zookeeper
@pytest.mark.slow
async def test_tutorial_runs_as_written(tmp_path: Path) -> None:
    followed = await follow(TUTORIAL, tmp_path)
    assert {"file", "run", "start", "log", "output"} <= {block.kind for block in followed}


@pytest.mark.anyio
@pytest.mark.integration
@pytest.mark.zookeeper
@pytest.mark.slow
async def test_kvstore_readme_runs_as_written(tmp_path: Path) -> None:
    required_tool("redis-cli")
    followed = await follow(KVSTORE_README, tmp_path)
    assert {"run", "start", "python"} <= {block.kind for block in followed}


def test_an_unmarked_block_fails(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n<!-- test: run -->\n```\n$ true\n```\n\n```\n$ false\n```\n")
    with pytest.raises(UnmarkedBlock, match=r"page\.md:8: the block has no test instruction"):
        marked_blocks(page)


def test_placeholders_bind_once_and_must_agree() -> None:
    matcher = Matcher(venv_bin="/repo/.venv/bin")
    assert matcher.match("ready at 127.0.0.1:7001 pid=41234", "ready at 127.0.0.1:40123 pid=977")
    assert (
        matcher.translate("kill -9 41234 # 127.0.0.1:7001", str) == "kill -9 977 # 127.0.0.1:40123"
    )
    assert not matcher.match("leader 127.0.0.1:7001", "leader 127.0.0.1:40124")
    assert not matcher.match("other 127.0.0.1:7002", "other 127.0.0.1:40123"), "taken by 7001"
    assert matcher.match("12:00:00.000 took 9.6 s  in  73 ms", "04:51:07.123 took 11.0 s in 5 ms")
    assert not matcher.match("value after: 118", "value after: 119")
    assert matcher.match("bookie 127.0.0.1:7002", "bookie 127.0.0.1:39000")
    listed = "bookies: 127.0.0.1:7001, 127.0.0.1:7002"
    assert matcher.match(listed, "bookies: 127.0.0.1:39000, 127.0.0.1:40123"), "in port order"
    assert not matcher.match(listed, "bookies: 127.0.0.1:39000, 127.0.0.1:40124")
