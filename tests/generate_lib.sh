# generate_lib.sh: what the `redlm generate` scripts share (sourced): strict
# mode, a temporary folder removed on exit, fail(), and the small fixture
# model they run, $dir.
set -euo pipefail
: "${REDLM:?}" "${FIXTURES:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
dir=$FIXTURES/models/qwen2-tiny-gqa3
