"""Issue #61: the manifest records the CPU model and the ISA extensions kernels choose their path by, beside the GPU,
and each speculative server's verifier setting, saying when it is not lossless by design."""

from __future__ import annotations

import json

from dflashbench.measure.lossless import verifiers_not_lossless
from dflashbench.run.manifest import cpu_summary, environment, verifier_record

# /proc/cpuinfo's first processor on an Intel Xeon with AMX (issue #61's machine), shortened; a second processor
# follows after a blank line and is not read
XEON = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw avx512vl avx512_vnni avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8

processor\t: 1
model name\t: something else
"""


def test_the_cpu_model_and_its_isa_extensions_are_read_from_cpuinfo():
    cpu = cpu_summary(XEON, env={"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "HOME": "/root"})
    assert cpu == {"model": "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", "vendor": "GenuineIntel", "family": "6",
                   "model_number": "143",
                   "isa": ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
                           "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8"],
                   "isa_env": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}}  # fmt: skip
    assert cpu_summary("", env={})["isa"] is None  # not readable: said, never an empty list standing in
    here = environment()
    assert set(here) >= {"cpu", "gpu"} and here["cpu"]["model"]  # beside the GPU in every manifest


def test_the_verifier_a_server_ran_is_recorded_and_a_lossy_one_said():
    spec = json.dumps({"method": "dflash", "model": "z-lab/x", "num_speculative_tokens": 15})
    standard = verifier_record("vllm", "dflash", ["vllm", "serve", "m", "--speculative-config", spec])
    assert standard["rejection_sample_method"] == "standard" and standard["lossless_by_design"] is True
    synthetic = json.dumps({"method": "dflash", "rejection_sample_method": "synthetic", "enable_adaptive_verification":
                            True})  # fmt: skip
    lossy = verifier_record("vllm", "dflash", ["vllm", "serve", "m", f"--speculative-config={synthetic}"])
    assert lossy["lossless_by_design"] is False and lossy["enable_adaptive_verification"] is True
    unknown = verifier_record("vllm", "eagle3", ["--speculative-config", json.dumps({"rejection_sample_method": "fly"})])
    assert unknown["lossless_by_design"] is None and "does not know" in unknown["why"]
    assert verifier_record("vllm", "ar", ["vllm", "serve", "m"]) is None  # AR verifies nothing
    assert verifier_record("sglang", "dflash", ["x"]) is None  # an engine that does not say: nothing invented
    planted = verifier_record("reference", "dflash", ["python", "-m", "dflashbench", "serve", "--test-loose-verify-topk",
                                                      "3"])  # fmt: skip
    assert planted["planted"] == ["--test-loose-verify-topk"] and planted["lossless_by_design"] is None
    assert verifier_record("reference", "dflash", ["python", "-m", "dflashbench", "serve"])["lossless_by_design"]
    manifest = {"servers": {"ar": {}, "dflash": {"verifier": lossy}, "eagle3": {"verifier": standard}}}
    assert verifiers_not_lossless([manifest]) == {"dflash": "rejection_sample_method=synthetic"}
