"""The documentation's commands, run as written, so that they cannot rot.

Every fenced ```bash / ```sh block of README.md, docs/, jetson/, calibration/ and engines/ runs in
bash (`set -euo pipefail`), verbatim, in a scratch directory laid out like a checkout after
`make demo`: the repository's files, `.venv` = the environment running these tests, and
`engines/smollm2-135m-demo` = the test session's engine (built by tests/conftest.py the way `make demo`
builds it). Two things differ from a user's shell, both stated here: the socket path /tmp/planner.sock
becomes a private one (parallel runs, or a user's own daemon, would collide on it), and `curl` gets
`--fail-with-body`, so that an HTTP error fails the block instead of printing a JSON error.

A block preceded by `<!-- docs-test: orin: REASON -->` or `<!-- docs-test: skip: REASON -->` is not
run here; it is reported as skipped with that reason. Whether run or not, every `orin-llm` command in
the docs (in blocks and in inline code) is parsed by the real CLI, so a renamed option or command
fails here, and every repository path the docs name must exist.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
import typer

from orin_llm.cli import app

from .conftest import ROOT
from .server.conftest import short_dir

DOCS = sorted({ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("jetson/**/*.md"),
               *ROOT.glob("calibration/*.md"), *ROOT.glob("engines/*.md")})
SHELLS = ("bash", "sh", "shell")
MARK = re.compile(r"<!--\s*docs-test:\s*(orin|skip):\s*(.+?)\s*-->")
SOCKET = "/tmp/planner.sock"
OPERATORS = ("&", "&&", "||", "|", ";")
NOT_OURS = {ROOT / "docs/trtllm-0.12-jetson.md"}  # every path there is one of NVIDIA/TensorRT-LLM's


def tracked_top() -> tuple[str, ...]:
    """The repository's top-level directories (what a path in the docs may start with)."""
    try:
        names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        return tuple(sorted({n.split("/")[0] for n in names.split() if "/" in n and not n.startswith(".")}))
    except (OSError, subprocess.CalledProcessError):  # not a git checkout
        return tuple(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("."))


TOP = tracked_top()


@dataclass
class Block:
    doc: Path
    line: int  # of the opening fence, 1-based
    text: str
    skip: str  # why it is not run here ("" = it runs)

    @property
    def id(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def blocks() -> list[Block]:
    out = []
    for doc in DOCS:
        lines = doc.read_text().splitlines()
        i = 0
        while i < len(lines):
            m = re.match(r"^```(\w*)\s*$", lines[i])
            if not m:
                i += 1
                continue
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            if m.group(1) in SHELLS:
                before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
                mark = MARK.search(before)
                skip = ""
                if mark:
                    skip = f"{'needs an Orin' if mark.group(1) == 'orin' else 'not run here'}: {mark.group(2)}"
                out.append(Block(doc, i + 1, "\n".join(lines[i + 1:end]), skip))
            i = end + 1
    return out


BLOCKS = blocks()


def commands(text: str) -> list[list[str]]:
    """The `orin-llm ...` invocations in shell text, as argument lists (what follows `orin-llm` up to a
    shell operator or a comment)."""
    out = []
    for line in text.replace("\\\n", " ").splitlines():
        try:
            words = shlex.split(line, comments=True, posix=True)
        except ValueError:
            continue
        for i, w in enumerate(words):
            at_start = i == 0 or words[i - 1] in OPERATORS + ("sudo",)
            if at_start and (w == "orin-llm" or w.endswith("/bin/orin-llm")):
                args = []
                for a in words[i + 1:]:
                    if a in OPERATORS or a.startswith((">", "2>", "<")):
                        break
                    args.append(a)
                out.append(args)
    return out


def inline_code(doc: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
    return re.findall(r"`([^`\n]+)`", text)


def parse(args: list[str], complete: bool) -> None:
    """Parse an `orin-llm` command line with the real CLI, running nothing: click.UsageError if a
    command, an option or a value does not exist, or (complete) a required one is missing. Inline
    code may name a command without its required options (`orin-llm memory`)."""
    cmd: click.Command = typer.main.get_command(app)
    try:
        ctx = cmd.make_context("orin-llm", list(args))
        while isinstance(cmd, click.Group) and ctx.protected_args + ctx.args:
            name, cmd, rest = cmd.resolve_command(ctx, ctx.protected_args + ctx.args)
            ctx = cmd.make_context(name, rest, parent=ctx)
    except click.MissingParameter:
        if complete:
            raise


def all_commands() -> list[tuple[str, bool, list[str]]]:
    """(where, complete, args) for every `orin-llm` command in the docs: fenced ones are complete."""
    found = [(b.id, True, args) for b in BLOCKS for args in commands(b.text)]
    for doc in DOCS:
        found += [(str(doc.relative_to(ROOT)), False, args) for code in inline_code(doc)
                  if code.startswith("orin-llm ") for args in commands(code)]
    return found


def test_the_docs_have_commands_to_check():
    ids = {b.id.split(":")[0] for b in BLOCKS}
    assert {"README.md", "jetson/GUIDE.md", "jetson/systemd/README.md", "calibration/README.md"} <= ids
    assert len(all_commands()) > 30


@pytest.mark.parametrize("where, complete, args", all_commands(),
                         ids=[f"{w} {' '.join(a)[:50]}" for w, _, a in all_commands()])
def test_every_orin_llm_command_in_the_docs_parses(where, complete, args):
    try:
        parse(args, complete)
    except (click.exceptions.Exit, click.exceptions.NoArgsIsHelpError):  # --help, or the bare command
        pass
    except click.UsageError as e:
        pytest.fail(f"{where}: `orin-llm {' '.join(args)}`: {e.format_message()}")


def test_paths_the_docs_name_exist():
    tops = "|".join(map(re.escape, TOP))
    pattern = re.compile(rf"(?<![\w./-])((?:{tops})/[\w./-]*[\w/])")
    missing = []
    for doc in sorted(set(DOCS) - NOT_OURS):
        for code in inline_code(doc) + [b.text for b in BLOCKS if b.doc == doc]:
            for path in pattern.findall(code):
                if path.startswith(("engines/", "bench-out")) and not (ROOT / path).exists():
                    continue  # build outputs: not in the repository
                if not (ROOT / path).exists() and not any(ROOT.glob(path)):
                    missing.append(f"{doc.relative_to(ROOT)}: {path}")
    assert not missing, missing


def test_nothing_in_the_repository_points_outside_it():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    offenders = []
    for name in tracked.split():
        path = ROOT / name
        if path.suffix in (".png", ".safetensors", ".gguf") or not path.is_file() or path == Path(__file__):
            continue
        text = path.read_text(errors="replace")
        for needle in ("../shared", "DESIGN.md", "/work/"):
            if needle in text:
                offenders.append(f"{name}: {needle}")
    assert not offenders, offenders


def scratch_checkout(engine_dir: Path) -> Path:
    """A directory laid out like a checkout after `make demo`, without touching the real one."""
    where = short_dir()
    for entry in ROOT.iterdir():
        if entry.name in ("engines", "homes", "bench-out") or entry.name.startswith("."):
            continue
        if entry.name == "calibration":  # calibration/README.md regenerates its files in place
            shutil.copytree(entry, where / entry.name)
        else:
            (where / entry.name).symlink_to(entry)
    (where / ".venv").symlink_to(Path(sys.prefix))
    (where / "engines").mkdir()
    (where / "engines" / "smollm2-135m-demo").symlink_to(engine_dir)
    return where


@pytest.mark.full
@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_the_shell_blocks_run_as_written(block, engine_dir):
    if block.skip:
        pytest.skip(f"{block.id}: {block.skip}")
    if not (Path(sys.prefix) / "bin" / "activate").is_file():
        pytest.skip("the tests run outside a virtual environment: no .venv/bin/activate to source")
    where = scratch_checkout(engine_dir)
    text = block.text.replace(SOCKET, str(where / "planner.sock"))
    script = "set -euo pipefail\ncurl() { command curl --fail-with-body --silent --show-error \"$@\"; echo; }\n" + text
    env = {k: v for k, v in os.environ.items() if k not in ("ORIN_LLM_SOCKET", "VIRTUAL_ENV")}
    env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", PATH=f"{Path(sys.prefix) / 'bin'}:{env['PATH']}")
    proc = subprocess.Popen(["bash", "-c", script], cwd=where, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=900)
    finally:
        try:  # a daemon the block started in the background and did not stop (it failed before `kill`)
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, f"{block.id} failed ({proc.returncode}):\n{out[-6000:]}"
    assert "Traceback" not in out, out[-6000:]
