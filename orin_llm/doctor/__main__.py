"""`python -m orin_llm.doctor [--engine DIR] [--policy FILE] [--json]`: the same as `orin-llm doctor`."""

from .diagnose import main

raise SystemExit(main())
