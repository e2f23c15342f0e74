"""The doctor's report: checks by section with a status each, the exit code they add up to, and the
lines and JSON it prints."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

OK, INFO, WARN, ERROR = "ok", "info", "warn", "error"
EXIT = {OK: 0, INFO: 0, WARN: 1, ERROR: 2}


@dataclass
class Check:
    section: str
    status: str  # ok | info | warn | error
    message: str


@dataclass
class Report:
    jetson: bool
    jetpack: Optional[int] = None  # 6 or 7 on an Orin whose L4T says so (doctor/jetpack7.py)
    checks: list[Check] = field(default_factory=list)

    def add(self, section: str, status: str, message: str) -> None:
        self.checks.append(Check(section, status, message))

    @property
    def exit_code(self) -> int:
        return max((EXIT[c.status] for c in self.checks), default=0)

    def count(self, status: str) -> int:
        return sum(c.status == status for c in self.checks)

    def lines(self) -> list[str]:
        engine = "TensorRT Edge-LLM" if self.jetpack == 7 else "TensorRT-LLM"
        head = (f"Jetson: checking JetPack, {engine}, power, memory" if self.jetson else
                "not a Jetson: the trtllm backend and its engines run only on the Orin; checking what can be "
                "checked here")
        out = [f"orin-llm doctor — {head}"]
        out += [f"  {c.status.upper():<5} {c.section}: {c.message}" for c in self.checks]
        w, e = self.count(WARN), self.count(ERROR)
        verdict = {0: "ready", 1: "usable, with warnings", 2: "not ready"}[self.exit_code]
        out.append(f"{verdict}: {w} warning{'s' * (w != 1)}, {e} error{'s' * (e != 1)} (exit {self.exit_code})")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"exit_code": self.exit_code, "jetson": self.jetson, "jetpack": self.jetpack,
                "checks": [{"section": c.section, "status": c.status, "message": c.message} for c in self.checks]}
