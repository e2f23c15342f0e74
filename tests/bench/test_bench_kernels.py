"""The `kernels` scenario's plumbing on the tiny engine (random weights: its numbers mean nothing):
every family listed, run or skipped with why, the anchor beside them, llama.cpp skipped with how to get
it, the JSON with the machine and the command; and llama.cpp's per-position output compared with the
reference as a family's is (a stand-in for llama-cpp-python's Python that prints what the script does)."""

from __future__ import annotations

import json
import stat

import torch

from orin_llm.bench import kernel_quality as kq
from orin_llm.bench import kernels
from orin_llm.bench.kernel_quality import compare_positions
from orin_llm.kernels import native

from ..conftest import tiny_fixture

engine_dir = tiny_fixture("engine_dir")


def test_every_family_is_run_or_skipped_with_why_and_llama_cpp_says_how_to_get_it(engine_dir, tmp_path,
                                                                                 monkeypatch):
    # native, and one family this CPU cannot run (the others compile for minutes: the quality test runs them)
    # the tiny engine has no float export: its reference is its Q4_1 weights over a float32 cache
    monkeypatch.setattr(kq, "REFERENCE", {"kv_cache": "fp32"})
    monkeypatch.setattr(kernels, "QUICK", (1, 1))  # one home, one answer
    lacking = native.Family("x86-avx2", "-", ("-march=x86-64-v3",), needs=("no_such_flag",))
    monkeypatch.setattr(native, "FAMILIES", {"native": native.FAMILIES["native"], "x86-avx2": lacking})
    monkeypatch.delenv(kernels.LLAMA_PYTHON_VARIABLE, raising=False)
    kernels.run(engine_dir, tmp_path, quick=True)
    data = json.loads((tmp_path / "kernels.json").read_text())
    assert data["scenario"] == "kernels" and data["machine"]["cpu_count"] >= 1 and data["command"]
    assert data["items"] == 1 and data["positions"] > 1
    assert data["families"]["x86-avx2"] == {"family": "x86-avx2",
                                            "skipped": "this CPU lacks no_such_flag (/proc/cpuinfo)"}
    ours, anchor = data["families"]["native"], data["families"][kernels.ANCHOR]
    assert ours["kernels"]["family"] == "native" and ours["kernels"]["plan"]["q8_dot"] is True
    assert anchor["env"] == {"ORIN_LLM_Q8_DOT": "0"} and anchor["kernels"]["plan"]["q8_dot"] is not True
    for got in (ours, anchor):
        for cache in ("fp32_kv", "int8_kv"):
            assert got[cache]["positions"] == data["positions"]
            assert got[cache]["reference_perplexity"] == data["reference"]["perplexity"]
    assert "--llama-python" in data["llama_cpp"]["skipped"]


class Words:
    def decode(self, ids):
        return "".join(f"<{i}>" for i in ids)


def test_llama_cpps_positions_are_compared_as_a_familys(tmp_path):
    logits = torch.zeros(3, 8)
    logits[0, 5], logits[1, 6], logits[2, 1] = 4.0, 4.0, 4.0  # the reference's argmaxes: 5, 6, 1
    ref = {"seqs": [([1, 2], [[3, 5, 6]])], "logits": [logits], "eos": [0],
           "question": {"ids": [1, 2], "answer": "<7>"}}
    lp = torch.log_softmax(logits, -1)
    answers = [{"argmax": [5, 6, 2], "next_logprob": [float(lp[0, 5]) - 0.5, float(lp[1, 6])]}]
    out = {"llama_cpp": "0.0", "system_info": "AVX2 = 1", "answers": answers, "rewind_max_abs_dlogit": 0.0,
           "question": {"top": [[7, -0.1]], "answer_ids": [7, 0]}, "seconds": 1.0}
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(out)}\nEOF\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    got = kernels.llama_cpp(str(fake), "model.gguf", ref, Words())
    t = got["teacher_forced"]
    assert t["positions"] == 3 and abs(t["argmax_agreement"] - 2 / 3) < 1e-6
    assert abs(t["mean_abs_dlogprob"] - 0.25) < 1e-5  # 0.5 off at one of the two next tokens
    assert t == compare_positions(torch.tensor([5, 6, 1]), lp[[0, 1], [5, 6]], torch.tensor([5, 6, 2]),
                                  torch.tensor(answers[0]["next_logprob"]))
    assert t["perplexity"] > t["reference_perplexity"]
    assert got["question"] == {"top": [["<7>", -0.1]], "answer": "<7>", "reference_answer": "<7>"}
    assert kernels.llama_cpp(None, "model.gguf", ref, Words())["skipped"].startswith("no llama-cpp-python")
    assert "not built from a GGUF" in kernels.llama_cpp(str(fake), None, ref, Words())["skipped"]
