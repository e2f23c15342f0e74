"""The results page's building blocks (results_page.py): a goal table's `Row` and its lines, the number
formats, a committed run JSON with where it ran (`Run`, `load`), and a section's lines around a table."""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[2]



PAGE = "docs/BENCHMARKS.md"



BENCH = "docs/bench"



NOTES = "docs/notes/benchmarks-lab-notes.md"


@dataclass
class Row:
    """One line of a goal table: `ours` and `anchor` are formatted; `met` None = the row has no goal."""
    what: str
    goal: str
    ours: str
    anchor: str
    met: Optional[bool] = None


def verdict(met: Optional[bool]) -> str:
    return "—" if met is None else "yes" if met else "**no**"


def table(anchor: str, rows: list[Row]) -> list[str]:
    lines = [f"| | goal | ours | {anchor} | met |", "|---|---|---|---|---|"]
    return lines + [f"| {r.what} | {r.goal} | {r.ours} | {r.anchor} | {verdict(r.met)} |" for r in rows]


def ms(x: float) -> str:
    return f"{x:,.0f} ms" if x >= 100 else f"{x:.1f} ms"


def duration(seconds: float) -> str:
    if seconds < 1 and seconds != int(seconds):  # a daemon's first answer: milliseconds say it
        return f"{seconds * 1e3:.0f} ms"
    if seconds < 60:
        return f"{seconds:.0f} s" if seconds >= 10 or seconds == int(seconds) else f"{seconds:.1f} s"
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s:02d} s" if s else f"{m} min"



KEEP = "\x00"  # a space inside `code`, which a line break must not split (tests/test_docs.py reads code per line)


def prose(text: str) -> list[str]:
    """Text wrapped like the rest of the page, ending with a full stop (or a colon), never broken inside `code`."""
    text = " ".join(text.split())
    text = text if text.endswith((".", ":")) else text + "."
    text = re.sub(r"`[^`]+`", lambda m: m.group(0).replace(" ", KEEP), text)
    lines = textwrap.wrap(text, 110, break_long_words=False, break_on_hyphens=False)
    return [line.replace(KEEP, " ") for line in lines]


def ratio(x: float) -> str:
    return f"{x:.0f}×" if x >= 10 else f"{x:.1f}×"


def _pct(x: Optional[float]) -> str:
    return "—" if x is None else f"{x:.0%}"


@dataclass
class Run:
    """A committed run JSON and where it ran (the JSON's own record first, else runs.json's)."""
    rel: str
    data: dict
    meta: dict
    machines: dict

    @property
    def commit(self) -> str:
        # commit_override: a copy of the tree run elsewhere can carry a stale .git (the GPU runs did)
        return (self.meta.get("commit_override") or self.data.get("machine", {}).get("commit")
                or self.meta.get("commit") or "not recorded")

    @property
    def machine(self) -> str:
        """A name from runs.json's machines (the page lists them), else what the JSON recorded."""
        m = self.data.get("machine", {})
        if (key := self.meta.get("machine")):
            return f"`{key}`"
        return f"{m.get('cpu', 'an unrecorded CPU')}, {m.get('cpu_count', '?')} cores"

    def line(self) -> str:
        m = self.data.get("machine") or self.data.get("stages", {}).get("env", {})  # (gpu.json: its env stage)
        when = self.data.get("utc", self.meta.get("utc", "?")).replace("T", " ").removesuffix("Z")[:16]
        return "\n".join(prose(f"Ran {when} UTC at `{self.commit}` on {self.machine} (Python {m.get('python', '?')}, "
                                f"torch {m.get('torch', '?')}): `{BENCH}/{self.rel}`"))


def load(root: Path, rel: str, runs: dict) -> Run:
    return Run(rel, json.loads((root / BENCH / rel).read_text()), runs["runs"].get(rel, {}), runs["machines"])


def command_lines(run: Run) -> list[str]:
    out = []
    if (setup := run.meta.get("setup")):
        out += prose(f"Setup: {setup}")
    cmd = run.meta.get("command") or run.data["command"]
    if "peer_llamacpp" in cmd:
        cmd = "ORIN_LLM_LLAMA_SERVER=/path/to/llama-server " + cmd
    return out + [f"Command: `{cmd}`"]


def plot(root: Path, rel: str, alt: str) -> list[str]:
    return ["", f"![{alt.replace('`', '')}](bench/{rel})"] if (root / BENCH / rel).is_file() else []


def stale(run: Run) -> list[str]:
    return [*prose(f"**Older run:** {run.meta['stale']}"), ""] if run.meta.get("stale") else []


def conditions(run: Run) -> list[str]:
    return [*prose(f"Conditions: {run.meta['conditions']}"), ""] if run.meta.get("conditions") else []


def section(root: Path, title: str, what: str, run: Run, anchor: str, rows: list[Row],
            extra: Optional[list[str]] = None, png: Optional[str] = None) -> list[str]:
    lines = ["", f"## {title}", "", *stale(run), *prose(what), "", *table(anchor, rows), ""]
    lines += (extra + [""]) if extra else []
    lines += [*conditions(run), run.line(), *command_lines(run)]
    return lines + (plot(root, png, title) if png and not run.meta.get("stale") else [])


def part(root: Path, title: str, what: str, anchor: str, rows: list[Row], png: Optional[str] = None) -> list[str]:
    """A scenario of a run that the section above it names."""
    return ["", f"### {title}", "", *prose(what), "", *table(anchor, rows), *(plot(root, png, title) if png else [])]
