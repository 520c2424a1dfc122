#!/usr/bin/env bash
# The GPU check of issue 77: one script, at most --budget seconds (540; 180 with --cpu), one JSON.
#
#   bash tools/gpu_check.sh                       # on the GPU machine, from the checkout
#   bash tools/gpu_check.sh --cpu --out /tmp/gc   # the same plumbing on a CPU, in about a minute
#   bash tools/gpu_check.sh --phases decode_graphs,trl_135m --budget 300
#
# Phases, in order, each under its own `timeout` (a phase that fails or runs out of time is
# recorded and the next one starts):
#   gpu_tests      python3 -m pytest -m gpu tests/integration/test_gpu.py
#   train_135m     python3 -m framework train trainer=gpu, 3 steps, random smollm2-135m shape,
#   train_1p5b       and qwen2.5-1.5b: 8 x 4 rollouts a step in PPO mini-batches of 16 (2
#                    optimiser steps a step), no warm start, no final comparison
#   decode_graphs  tools/bench/decode_graphs.py: 64 rollouts, decoding loop and CUDA graphs
#                    against a warmed-up generate
#   trl_135m       tools/bench/train_step.py: seekrl against TRL's GRPOTrainer at each shape
#   trl_1p5b         (docs/benchmarks.md's settings: 8 x 4 x 256 tokens, bf16, synth_small)
# A phase's budget is its share (WEIGHT below) of the time left when it starts, less a grace of
# GRACE s a phase for `timeout -k`, so the whole check ends within --budget; finishing early
# leaves more to the phases after. GPU_CHECK_BUDGET_<phase>=SECONDS sets one phase's budget
# (never more than the time left); GPU_CHECK_TRL_STEPS the measured steps of the TRL phases.
#
# Before the phases, every <bundle>/part-*/env.sh (tools/offline_bundle.py; --bundle, default
# .offline) is sourced, so that Hydra and TRL import on a machine that has neither. Without TRL
# the TRL phases are skipped, saying so. --cpu: the tiny policy for one step and the decoding
# phase on the CPU; what needs CUDA is skipped with its reason.
#
# Output: DIR/gpu_check.json (DIR: --out, else $OUT, else ./gpu_check_out), rewritten after each
# phase, and each phase's log and files beside it. Render: python3 tools/gpu_check_report.py
# --render DIR/gpu_check.json [--write docs/benchmarks.md].
set -u

usage() { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

CPU=0
DIR="${OUT:-./gpu_check_out}"
BUDGET=""      # default: 540 s, 180 s with --cpu
PHASES=""
BUNDLE=.offline
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) CPU=1 ;;
    --out) DIR="$2"; shift ;;
    --budget) BUDGET="$2"; shift ;;
    --phases) PHASES="$2"; shift ;;
    --bundle) BUNDLE="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -z "$BUDGET" ] && { BUDGET=540; [ "$CPU" = 1 ] && BUDGET=180; }
case "$BUDGET" in ''|*[!0-9]*) echo "[--budget] got '$BUDGET'; expected whole seconds. Fix: --budget 540." >&2; exit 2 ;; esac

START=$(date +%s)
DEADLINE=$((START + BUDGET))
GRACE=5        # seconds `timeout -k` may add to a phase that ignores TERM
MIN_PHASE=5    # a phase that would start with less than this left is skipped
mkdir -p "$DIR" || exit 2
DIR="$(cd "$DIR" && pwd)"  # --out and --bundle as the caller named them, from where it stands
[ -d "$BUNDLE" ] && BUNDLE="$(cd "$BUNDLE" && pwd)"
JSON="$DIR/gpu_check.json"
cd "$(dirname "$0")/.." || exit 2

# the bundle: wheels, assets and the cache, installed once per machine
sourced=0
for env in "$BUNDLE"/part-*/env.sh; do
  [ -f "$env" ] || continue
  # shellcheck disable=SC1090
  if source "$env"; then sourced=$((sourced + 1)); else echo "gpu_check: $env failed" >&2; fi
done
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
BUNDLE_NOTE="none ($BUNDLE/part-*/env.sh absent)"
[ "$sourced" -gt 0 ] && BUNDLE_NOTE="$sourced part(s) of $BUNDLE"

CUDA=0
if [ "$CPU" = 0 ]; then
  CUDA=$(python3 -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null || echo 0)
  if [ "$CUDA" = 0 ]; then
    echo "gpu_check: torch sees no CUDA device; running the --cpu check instead" >&2
    CPU=1
  fi
fi
MODE=gpu; [ "$CPU" = 1 ] && MODE=cpu
REPORT=(python3 tools/gpu_check_report.py)
"${REPORT[@]}" init "$JSON" --mode "$MODE" --budget "$BUDGET" --bundle "$BUNDLE_NOTE" || exit 2
TRL_MISSING=""
python3 -c 'import trl' >/dev/null 2>&1 ||
  TRL_MISSING="TRL is not importable here; build the bundle with --bench (tools/offline_bundle.py)"
TOKENIZER="$(python3 -c 'from framework.paths import cache_root; print(cache_root(None))')/models/smollm2-135m-instruct"

NAMES=(gpu_tests train_135m train_1p5b decode_graphs trl_135m trl_1p5b)
declare -A WEIGHT=([gpu_tests]=70 [train_135m]=60 [train_1p5b]=80 [decode_graphs]=90
                   [trl_135m]=100 [trl_1p5b]=110)
declare -A SKIP=()  # phase -> why it does not run (decided before any runs: budgets share the rest)
for name in "${NAMES[@]}"; do
  if [ -n "$PHASES" ] && [[ ",$PHASES," != *",$name,"* ]]; then
    SKIP[$name]="not selected (--phases $PHASES)"
  elif [ "$CPU" = 1 ] && [ "$name" = train_1p5b ]; then
    SKIP[$name]="no CUDA (--cpu): the CPU check trains the tiny policy once, as train_135m"
  elif [ "$CPU" = 1 ] && [[ $name == trl_* ]]; then
    SKIP[$name]="no CUDA (--cpu): the side by side with TRL runs on the GPU"
  elif [[ $name == trl_* ]] && [ -n "$TRL_MISSING" ]; then
    SKIP[$name]="$TRL_MISSING"
  fi
done

now_ms() { date +%s%3N; }

# the budget of phase $1: its weight's share of the time left, over the phases still to run
budget_of() {
  local name=$1 left=0 weights=0 n=0 seen=0 other
  for other in "${NAMES[@]}"; do
    [ "$other" = "$name" ] && seen=1
    if [ "$seen" = 1 ] && [ -z "${SKIP[$other]:-}" ]; then
      weights=$((weights + ${WEIGHT[$other]})); n=$((n + 1))
    fi
  done
  left=$((DEADLINE - $(date +%s) - GRACE * n))
  local share=$((left * ${WEIGHT[$name]} / weights))
  local override="GPU_CHECK_BUDGET_$name"
  if [ -n "${!override:-}" ]; then share=${!override}; fi
  [ "$share" -gt "$left" ] && share=$left
  echo "$share $left"
}

# run_phase NAME FIGURES COMMAND...: the command under its budget, then its record
run_phase() {
  local name=$1 figures=$2; shift 2
  if [ -n "${SKIP[$name]:-}" ]; then
    "${REPORT[@]}" phase "$JSON" --name "$name" --skip "${SKIP[$name]}"
    return
  fi
  local budget left
  read -r budget left < <(budget_of "$name")
  if [ "$left" -lt "$MIN_PHASE" ] || [ "$budget" -lt 1 ]; then
    "${REPORT[@]}" phase "$JSON" --name "$name" --skip "no time left in the ${BUDGET} s budget"
    return
  fi
  echo "gpu_check: $name (budget ${budget} s): $*"
  local t0 rc ms
  t0=$(now_ms)
  timeout -k "$GRACE" "$budget" "$@" >"$DIR/$name.log" 2>&1
  rc=$?
  ms=$(($(now_ms) - t0))
  "${REPORT[@]}" phase "$JSON" --name "$name" --rc "$rc" --seconds "$((ms / 1000)).$(printf %03d $((ms % 1000)))" \
    --budget "$budget" --figures "$figures" --log "$name.log"
}

# train_run NAME SHAPE: the train app for a few steps with PPO mini-batches (a random policy earns
# no reward, so skip_zero_advantage=false makes every rollout go through the update)
train_run() {
  local name=$1 shape=$2 policy size
  if [ "$CPU" = 0 ]; then
    policy=(trainer=gpu rollout.policy.source=shape "rollout.policy.shape=$shape" rollout.policy.device=cuda)
    size=(trainer.max_steps=3 sampler.questions_per_step=8 sampler.group_size=4 optim.mini_batch_size=16
          agent.max_new_tokens_per_turn=128)
  else
    policy=(trainer=cpu rollout.policy.source=tiny)
    size=(trainer.max_steps=1 sampler.questions_per_step=2 sampler.group_size=2 optim.mini_batch_size=2
          agent.max_new_tokens_per_turn=8)
  fi
  rm -rf "${DIR:?}/$name"
  run_phase "$name" "train:$DIR/$name" python3 -m framework train warm_start.sft=false \
    dataset=synth_small retriever=bm25 "${policy[@]}" "${size[@]}" agent.max_turns=1 \
    optim.skip_zero_advantage=false trainer.val_at_end=false final_eval.enabled=false \
    trainer.checkpoint_every_n_steps=0 trainer.checkpoint_at_end=false trainer.export_policy=false \
    logging.dump_trajectories=false logger=csv +logger.flush_logs_every_n_steps=1 \
    "hydra.run.dir=$DIR/$name"
}

# trl_run NAME SHAPE: seekrl and TRL side by side (docs/benchmarks.md "The TRL benchmark at two
# shapes"), without the ceiling worker (decode_graphs measures decoding)
trl_run() {
  local name=$1 shape=$2
  run_phase "$name" "trl:$DIR/$name.json" python3 tools/bench/train_step.py --device cuda \
    --precision bf16 --no-agent --no-ceiling --dataset synth_small --questions 8 --group 4 \
    --completion 256 --rounds 1 --steps "${GPU_CHECK_TRL_STEPS:-1}" --tokenizer "$TOKENIZER" \
    --policies "shape:$shape" --backends --out "$DIR/$name.md" --json "$DIR/$name.json"
}

run_phase gpu_tests "pytest:$DIR/gpu_tests.xml" python3 -m pytest -m gpu -q -p no:cacheprovider \
  tests/integration/test_gpu.py "--junitxml=$DIR/gpu_tests.xml"
train_run train_135m smollm2-135m
train_run train_1p5b qwen2.5-1.5b
if [ "$CPU" = 0 ]; then
  run_phase decode_graphs "decode:$DIR/decode_graphs.json" python3 tools/bench/decode_graphs.py \
    --device cuda --policy shape:smollm2-135m --rollouts 64 \
    --new-tokens 128 --out "$DIR/decode_graphs.json"
else
  run_phase decode_graphs "decode:$DIR/decode_graphs.json" python3 tools/bench/decode_graphs.py \
    --device cpu --policy tiny --rollouts 8 --prompts 4 --new-tokens 16 --out "$DIR/decode_graphs.json"
fi
trl_run trl_135m smollm2-135m
trl_run trl_1p5b qwen2.5-1.5b

echo "gpu_check: $(($(date +%s) - START)) s; $JSON"
"${REPORT[@]}" --render "$JSON"
