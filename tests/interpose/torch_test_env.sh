# Sourced by the shim's PyTorch tests (run_torch_forward.sh, run_torch_detection.sh): Debian's
# Python with torch and torchvision, or exit 77 (CTest's SKIP_RETURN_CODE); and a scratch
# directory $work, removed at exit.
python=/usr/bin/python3
if ! "$python" -c 'import torch, torchvision' >/dev/null 2>&1; then
  echo "SKIP: $python cannot import torch and torchvision"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
