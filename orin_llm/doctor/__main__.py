"""`python -m orin_llm.doctor [--engine DIR] [--policy FILE] [--json]`: the same as `orin-llm doctor`."""

from __future__ import annotations

from typing import Optional

from orin_llm import doctor
from orin_llm.doctor.diagnose import diagnose


def main(argv: Optional[list[str]] = None) -> int:
    """`python -m orin_llm.doctor [--engine DIR] [--json]`: the same as `orin-llm doctor`."""
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m orin_llm.doctor", description=doctor.__doc__.split("\n")[0])
    ap.add_argument("--engine", help="an engine directory to check against this machine")
    ap.add_argument("--policy", help="a policy runner's measurement JSON to set against the engine's plan")
    ap.add_argument("--json", action="store_true", help="print the checks as one JSON object")
    a = ap.parse_args(argv)
    report = diagnose(a.engine, policy=a.policy)
    print(json.dumps(report.as_dict(), indent=2) if a.json else "\n".join(report.lines()))
    return report.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
