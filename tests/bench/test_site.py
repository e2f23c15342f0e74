"""The site server's replicas (bench/site.py) serve in bf16 only where the CPU computes it."""

from orin_llm.bench import site


def test_the_replicas_dtype_follows_the_cpus_bf16_instructions(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("flags\t\t: fpu sse2 avx2 fma\n")
    assert site.dtype(info) == "float32"  # AVX2 only: vLLM would emulate bf16
    info.write_text("flags\t\t: fpu avx2 avx512f avx512_bf16 amx_tile\n")
    assert site.dtype(info) == "bfloat16"
    info.write_text("Features\t: fp asimd bf16 i8mm\n")  # an ARM core with the BF16 extension
    assert site.dtype(info) == "bfloat16"
    assert site.dtype(tmp_path / "none") == "float32"
    flags = site.flags()
    assert flags[:2] == ("--dtype", site.dtype()) and "--enable-scale-out" in flags
    assert "--enable-scale-out" not in site.flags(scale_out=False)
