"""llama.cpp's log-probs on given token ids: run by the `kernels` scenario (bench/kernels.py) with the
Python of a venv that has llama-cpp-python (its --llama-python), never imported by orin-llm: it needs
only llama_cpp and numpy, so that venv needs no torch and no orin-llm.

    LLAMA_PYTHON orin_llm/bench/llama_cpp_logprobs.py JOB.json > OUT.json

JOB.json: {"gguf": path, "seqs": [[prefix ids, [answer ids, ...]], ...], "question": ids, "greedy": n,
"eos": [ids], "threads": n}. Each home's prefix is evaluated once and each answer on top of it (the
context rewound to the prefix, as our teacher forcing does; checked once against evaluating the
prefix and the answer afresh). Out: per answer, at every answer position, the argmax and the log-prob
of the answer's next token (all positions but the last), as ours are counted (kernel_quality.py); the
question's first-token top log-probs and greedy answer ids; llama.cpp's version and system info (which
SIMD its build runs).
"""

import json
import os
import sys
import time

import numpy as np
from llama_cpp import Llama, __version__, llama_print_system_info

TOP = 4


def log_softmax(x):
    x = np.asarray(x, dtype=np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def answer_logits(llm, prefix_len, rest):
    llm.n_tokens = prefix_len  # eval() drops the cached tokens past n_tokens before it appends
    llm.eval(rest)
    return np.array(llm.scores[prefix_len:prefix_len + len(rest)])


def main():
    with open(sys.argv[1]) as f:
        job = json.load(f)
    t0 = time.perf_counter()
    longest = max(len(p) + max(len(r) for r in rs) for p, rs in job["seqs"])
    n_ctx = max(longest, len(job["question"]) + job["greedy"]) + 16
    llm = Llama(model_path=job["gguf"], n_ctx=n_ctx, n_batch=512, logits_all=True,
                n_threads=job.get("threads") or os.cpu_count(), verbose=False)
    answers, rewind_error = [], None
    for prefix, rests in job["seqs"]:
        llm.reset()
        llm.eval(prefix)
        for rest in rests:
            logits = answer_logits(llm, len(prefix), rest)
            if rewind_error is None:  # the rewind is what evaluating afresh gives
                llm.reset()
                llm.eval(prefix + rest)
                rewind_error = float(np.abs(np.array(llm.scores[len(prefix):len(prefix) + len(rest)]) - logits).max())
            lp = log_softmax(logits)
            answers.append({"argmax": lp.argmax(-1).tolist(),
                            "next_logprob": lp[np.arange(len(rest) - 1), rest[1:]].tolist()})
    llm.reset()
    llm.eval(job["question"])
    first = log_softmax(llm.scores[len(job["question"]) - 1])
    top = np.argsort(-first)[:TOP]
    ids = []
    for _ in range(job["greedy"]):  # greedy, as ours: the argmax of the last position
        nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        ids.append(nxt)
        if nxt in job["eos"]:
            break
        llm.eval([nxt])
    print(json.dumps({"llama_cpp": __version__, "system_info": llama_print_system_info().decode().strip(),
                      "answers": answers, "rewind_max_abs_dlogit": rewind_error,
                      "question": {"top": [[int(i), float(first[i])] for i in top], "answer_ids": ids},
                      "seconds": time.perf_counter() - t0}))


if __name__ == "__main__":
    main()
