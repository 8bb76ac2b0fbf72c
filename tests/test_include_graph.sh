#!/usr/bin/env bash
# test_include_graph.sh: the tree keeps its layers (scripts/include-graph:
# no circle between rooms or files, no include that goes up or sideways into
# another room), and the checker itself finds each kind of fault in a small
# tree made for it.
set -u
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

scripts/include-graph > "$tmp/tree.out" || { cat "$tmp/tree.out"; fail "the tree breaks its layers"; }
cat "$tmp/tree.out"

# A tree with one of each fault: lib includes engine (up), redis includes
# doctor (sideways), two headers of engine include each other (a circle of
# files), and kernels includes its sub-room cpu (up inside a layer).
mkdir -p "$tmp/t/worker/lib" "$tmp/t/worker/engine" "$tmp/t/worker/redis" "$tmp/t/worker/doctor" \
         "$tmp/t/kernels/cpu" "$tmp/t/sched" "$tmp/t/tests"
echo '#include "worker/engine/a.h"' > "$tmp/t/worker/lib/l.h"
echo '#include "worker/doctor/d.h"' > "$tmp/t/worker/redis/r.c"
echo '' > "$tmp/t/worker/doctor/d.h"
echo '#include "worker/engine/b.h"' > "$tmp/t/worker/engine/a.h"
echo '#include "worker/engine/a.h"' > "$tmp/t/worker/engine/b.h"
echo '#include "kernels/cpu/c.h"' > "$tmp/t/kernels/k.c"
echo '#include "kernels/k.h"' > "$tmp/t/kernels/cpu/c.h"
echo '' > "$tmp/t/kernels/k.h"
scripts/include-graph "$tmp/t" > "$tmp/bad.out" && { cat "$tmp/bad.out"; fail "a broken tree passed"; }
for want in "UP: worker/lib/l.h (layer 1) includes worker/engine/a.h (layer 4)" \
            "SIDEWAYS: worker/redis/r.c includes worker/doctor/d.h" \
            "CIRCLE between files: worker/engine/a.h <-> worker/engine/b.h" \
            "CIRCLE between rooms: kernels <-> kernels/cpu" \
            "SIDEWAYS: kernels/k.c includes kernels/cpu/c.h"; do
    grep -qF "$want" "$tmp/bad.out" || { cat "$tmp/bad.out"; fail "not reported: $want"; }
done
echo "include-graph: the tree passes; a broken tree fails with each fault named"
