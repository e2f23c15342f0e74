"""`orin-llm memory` as the issue checks it: the Orin profile's numbers and a clear refusal."""

import json
from pathlib import Path

from .conftest import ROOT, orin_llm

ORIN = ROOT / "jetson" / "profiles" / "agx-orin-64gb.toml"


def variant(tmp_path: Path, old: str, new: str) -> Path:
    text = ORIN.read_text()
    assert old in text
    text = text.replace(old, new).replace('config = "../models/', f'config = "{ORIN.parent.parent}/models/')
    p = tmp_path / "variant.toml"
    p.write_text(text)
    return p


def test_orin_profile_plan_json():
    out = json.loads(orin_llm("memory", "--profile", str(ORIN), "--json").stdout)
    assert out["target"]["kv_bytes_per_token"] == 57344 and out["feasible"]
    assert out["draft"]["kv_bytes_per_token"] == 2 * 16 * 8 * 64
    assert out["target"]["max_kv_tokens"] == out["draft"]["max_kv_tokens"] >= 4608
    assert out["total_bytes"] + out["headroom_bytes"] == out["detail"]["device_bytes"]


def test_fp16_kv_doubles_bytes_per_token(tmp_path):
    p = variant(tmp_path, 'kv_cache = "int8"          # 57,344', 'kv_cache = "fp16"          # 57,344')
    out = json.loads(orin_llm("memory", "--profile", str(p), "--json").stdout)
    assert out["target"]["kv_bytes_per_token"] == 114688


def test_policy_that_eats_the_device_is_refused(tmp_path):
    p = variant(tmp_path, "reserve_gib = 6.0", "reserve_gib = 60.0")
    proc = orin_llm("memory", "--profile", str(p), check=False)
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "does not fit" in err[0] and "policy 60.00 GiB" in err[0]
