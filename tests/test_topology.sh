#!/usr/bin/env bash
# test_topology.sh: links between GPUs, on a machine that has none of them.
# The matrices `nvidia-smi topo -m` (and `-p2p r`) print for a six-GPU PCIe
# host (two switches of three, peer-to-peer only inside a switch) and an
# eight-GPU host of two NVLink islands are given to
#   - `redlm plan --topology FILE`: TP groups inside a switch or an island
#     are costed at their link, groups across sockets at host memory speed,
#     so TP3 x PP2 ranks above TP6 on the PCIe host and the plan says why;
#   - `redlm doctor` through RL_GPU_TOPOLOGY (in place of NVML): the link
#     and P2P matrices, a warning per PCIe pair, and the NCCL transport
#     variables with what they should be here.
set -euo pipefail
: "${REDLM:?}" "${FIXTURES:?}"
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
topo=$FIXTURES/topology
cfg=$FIXTURES/configs/qwen2.5-14b.json

# tok/s the plan predicts for a layout name ("1 x TP6") in $1's output
tok_s() { awk -v l="$2" 'index($0, l " ") == 1 && NF >= 7 && $(NF-4) ~ /^[0-9]+$/ { print $(NF-4); exit }' "$1"; }

"$REDLM" plan --model "$cfg" --gpus 6 --gpu-memory 24GiB --topology "$topo/pcie-2x3.txt" > "$tmp/pcie"
sed -n '/Predicted decode speed/,$p' "$tmp/pcie"
tp6=$(tok_s "$tmp/pcie" "1 x TP6"); tp3pp2=$(tok_s "$tmp/pcie" "1 x TP3 PP2")
[ -n "$tp6" ] && [ -n "$tp3pp2" ] || fail "plan --topology: no prediction for TP6 or TP3 x PP2"
[ "$tp3pp2" -gt "$tp6" ] || fail "PCIe host: TP3 x PP2 ($tp3pp2 tok/s) should rank above TP6 ($tp6)"
grep -q "TP6 over host" "$tmp/pcie" || fail "TP6 across the sockets should be costed at host speed"
grep -q "not yet measured on PCIe hardware" "$tmp/pcie" || fail "PCIe figures must say they are not measured"
grep -q "^Over NVLink between every GPU" "$tmp/pcie" || fail "the plan does not say what NVLink would change"
echo "ok: PCIe host, TP3 x PP2 $tp3pp2 tok/s above TP6 $tp6"

"$REDLM" plan --model "$cfg" --gpus 8 --gpu-memory 80GiB --topology "$topo/nvlink-2x4.txt" > "$tmp/nv"
tp4=$(tok_s "$tmp/nv" "2 x TP4"); tp8=$(tok_s "$tmp/nv" "1 x TP8")
[ "$tp4" -gt "$tp8" ] || fail "two NVLink islands: 2 x TP4 ($tp4) should beat TP8 across them ($tp8)"
echo "ok: NVLink islands, 2 x TP4 $tp4 tok/s above TP8 $tp8"

# errors name the flag and what to do
if "$REDLM" plan --model "$cfg" --gpus 4 --topology "$topo/pcie-2x3.txt" 2> "$tmp/err"; then
    fail "a 6-GPU topology for --gpus 4 was accepted"
fi
grep -q "describes 6 GPUs but --gpus is 4" "$tmp/err" || fail "$(cat "$tmp/err")"
if "$REDLM" plan --model "$cfg" --gpus 6 --interconnect infiniband 2> "$tmp/err"; then
    fail "--interconnect infiniband was accepted"
fi
grep -q "give nvlink, pcie or host" "$tmp/err" || fail "$(cat "$tmp/err")"

# doctor on the injected PCIe host: matrix, P2P, per-pair warnings, NCCL settings
RL_GPU_TOPOLOGY="$(cat "$topo/pcie-2x3.txt")" NCCL_P2P_LEVEL=NVL NCCL_IB_DISABLE=1 \
    "$REDLM" doctor --devices 0-5 > "$tmp/doc" 2>&1 || true
cat "$tmp/doc"
grep -q "links read from RL_GPU_TOPOLOGY" "$tmp/doc" || fail "doctor: the injected topology is not named"
grep -q "link 0<->1: PIX (PCIe, no NVLink)" "$tmp/doc" || fail "doctor: no PCIe warning for 0<->1"
grep -q "link 0<->3: SYS without peer-to-peer" "$tmp/doc" || fail "doctor: 0<->3 should lack P2P"
grep -qE "^ +link +GPU0" "$tmp/doc" && grep -qE "^ +P2P +GPU0" "$tmp/doc" || fail "doctor: no matrices"
grep -q "warn  env NCCL_P2P_LEVEL=NVL: should be unset" "$tmp/doc" || fail "doctor: NCCL_P2P_LEVEL=NVL on PCIe"
grep -q "ok    env NCCL_P2P_DISABLE=(unset)" "$tmp/doc" || fail "doctor: NCCL_P2P_DISABLE not shown"
grep -q "ok    env NCCL_IB_DISABLE=1" "$tmp/doc" || fail "doctor: NCCL_IB_DISABLE not shown"
RL_GPU_TOPOLOGY="X PIX; PIX" "$REDLM" doctor --devices 0-1 > "$tmp/bad" 2>&1 || true
grep -q "RL_GPU_TOPOLOGY: row 1 has 1 links" "$tmp/bad" || fail "doctor: a malformed RL_GPU_TOPOLOGY is not reported"
echo "ok: doctor reads RL_GPU_TOPOLOGY"

# launch places each TP group where its links are fastest: on the NVLink
# islands whatever order --devices lists them in; within a PCIe switch
island() { RL_GPU_TOPOLOGY="$(cat "$topo/$1")" "$REDLM" launch --dry-run "${@:2}" -- \
               --backend cuda --model "$cfg" 2> "$tmp/launch.err"; }
island nvlink-2x4.txt --instances 2 --tp 4 --devices 0,4,1,5,2,6,3,7 > "$tmp/launch"
cat "$tmp/launch.err"
grep -q "^CUDA_VISIBLE_DEVICES=0,1,2,3 " "$tmp/launch" && grep -q "^CUDA_VISIBLE_DEVICES=4,5,6,7 " "$tmp/launch" ||
    fail "launch: TP4 groups should sit on the NVLink islands: $(cat "$tmp/launch")"
island pcie-2x3.txt --instances 2 --tp 3 --devices 0,3,1,4,2,5 > "$tmp/launch"
grep -q "^CUDA_VISIBLE_DEVICES=0,1,2 " "$tmp/launch" && grep -q "^CUDA_VISIBLE_DEVICES=3,4,5 " "$tmp/launch" ||
    fail "launch: TP3 groups should sit inside the PCIe switches: $(cat "$tmp/launch")"
island nvlink-2x4.txt --instances 1 --tp 2 --pp 2 --devices 0,4,1,5 > "$tmp/launch"
grep -q "^CUDA_VISIBLE_DEVICES=0,1,4,5 " "$tmp/launch" ||
    fail "launch: each stage's TP2 group on one island: $(cat "$tmp/launch")"
"$REDLM" launch --dry-run --instances 2 --tp 2 --devices 3,1,0,2 -- --backend cuda --model "$cfg" \
    2> /dev/null | grep -q "^CUDA_VISIBLE_DEVICES=3,1 " || fail "launch: without a topology the list order stands"
echo "ok: launch places TP groups on islands"
