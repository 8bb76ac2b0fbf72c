#!/usr/bin/env bash
# test_invariant_ptx.sh: the kernels --batch-invariant relies on do the same
# arithmetic for a row wherever the batch puts it, read in their PTX
# without a GPU.
#
# A kernel that keeps several rows per thread (the prefill attention's two
# 16-row tiles and two rows a lane, the tiled attention's rows per warp, the
# tile GEMM's fragments) runs one unrolled copy of its code per slot, and
# which slot a row lands in depends on what else is in the step.  nvcc's
# default --fmad=true lets the compiler fuse a multiply and an add into one
# fma (one rounding instead of two) wherever it likes, copy by copy: the
# prefill attention once fused `l * corr + p` in two of its four slots and
# not in the others, so a row's softmax sum, and its output's last bit,
# changed with the chunk its prompt was cut into.  The kernels below round
# each such step explicitly (__fmul_rn, __fadd_rn, fmaf); this test holds
# them to it: compiled as the build compiles them and again with
# --fmad=false, every kernel named here must have the same number of fma
# instructions (none made by contraction) and no mul.f32 without a rounding
# mode feeding an add.f32 or sub.f32 without one (a pair ptxas may still
# fuse).  A build without nvcc: skipped (77).
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-$(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")}
if [ "${CUDA:-1}" = 0 ] || [ ! -x "$NVCC" ]; then echo "skipped: no nvcc"; exit 77; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# file: the kernels of it that must not contract (an awk regex on the mangled name)
checks=(
    "kernels/cuda/attention.cu:attention_fa_kernel|attention_kernel"
    "kernels/cuda/gemm.cu:tile_gemm_kernel"
    "kernels/cuda/moe.cu:tile_gemm_kernel"
    "kernels/cuda/sample.cu:."
)
for arch in 80 90; do
    for c in "${checks[@]}"; do
        src=${c%%:*} want=${c#*:} base=$tmp/$(basename "$src" .cu).$arch
        for fmad in true false; do
            "$NVCC" -O3 -std=c++17 -arch=compute_$arch -DRL_HAVE_CUDA -I. \
                --expt-relaxed-constexpr -fmad=$fmad -ptx -o "$base.$fmad.ptx" "$src"
        done
        python3 - "$base" "$want" "$src" "$arch" <<'PY'
import re, sys
base, want, src, arch = sys.argv[1:]
def kernels(path):
    text = open(path).read()
    out = {}
    for body in re.split(r"\n(?=\.(?:visible |weak )?\.?entry )", text)[1:]:
        m = re.match(r"\.(?:visible |weak )?\.?entry (\S+)\(", body)
        if m and re.search(want, m.group(1)):
            # a mul.f32 (no rounding mode) whose result an add.f32 or
            # sub.f32 takes: a pair ptxas may still fuse
            prods = set(re.findall(r"\bmul\.f32\s+(%f\d+),", body))
            sums = re.findall(r"\b(?:add|sub)\.f32\s+%f\d+,\s*(%f\d+),\s*(%f\d+);", body)
            out[m.group(1)] = (len(re.findall(r"\bfma\.rn\.f32\b", body)),
                               sum(x in prods or y in prods for x, y in sums))
    return out
built, plain = kernels(base + ".true.ptx"), kernels(base + ".false.ptx")
if not built:
    sys.exit(f"FAIL: no kernel matching '{want}' in {src} (renamed? update this test)")
bad = [(k, built[k], plain.get(k)) for k in built
       if plain.get(k) is None or built[k][0] != plain[k][0] or built[k][1]]
for k, b, p in bad:
    print(f"FAIL {src} compute_{arch} {k}: {b[0]} fma as built, "
          f"{p[0] if p else '?'} with --fmad=false; {b[1]} loose mul.f32 feeding an add")
if bad:
    sys.exit(f"FAIL: {len(bad)} kernels of {src} let the compiler fuse a multiply and an add: "
             "a row's result would depend on its slot; round the step with __fmul_rn / "
             "__fadd_rn or write the fmaf")
print(f"ok: {len(built)} kernels of {src} (compute_{arch}): no fused multiply-add but those written")
PY
    done
done
