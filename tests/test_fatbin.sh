#!/usr/bin/env bash
# test_fatbin.sh: the GPU code built into redlm, read without a GPU or
# cuobjdump.  nvcc puts each .cu file's code in a fatbin inside the ELF
# section .nv_fatbin: a header (magic 0xBA55ED50, header size, size of the
# entries), then entries of kind 1 (PTX) or 2 (machine code), each with its
# header size, payload size and its compute capability at byte 28.  Every
# fatbin must hold machine code for each of CUDA_ARCHS (default 80 86 89 90:
# A100, RTX 3090 / A10, RTX 4090 / L4, H100 / H200) and PTX for CUDA_PTX
# (default the newest), so one binary starts on all of them and later GPUs
# compile the PTX.  A build without nvcc has no fatbin: skipped.
set -euo pipefail
: "${REDLM:?}"
archs=${CUDA_ARCHS:-80 86 89 90}
ptx=${CUDA_PTX:-$(tr ' ' '\n' <<< "$archs" | sort -n | tail -1)}
if [ "${CUDA:-1}" = 0 ]; then echo "skipped: built without CUDA"; exit 0; fi
python3 - "$REDLM" "$archs" "$ptx" <<'PY'
import struct, sys
path, want_sass, want_ptx = sys.argv[1], set(map(int, sys.argv[2].split())), int(sys.argv[3])
d = open(path, "rb").read()
if d[:4] != b"\x7fELF" or d[4] != 2:
    sys.exit(f"FAIL: {path} is not a 64-bit ELF file")
shoff, = struct.unpack_from("<Q", d, 0x28)
shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3A)
secs = [struct.unpack_from("<IIQQQQ", d, shoff + i * shentsize) for i in range(shnum)]
names = secs[shstrndx][4]
fat = [s for s in secs if d[names + s[0]:d.index(b"\0", names + s[0])] == b".nv_fatbin"]
if not fat:
    print(f"skipped: {path} has no .nv_fatbin section (built without CUDA)")
    sys.exit(0)
off, size = fat[0][4], fat[0][5]
bins, p = [], off
while p + 16 <= off + size:
    magic, _, hsize, fsize = struct.unpack_from("<IHHQ", d, p)
    if magic != 0xBA55ED50:        # padding between fatbins
        p += 8
        continue
    sass, ptxs, q = set(), set(), p + hsize
    while q < p + hsize + fsize:
        kind, _, ehsize, payload = struct.unpack_from("<HHIQ", d, q)
        arch, = struct.unpack_from("<I", d, q + 28)
        (ptxs if kind == 1 else sass).add(arch)
        q += ehsize + payload
    bins.append((sass, ptxs))
    p += hsize + fsize
bad = [(i, s, x) for i, (s, x) in enumerate(bins) if not want_sass <= s or want_ptx not in x]
for i, (s, x) in enumerate(bins[:3]):
    print(f"fatbin {i}: machine code for", " ".join(f"sm_{a}" for a in sorted(s)),
          "+ PTX", " ".join(f"compute_{a}" for a in sorted(x)))
if not bins or bad:
    i, s, x = bad[0] if bad else (0, set(), set())
    sys.exit(f"FAIL: {len(bad)} of {len(bins)} fatbins lack sm_{sorted(want_sass)} or "
             f"compute_{want_ptx} (fatbin {i} has sm {sorted(s)}, PTX {sorted(x)})")
print(f"ok: all {len(bins)} fatbins hold sm_" + "/".join(map(str, sorted(want_sass))) +
      f" machine code and compute_{want_ptx} PTX")
PY
