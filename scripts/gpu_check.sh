#!/usr/bin/env bash
# Every GPU path of the harness in one pass, for whoever has a CUDA GPU for a few minutes.
#
#   scripts/gpu_check.sh CKPT_ROOT OUT_DIR [SCALE]
#
# CKPT_ROOT holds the tiny profile's checkpoints (orl, dlm, orl-nvfp4: results/<profile>/ckpt).
# Steps run most important first, each under its own time limit, and write into OUT_DIR:
#   gpu_check.log            everything printed, with each step's exit status and wall time
#   dlmrt_<name>.jsonl       engine_bench records (orl bench-engine): CUDA-graph vs eager step time,
#                            tokens/s, TPF, overhead, speedups, identical-to-reference counts, host syncs
#   nvfp4_kernel_bench.json  Triton W4A16 vs dequantize+matmul vs bf16 nn.Linear
#   scale_qwen3-4b_b*.jsonl  scale_bench records: Qwen3-4B shapes against the bandwidth floor (issue 15)
#   ckpt-0.6b-*/train_summary.json  one-GPU training at Qwen3-0.6B's layer shapes (issue 18): 20 conversion
#                                   steps, one ORL iteration with dlmrt rollouts (train_orl_0.6b_dlmrt.jsonl)
# SCALE (default 1) multiplies every step's time limit, for slower GPUs.
# A failing step is logged and the next one runs. The script exits non-zero if any step failed.
# GPU_CHECK_SKIP="name ..." leaves the named steps out (for a rerun of only what failed).
# orl must be importable (pip install -e . or a wheel on PYTHONPATH); it runs from OUT_DIR so
# that a source checkout in the working directory does not shadow the installed package.
set -u
CKPT_ROOT=$(realpath "${1:?usage: scripts/gpu_check.sh CKPT_ROOT OUT_DIR [SCALE]}")
OUT_DIR=$(realpath -m "${2:?usage: scripts/gpu_check.sh CKPT_ROOT OUT_DIR [SCALE]}")
REPO=$(realpath "$(dirname "$0")/..")
PY=${PYTHON:-python3}
SCALE=${3:-1}  # multiplies every step's time limit
mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/gpu_check.log"
export PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
failed=0

step() {  # step NAME LIMIT_SECONDS COMMAND...
  local name=$1 limit=$2 start rc
  shift 2
  case " ${GPU_CHECK_SKIP:-} " in *" $name "*) echo "=== $name: skipped (GPU_CHECK_SKIP)" | tee -a "$LOG"; return;; esac
  echo "=== $name (limit ${limit}s x$SCALE): $*" | tee -a "$LOG"
  start=$(date +%s)
  (cd "$OUT_DIR" && timeout "$(( limit * SCALE ))" "$@") >>"$LOG" 2>&1
  rc=$?
  echo "=== $name: exit $rc after $(( $(date +%s) - start ))s" | tee -a "$LOG"
  [ "$rc" -eq 0 ] || failed=1
}

bench() {  # bench NAME LIMIT CKPT POLICY [extra args]
  local name=$1 limit=$2 ckpt=$3 policy=$4
  shift 4
  if [ ! -f "$CKPT_ROOT/$ckpt/config.json" ]; then
    echo "=== $name: skipped, no checkpoint at $CKPT_ROOT/$ckpt" | tee -a "$LOG"
    return
  fi
  step "$name" "$limit" "$PY" -m orl.cli bench-engine --device cuda --check-sync --ckpt "$CKPT_ROOT/$ckpt" \
    --policy "$policy" --limit 16 --repeats 200 --no-progress --out "$OUT_DIR/dlmrt_$name.jsonl" "$@"
}

step environment 30 bash -c "nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; \
  $PY -c 'import torch, triton; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"triton\", triton.__version__, torch.cuda.get_device_name())'"
# ORL at its tiny-profile operating point (Table 2's tau), then the base dLLM at its matched tau.
bench orl_fp32 150 orl threshold:0.5 --profile
# The tests run from a copy of tests/ so that pytest puts the copy's parent, not the source
# checkout (whose orl/ lacks orl.engines and orl.kernels), at the front of sys.path.
rm -rf "$OUT_DIR/.gpu_tests" && mkdir -p "$OUT_DIR/.gpu_tests" && cp -r "$REPO/tests" "$OUT_DIR/.gpu_tests/"
step pytest_cuda 180 "$PY" -m pytest -q -p no:cacheprovider -c "$REPO/pyproject.toml" \
  "$OUT_DIR/.gpu_tests/tests/test_cuda.py" "$OUT_DIR/.gpu_tests/tests/test_dlmrt.py" \
  "$OUT_DIR/.gpu_tests/tests/test_dlmrt_rollout.py" -k cuda
step kernel_bench 180 "$PY" -m orl.kernels.bench_gpu --out "$OUT_DIR/nvfp4_kernel_bench.json" --iters 100
# S = 4 against the default S = 2: at TPF ~8 a 16-token block needs about two steps.
bench orl_fp32_s4 120 orl threshold:0.5 --sync-every 4
bench dlm_fp32 120 dlm threshold:0.9
bench orl_nvfp4 150 orl-nvfp4 threshold:0.5
bench orl_bf16 120 orl threshold:0.5 --dtype bfloat16
# Engine at scale (issue 15): random weights with Qwen3-4B's shapes, bf16, 512 tokens, blocks 16 and 32;
# each record holds the step time against the bandwidth floor measured in the same run.
for block in 16 32; do
  step "scale_qwen3_4b_b$block" 300 "$PY" -m orl.cli bench-scale --arch qwen3-4b --block "$block" --device cuda \
    --dtype bfloat16 --max-new-tokens 512 --engines dlmrt,dlmrt-eager,reference --requests 2 --profile \
    --no-progress --out "$OUT_DIR/scale_qwen3-4b_b$block.jsonl"
done
# Training on one GPU (issue 18): Qwen3-0.6B's layer shapes (the smoke vocabulary), 20 conversion steps in
# bf16 with activation checkpointing; train_summary.json has the peak memory and tokens/s per device.
cat > "$OUT_DIR/qwen3-0.6b-shapes.yaml" <<'YAML'
model: {hidden_size: 1024, intermediate_size: 3072, num_hidden_layers: 28, num_attention_heads: 16,
        num_key_value_heads: 8, head_dim: 128, max_position_embeddings: 512}
ar: {steps: 2, batch_size: 16, lr: 0.001, warmup_steps: 1, checkpoint_every: 2, seed: 0}
convert: {steps: 20, batch_size: 16, lr: 0.001, warmup_steps: 2, checkpoint_every: 20, seed: 2,
          activation_checkpointing: true}
YAML
step train_ar_0.6b 240 "$PY" -m orl.cli train-ar --preset smoke --config "$OUT_DIR/qwen3-0.6b-shapes.yaml" \
  --device cuda --no-progress --out "$OUT_DIR/ckpt-0.6b-ar"
step convert_0.6b 300 "$PY" -m orl.cli convert --preset smoke --config "$OUT_DIR/qwen3-0.6b-shapes.yaml" \
  --device cuda --no-progress --init "$OUT_DIR/ckpt-0.6b-ar" --out "$OUT_DIR/ckpt-0.6b-dlm"
# One ORL iteration on the converted model: a rollout of 8 prompts decoded by dlmrt in graph mode
# (compile-graph), the sandboxed check, 2 replay steps; train_summary.json has rollout_s and peak memory.
cat > "$OUT_DIR/orl-0.6b.yaml" <<'YAML'
orl: {iterations_steps: 2, batch_size: 16, refresh_every: 2, rollout_prompts: 8}
YAML
cat "$OUT_DIR/qwen3-0.6b-shapes.yaml" "$OUT_DIR/orl-0.6b.yaml" > "$OUT_DIR/qwen3-0.6b-orl.yaml"
step train_orl_0.6b_dlmrt 300 "$PY" -m orl.cli train-orl --preset smoke --config "$OUT_DIR/qwen3-0.6b-orl.yaml" \
  --device cuda --no-progress --rollout-engine dlmrt --isolation fallback --init "$OUT_DIR/ckpt-0.6b-dlm" \
  --out "$OUT_DIR/ckpt-0.6b-orl" --record "$OUT_DIR/train_orl_0.6b_dlmrt.jsonl"
rm -rf "$OUT_DIR/.gpu_tests" "$OUT_DIR"/ckpt-0.6b-*/*.safetensors
echo "=== done, failed=$failed" | tee -a "$LOG"
exit "$failed"
