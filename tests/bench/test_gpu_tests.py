"""The GPU check's test groups (orin_llm/bench/gpu_tests.py): a group reports each test's outcome,
also when its cap kills it mid-run, and a failing new-kernel test turns that kernel off for the
measurements after it."""

from __future__ import annotations

from pathlib import Path

import pytest

from orin_llm.bench.gpu_tests import Group, gate, run_group, run_groups


@pytest.mark.full  # waits out a 25 s cap: full tier
def test_a_group_reports_each_test_and_is_cut_at_its_cap(tmp_path):
    f = tmp_path / "test_fake_kernels.py"
    f.write_text("import time\n\n\ndef test_q4_gemv_ok():\n    pass\n\n\ndef test_q4_gemv_wrong():\n"
                 "    assert 1 == 2\n\n\ndef test_step_ops_hangs():\n    time.sleep(120)\n")
    r = run_group(Group("new_kernels", ((str(f), "-p", "no:cacheprovider"),), 25), Path("no-tokenizer"), 100)
    assert (r["passed"], r["failed"]) == (1, 1) and r["failing"][0].endswith("test_fake_kernels.py::test_q4_gemv_wrong")
    assert r["returncodes"] == [None] and "cut at its cap of 25 s" in r["cut"] and not r["ok"]
    assert r["seconds"] < 60
    assert list(gate({"new_kernels": r})) == ["int4_kernel"]  # (the fused ops' test was cut, not failed)


def test_groups_share_the_time_left_and_say_what_did_not_run(tmp_path):
    f = tmp_path / "test_fine.py"
    f.write_text("def test_step_ops_fine():\n    pass\n")
    groups = (Group("new_kernels", ((str(f), "-p", "no:cacheprovider"),), 40), Group("engine", ((str(f),),), 40))
    left = iter([200.0, 20.0])
    r = run_groups(groups, Path("no-tokenizer"), lambda: next(left))
    assert r["new_kernels"]["ok"] and r["new_kernels"]["passed"] == 1
    assert r["engine"] == {"ok": False, "not_run": "20 s left"}
    assert r["summary"] == "new_kernels: 1 passed, 0 failed, 0 skipped; engine: not run, 20 s left"
    assert gate(r) == {}


def test_a_failure_keeps_its_message_and_its_call_s_tail_after_later_calls(tmp_path):
    bad, good = tmp_path / "test_bad.py", tmp_path / "test_good.py"
    bad.write_text("def test_step_ops_at_3b_shapes():\n    assert 1 == 2, 'silu_mul: 3 elements apart'\n")
    good.write_text("def test_later():\n    pass\n")
    r = run_group(Group("new_kernels", ((str(bad),), (str(good),)), 60), Path("no-tokenizer"), 100)
    assert r["returncodes"] == [1, 0] and (r["passed"], r["failed"]) == (1, 1)
    [(name, why)] = r["why"].items()
    assert name.endswith("test_bad.py::test_step_ops_at_3b_shapes") and "silu_mul: 3 elements apart" in why
    assert "test_bad.py" in r["tail"] and "test_later" not in r["tail"]
    assert "E       AssertionError: silu_mul" in r["e_lines"][0]
    assert gate({"new_kernels": r}) == {"fused_step": "the fused step ops' CUDA tests failed here: unfused"}
