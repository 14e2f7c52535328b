"""The long fuzz run (`make fuzz`): Hypothesis with many examples, then atheris where it installs.

    python scripts/fuzz.py [--seconds-per-target N] [--examples N] [--only TARGET ...]
    python scripts/fuzz.py --write-seed-corpus

The targets and their contract are those of tests/fuzz/targets.py: any bytes
give a value or the decoder's own error.  First the fuzz tests run with
`FUZZ_PROFILE=long` (`--examples` per test).  Then, when `atheris` imports,
each target gets `--seconds-per-target` of coverage-guided fuzzing (libFuzzer)
in its own process, starting from the target's corpus (tests/fuzz/corpus/<target>/,
read only); new inputs go to build/fuzz/corpus/<target>/ and anything that
breaks the contract (another exception, more than 5 s on one input, more than
2 GiB of memory) to build/fuzz/crashes/<target>-*.  A crash found that way
belongs in tests/fuzz/test_regressions.py, its bytes inline, and its input in
the corpus.

`--write-seed-corpus` writes each target's seeds (valid encodings) into its
corpus directory, named by their SHA-256.

Exit status: 0 when nothing broke the contract, 1 otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "fuzz" / "corpus"
BUILD = ROOT / "build" / "fuzz"
_TIMEOUT_S = 5
_RSS_LIMIT_MB = 2048


def _environment(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'examples'}", **extra}


def _hypothesis(examples: int, only: list[str]) -> bool:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/fuzz"]
    if only:
        command += ["-k", " or ".join(only)]
    environment = _environment(FUZZ_PROFILE="long", FUZZ_EXAMPLES=str(examples))
    return subprocess.run(command, cwd=ROOT, env=environment, check=False).returncode == 0


def _atheris(target: str, seconds: int) -> bool:
    found = BUILD / "corpus" / target
    found.mkdir(parents=True, exist_ok=True)
    crashes = BUILD / "crashes"
    crashes.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        __file__,
        "--atheris-target",
        target,
        f"-max_total_time={seconds}",
        f"-timeout={_TIMEOUT_S}",
        f"-rss_limit_mb={_RSS_LIMIT_MB}",
        f"-artifact_prefix={crashes}/{target}-",
        str(found),
        str(CORPUS / target),
    ]
    print(f"fuzz: atheris on {target} for {seconds} s", flush=True)
    return subprocess.run(command, cwd=ROOT, env=_environment(), check=False).returncode == 0


def _run_atheris_target(target_name: str, libfuzzer_arguments: list[str]) -> None:
    """In the child process: fuzz one target under libFuzzer (never returns)."""
    atheris = importlib.import_module("atheris")
    with atheris.instrument_imports(include=["bookie", "rsm", "kvstore"]):
        targets = importlib.import_module("tests.fuzz.targets")
    target = targets.TARGETS[target_name]

    def one_input(data: bytes) -> None:
        try:
            target.run(data)
        except target.errors:
            return

    atheris.Setup([sys.argv[0], *libfuzzer_arguments], one_input)
    atheris.Fuzz()


def _write_seed_corpus() -> None:
    targets = importlib.import_module("tests.fuzz.targets")
    for name, target in targets.TARGETS.items():
        directory = CORPUS / name
        directory.mkdir(parents=True, exist_ok=True)
        for seed in target.seeds:
            (directory / f"seed-{hashlib.sha256(seed).hexdigest()[:16]}").write_bytes(seed)


def main() -> int:
    parser = argparse.ArgumentParser(description="The long fuzz run of every decoder.")
    parser.add_argument("--seconds-per-target", type=int, default=60, metavar="N")
    parser.add_argument("--examples", type=int, default=20_000, metavar="N")
    parser.add_argument("--only", nargs="*", default=[], metavar="TARGET")
    parser.add_argument("--write-seed-corpus", action="store_true")
    parser.add_argument("--atheris-target", help=argparse.SUPPRESS)
    arguments, libfuzzer_arguments = parser.parse_known_args()
    sys.path[:0] = [str(ROOT), str(ROOT / "examples")]
    if arguments.atheris_target:
        _run_atheris_target(arguments.atheris_target, libfuzzer_arguments)
        return 0
    if libfuzzer_arguments:
        parser.error(f"unknown arguments {libfuzzer_arguments}")
    if arguments.write_seed_corpus:
        _write_seed_corpus()
        return 0
    ok = _hypothesis(arguments.examples, arguments.only)
    if importlib.util.find_spec("atheris") is None:
        print(
            "fuzz: atheris is not installed for this Python (pip install atheris); "
            "the Hypothesis run above is the long run",
            flush=True,
        )
        return 0 if ok else 1
    names = sorted(path.name for path in CORPUS.iterdir() if path.is_dir())
    for name in arguments.only or names:
        ok = _atheris(name, arguments.seconds_per_target) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
