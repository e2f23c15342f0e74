"""A probe for #43 item 4, on the tuning set only: would the model pick a task's goal better by scoring
whole candidate facts, each written back as English, than by writing the fact under the goal grammar?

For each task of a tuning set (calibration/wording/ by default), every single fact over the things the task
mentions (goal_words.mentioned; every thing when it mentions none) is written as a sentence ("the kettle is
switched on") and scored by the engine's float model (the target's float export, through transformers):
- direct: mean log P(sentence | the task), the fact read after the task;
- channel: log P(task | sentence), the task read after the fact (the same task tokens for every candidate);
- pmi: direct minus the sentence's log P with no task.
A method's hit: its best-scored fact is one of the goal's facts (top1), or its best len(goal) facts are the
goal (set). Printed beside the goal grammar's reading (planning/goal_infer.py) of the same tasks.

    python bench/goal_scoring_probe.py --engine engines/smollm2-135m-demo [--set calibration/wording]

It measures; nothing in the product reads it. Never point it at a held-out set.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from orin_llm.planning.home import load_environment
from orin_llm.planning.home.goal_words import mentioned


def words(name: str) -> str:
    return name.replace("_", " ")


def candidates(env, only: set[str]) -> dict[str, str]:
    """fact -> its sentence, over the things in `only` (every thing when empty)."""
    def keep(names):
        names = list(names)
        return [n for n in names if not only or n in only]
    places, objects = keep(env.names("place")), keep(env.names("object"))
    devices, openable = keep(env.names("device")), keep(sorted(env.openable_places()))
    out = {"said": "the robot has told the person"}
    for o in objects:
        out[f"holding({o})"] = f"the robot is holding the {words(o)}"
        for p in places:
            out[f"at({o}, {p})"] = f"the {words(o)} is at the {words(p)}"
    for p in places:
        out[f"robot_at({p})"] = f"the robot is at the {words(p)}"
    for p in openable:
        out[f"open({p})"] = f"the {words(p)} is open"
        out[f"closed({p})"] = f"the {words(p)} is closed"
    for d in devices:
        out[f"on({d})"] = f"the {words(d)} is switched on"
        out[f"off({d})"] = f"the {words(d)} is switched off"
    sorts = {"place": places, "object": objects, "device": devices}
    for a in env.actions:
        if a.effective_kind != "other" or not a.args or a.args[0] == "text":
            continue
        for t in sorts.get(a.args[0], []):
            what = a.description or words(a.name)
            out[f"done({a.name}, {t})"] = f"the robot has done this: {what}, at the {words(t)}"
    return out


class Scorer:
    def __init__(self, engine_dir: Path):
        from transformers import AutoTokenizer, LlamaForCausalLM
        self.tok = AutoTokenizer.from_pretrained(engine_dir / "tokenizer")
        self.model = LlamaForCausalLM.from_pretrained(engine_dir / "target", torch_dtype=torch.float32).eval()

    def ids(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    @torch.no_grad()
    def logp(self, pairs: list[tuple[str, str]], batch: int = 32) -> list[tuple[float, int]]:
        """(sum of log P(continuation tokens | context), their count) per (context, continuation): right-padded
        batches, each row's continuation scored at its own positions."""
        out = []
        for i in range(0, len(pairs), batch):
            rows = [(self.ids(c), self.ids(t)) for c, t in pairs[i:i + batch]]
            width = max(len(a) + len(b) for a, b in rows)
            ids = torch.zeros(len(rows), width, dtype=torch.long)
            mask = torch.zeros(len(rows), width, dtype=torch.long)
            for r, (a, b) in enumerate(rows):
                ids[r, :len(a) + len(b)] = torch.tensor(a + b)
                mask[r, :len(a) + len(b)] = 1
            logp = self.model(ids, attention_mask=mask).logits.log_softmax(-1)
            for r, (a, b) in enumerate(rows):
                pos = torch.arange(len(a) - 1, len(a) + len(b) - 1)
                out.append((float(logp[r, pos, torch.tensor(b)].sum()), len(b)))
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", required=True)
    ap.add_argument("--set", default="calibration/wording")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--baseline", help="goal_reading.py's --out of the same set, for its reading beside")
    args = ap.parse_args()
    if "heldout" in args.set:
        raise SystemExit("a tuning probe: point it at a tuning set, never at a held-out one")
    where = Path(args.set)
    rows = [json.loads(line) for line in (where / "tasks.jsonl").read_text().splitlines() if line.strip()]
    base = {}
    if args.baseline:
        base = {r["id"]: r["read"] for r in json.loads(Path(args.baseline).read_text())["rows"]}
    torch.set_num_threads(args.threads)
    scorer = Scorer(Path(args.engine))
    skipped = 0
    hits = {m: {"top1": 0, "set": 0} for m in ("direct", "channel", "pmi", "grammar")}
    for row in rows:
        env = load_environment(where / "homes" / f"{row['home']}.yaml")
        goal = set(row["goal"])
        only = mentioned(env, row["task"])
        if not only:  # every fact of the home: hundreds of candidates, and the grammar reads the whole home too
            print(f"{row['id']:>16} names no thing of the home: left out", flush=True)
            skipped += 1
            continue
        cands = candidates(env, only)
        facts, sents = list(cands), list(cands.values())
        task = row["task"].strip()
        direct = scorer.logp([(f"Request: {task}\nOnce it is done, ", s + ".") for s in sents])
        prior = scorer.logp([("Once it is done, ", s + ".") for s in sents])
        channel = scorer.logp([(f"Once it is done, {s}.\nRequest:", " " + task) for s in sents])
        scores = {"direct": [lp / n for lp, n in direct],
                  "channel": [lp for lp, _ in channel],
                  "pmi": [d[0] - p[0] for d, p in zip(direct, prior, strict=True)]}
        line = [f"{row['id']:>16} {sorted(goal)}"]
        for m, s in scores.items():
            order = [facts[i] for i in sorted(range(len(facts)), key=lambda i: -s[i])]
            hits[m]["top1"] += order[0] in goal
            hits[m]["set"] += set(order[:len(goal)]) == goal
            line.append(f"{m}: {order[:len(goal)]}")
        if row["id"] in base:
            read = base[row["id"]]
            hits["grammar"]["top1"] += bool(read) and read[0] in goal
            hits["grammar"]["set"] += set(read) == goal
            line.append(f"grammar: {read}")
        print(" | ".join(line), flush=True)
    n = len(rows) - skipped
    shares = {m: {k: round(v / n, 3) for k, v in h.items()} for m, h in hits.items()}
    print(json.dumps({"tasks": n, "left_out": skipped, **shares}))


if __name__ == "__main__":
    main()
