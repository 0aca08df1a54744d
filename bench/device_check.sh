#!/usr/bin/env bash
# Device check for the node labeller: run on a machine with a real NVIDIA GPU.
#
#   OUT=/some/dir bash bench/device_check.sh        # from the repository root
#
# What it does (read-only on the GPU: it only queries, never changes a setting):
#   1. records nvidia-smi's raw outputs in every shape the parser accepts: the
#      labeller's own query (with and without header and units), `-L`, the
#      plain table, and `--help-query-gpu` (to confirm the field names exist);
#   2. parses each with webhook.core.nvidia_smi (standard library only) and checks
#      that every shape yields the same GPU names and the same labels;
#   3. runs `python -S -m webhook.cli label-node --once --dry-run --node test-node`:
#      the real nvidia-smi, no site-packages at all, no cluster; the JSON merge
#      patch it prints is what the DaemonSet would apply;
#   4. installs the package into a fresh venv when it can (wheels in .whl/,
#      see below) and then runs `gpuclass label-node --once --dry-run --node
#      test-node` too; without the wheels this step is recorded as skipped.
# Everything lands in $OUT (default bench/out/device-check): one file per
# command (stdout, stderr, exit status, seconds) and summary.txt.
# Exit status: 0 when steps 2 and 3 passed, 1 otherwise.
#
# The full `gpuclass` CLI needs the project's dependencies. On a machine
# without internet, build them here first and carry .whl/ along:
#   pip download --dest .whl --only-binary=:all: --python-version 3.12 \
#       --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
#       flask gunicorn jsonpatch kubernetes cryptography PyYAML prometheus-client
#   pip wheel --no-deps --wheel-dir .whl .
set -u

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
OUT="${OUT:-$REPO/bench/out/device-check}"
mkdir -p "$OUT"
PYTHON="${PYTHON:-python3}"
QUERY_FIELDS="index,name,memory.total,mig.mode.current"
FAILED=0
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"

note() { echo "$*" | tee -a "$SUMMARY"; }

# capture NAME CMD...: stdout, stderr, exit status and duration of one command.
capture() {
  local name="$1"
  shift
  local start_ns end_ns rc
  start_ns=$(date +%s%N)
  timeout 120 "$@" >"$OUT/$name.stdout" 2>"$OUT/$name.stderr"
  rc=$?
  end_ns=$(date +%s%N)
  echo "$rc" >"$OUT/$name.rc"
  printf '%s\n' "$*" >"$OUT/$name.cmd"
  note "$(printf '%-28s rc=%-3s %6sms  %s' "$name" "$rc" "$(((end_ns - start_ns) / 1000000))" "$*")"
  return "$rc"
}

note "== device check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
note "python: $($PYTHON --version 2>&1)  nvidia-smi: $(command -v nvidia-smi || echo MISSING)"

# 1. raw outputs
capture smi_table nvidia-smi
capture smi_list nvidia-smi -L
capture smi_query_header_nounits nvidia-smi --query-gpu=$QUERY_FIELDS --format=csv,nounits
capture smi_query_noheader_nounits nvidia-smi --query-gpu=$QUERY_FIELDS --format=csv,noheader,nounits
capture smi_query_header_units nvidia-smi --query-gpu=$QUERY_FIELDS --format=csv
capture smi_query_noheader_units nvidia-smi --query-gpu=$QUERY_FIELDS --format=csv,noheader
capture smi_query_extra_fields nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,mig.mode.current,mig.mode.pending,driver_version --format=csv
capture smi_help_query_gpu nvidia-smi --help-query-gpu
for field in index name memory.total mig.mode.current; do
  if grep -q "^\"$field\"" "$OUT/smi_help_query_gpu.stdout"; then
    note "field $field: documented by this nvidia-smi"
  else
    note "field $field: NOT FOUND in --help-query-gpu"
  fi
done

# 2. parse every shape with the stdlib-only parser and compare
cat >"$OUT/parse_check.py" <<'PY'
"""Parse each recorded nvidia-smi output; check every shape agrees with the labeller's own query."""
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, sys.argv[2])
from webhook.core.labels import build_desired_labels, summarise_gpus  # noqa: E402
from webhook.core.nvidia_smi import parse_nvidia_smi_output  # noqa: E402

out = Path(sys.argv[1])
results, ok = {}, True
for name in ["smi_query_header_nounits", "smi_query_noheader_nounits", "smi_query_header_units",
             "smi_query_noheader_units", "smi_query_extra_fields", "smi_list", "smi_table"]:
    text = (out / f"{name}.stdout").read_text()
    try:
        gpus = parse_nvidia_smi_output(text)
    except Exception as exc:  # recorded, and counted as a failure for the query shapes
        results[name] = {"error": f"{type(exc).__name__}: {exc}"}
        ok = ok and name in ("smi_table", "smi_list")  # the table may truncate long names
        continue
    results[name] = {
        "gpus": [dataclasses.asdict(g) for g in gpus],
        "labels": build_desired_labels(summarise_gpus(gpus)),
    }
reference = results["smi_query_header_nounits"]
for name, result in results.items():
    if "gpus" not in result or "gpus" not in reference:
        continue
    same_names = [g["name"] for g in result["gpus"]] == [g["name"] for g in reference["gpus"]]
    # -L carries no memory, so compare only the model label there.
    same_labels = (result["labels"].get("gpu-type") == reference["labels"].get("gpu-type")
                   if name == "smi_list" else result["labels"] == reference["labels"])
    result["agrees_with_labeller_query"] = same_names and same_labels
    ok = ok and same_names and same_labels
(out / "parse_check.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
print(json.dumps({name: r.get("labels", r.get("error")) for name, r in results.items()}, indent=2))
sys.exit(0 if ok else 1)
PY
if capture parse_check "$PYTHON" -S "$OUT/parse_check.py" "$OUT" "$REPO"; then
  note "parse check: every shape parsed and agreed"
else
  note "parse check: FAILED (see parse_check.stdout/.stderr and parse_check.json)"
  FAILED=1
fi

# 3. the labeller's dry run, standard library only, against the real nvidia-smi
if capture labeller_dry_run_stdlib env -u KUBECONFIG HOME="$OUT" "$PYTHON" -S -m webhook.cli label-node --once --dry-run --node test-node; then
  note "dry-run patch (stdlib only): $(tr -d ' \n' <"$OUT/labeller_dry_run_stdlib.stdout")"
else
  FAILED=1
fi

# 4. the installed CLI, when the wheels came along
if ls .whl/*.whl >/dev/null 2>&1; then
  if capture venv "$PYTHON" -m venv "$OUT/venv" &&
    capture pip_install "$OUT/venv/bin/pip" install --no-index --find-links .whl gpu-class; then
    capture gpuclass_dry_run env -u KUBECONFIG HOME="$OUT" "$OUT/venv/bin/gpuclass" label-node --once --dry-run --node test-node || true
    if cmp -s "$OUT/gpuclass_dry_run.stdout" "$OUT/labeller_dry_run_stdlib.stdout"; then
      note "gpuclass label-node printed the same patch as the stdlib run"
    else
      note "gpuclass label-node: patch differs from the stdlib run (or it failed)"
    fi
    rm -rf "$OUT/venv"  # not worth bringing back
  fi
elif "$PYTHON" -c "import flask, gunicorn, jsonpatch, kubernetes, cryptography, yaml, prometheus_client" 2>/dev/null; then
  # The dependencies happen to be installed: run the CLI from the source tree.
  capture gpuclass_dry_run env -u KUBECONFIG HOME="$OUT" PYTHONPATH="$REPO" "$PYTHON" -m webhook.cli label-node --once --dry-run --node test-node || true
  if cmp -s "$OUT/gpuclass_dry_run.stdout" "$OUT/labeller_dry_run_stdlib.stdout"; then
    note "gpuclass label-node printed the same patch as the stdlib run"
  else
    note "gpuclass label-node: patch differs from the stdlib run (or it failed)"
  fi
else
  note "gpuclass label-node: skipped (no wheels in .whl/ and no dependencies installed; see the header)"
fi

note "== result: $([ "$FAILED" = 0 ] && echo PASS || echo FAIL)"
exit "$FAILED"
