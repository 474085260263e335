#!/usr/bin/env bash
# One GPU session in one command (a lent GPU comes with about 15 minutes, its start included):
# install this checkout, run the parity tests on CUDA (8 workers) beside the suite's parity and
# trainer steps, then the timed steps (speed, packed, stacked) with the machine to themselves.
# Everything lands in OUT: gpu-<device>.json, the suite's logs, pytest-parity.log, env.txt.
# About 8 minutes on an H200 (2026-11-27: the parity tests 109 s beside the suite's parity step,
# speed 121 s, packed 113 s); the timeouts below keep it under 10.
#
#   bash benchmarks/gpu_session.sh OUT [steps of the second half, default speed,packed,stacked]
set -o pipefail
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
[ -n "${1:-}" ] || { echo "usage: bash benchmarks/gpu_session.sh OUT [STEPS]" >&2; exit 2; }
OUT=$1
LATER=${2:-speed,packed,stacked}
mkdir -p "$OUT"
python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 2)" 2>/dev/null \
  || { echo "gpu_session.sh: no CUDA device (or no torch) for python3 here; on a CPU run: python benchmarks/gpu_suite.py --device cpu --smoke" >&2; exit 2; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/env.txt"
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 \
  || { echo "editable install failed (tail below); trying a carried wheel in .whl/"; tail -3 "$OUT/install.log";
       python3 -m pip install -q --no-deps --no-index .whl/flops_fit-*.whl; } || exit 1
python3 -c "import flops_fit, timm, transformers, torch; print('flops_fit', flops_fit.__version__, 'torch', torch.__version__, 'timm', timm.__version__, 'transformers', transformers.__version__)" \
  | tee -a "$OUT/env.txt" || exit 1
T0=$SECONDS
# the parity tests beside the suite's first half: correctness only, so sharing the GPU is fine
timeout 260 python3 -m pytest -n 8 -q -p no:cacheprovider parity -rfE >"$OUT/pytest-parity.log" 2>&1 &
PYTEST=$!
timeout 270 python3 benchmarks/gpu_suite.py --out "$OUT" --only parity,trainer 2>&1 | tee "$OUT/suite-1.log" | grep -v '^W1'
wait $PYTEST; echo "pytest parity rc=$? after $((SECONDS - T0))s"; tail -4 "$OUT/pytest-parity.log"
timeout 300 python3 benchmarks/gpu_suite.py --out "$OUT" --only "$LATER" --merge 2>&1 | tee "$OUT/suite-2.log" | grep -v '^W1'
echo "session done after $((SECONDS - T0))s"
