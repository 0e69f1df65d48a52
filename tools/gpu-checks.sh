#!/usr/bin/env bash
# The GPU checks, end to end, with every result under one folder:
#   tools/gpu-checks.sh [OUT [STEP...]]   (OUT default gpu-checks/; steps default: all, in this order)
# Steps: doctor decoder batching pytest embedded smoke facts.
#
# Runs on a machine with an NVIDIA GPU and a CUDA build of torch, offline: it installs dflashbench from this
# checkout without dependencies when it is not importable (a GPU image already has torch, transformers,
# nvidia-ml-py, pandas, ...), then:
#   doctor.json            what dflashbench sees (GPUs, driver, CUDA, engines)
#   decoder-qwen3-8b.*     bench decoder at Qwen3-8B's shape in bf16: AR step, draft pass, verify pass
#   batching-cuda.*        bench batching on CUDA: throughput ratios to c=1 and the step bound, AR and DFlash
#   pytest-gpu.log         the GPU-marked tests (nox -s gpu runs the same)
#   runs/, reports/        sweeps of the gpu-embedded and gpu-smoke suites, with telemetry and HTML reports
#   facts.txt              per point: throughput, energy per token, power, and the energy cross-check
# A step that fails is reported and the others still run; the exit status is the number of failed steps.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's dflashbench, also for tools/*.py
out=${1:-gpu-checks}
shift || true
steps=" ${*:-doctor decoder batching pytest embedded smoke facts} "
py=${PYTHON:-python3}
mkdir -p "$out/runs"
export PYTHONUNBUFFERED=1
failed=0

step() {  # step NAME CMD...: run, log to $out/NAME.log, say how it ended
  local name=$1; shift
  local t0=$SECONDS
  "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc after $((SECONDS - t0)) s"
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
}

if ! "$py" -c "import dflashbench" 2>/dev/null; then
  step install "$py" -m pip install --no-deps --no-build-isolation -e .
fi
want() { [[ $steps == *" $1 "* ]]; }
if want doctor; then
  step doctor "$py" -m dflashbench doctor --json && cp "$out/doctor.log" "$out/doctor.json"
fi
if want decoder; then
  step decoder-qwen3-8b "$py" -m dflashbench bench decoder --shape qwen3-8b --device cuda --json
fi
if want batching; then
  step batching-cuda "$py" -m dflashbench bench batching --device cuda --concurrency 1,4,16 --num-prompts 64 \
    --max-new-tokens 64 --rounds 3 --json "$out/batching-cuda.json"
fi
if want pytest; then step pytest-gpu "$py" -m pytest -q -m gpu -p no:cacheprovider; fi
if want embedded; then step sweep-gpu-embedded "$py" -m dflashbench sweep --suite gpu-embedded -o "$out/runs"; fi
if want smoke; then step sweep-gpu-smoke "$py" -m dflashbench sweep --suite gpu-smoke -o "$out/runs"; fi
if want facts; then
  step facts "$py" tools/gpu_run_facts.py "$out"/runs/*/ && cp "$out/facts.log" "$out/facts.txt"
fi
echo "$failed step(s) failed; results in $out/"
exit "$failed"
