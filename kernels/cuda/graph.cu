/* graph.cu: decode steps replayed as CUDA graphs.
 *
 * A decode step at small batch launches ~300 short kernels; launched one by
 * one, the GPU waits between them.  Captured once as a graph, a step is one
 * launch.  The model pads decode steps to bucket sizes (model.c), so a
 * running set that changes size every few steps still meets few shapes.
 * Everything a step's kernels take as arguments is fixed by its shape
 * (tokens, sequences, logit rows, block-table pitch): begin_step stages the
 * batch at offsets that depend on those alone, pads the block tables to a
 * power-of-two pitch, and attention plans its splits for that pitch, so one
 * capture serves every later step of the shape and of graph_run's variant
 * (bench --leave-out's kinds change the work, not the shape).  A shape runs
 * eagerly the first time (which sizes scratch buffers and plans GEMMs), is
 * captured the second, and replayed after.  Buffers a capture points into
 * never move while it lives: growing the staging or scratch buffer, or a new
 * KV cache, drops every capture.  A capture that fails (an operation that
 * cannot be captured) leaves its shape eager. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"

#define GRAPHS_MAX 48

typedef struct rlGraph {
    int n_tokens, n_seqs, n_rows, pitch;
    unsigned variant;       /* graph_run's: the step's work beyond its shape */
    int state;              /* 1: seen once; 2: captured; -1: eager only */
    unsigned long last_use;
    cudaGraphExec_t exec;
} rlGraph;

struct rlGraphs {
    rlGraph g[GRAPHS_MAX];
    int n;
    unsigned long tick;
};

int cuda_graphs_init(rlCuda *c, rlError *err) {
    c->graphs = (rlGraphs *)calloc(1, sizeof *c->graphs);
    if (!c->graphs) return rl_error(err, RL_EMEMORY, "CUDA backend: out of host memory");
    return 0;
}

void cuda_graphs_clear(rlCuda *c) {
    if (!c->graphs) return;
    for (int i = 0; i < c->graphs->n; i++)
        if (c->graphs->g[i].exec) cudaGraphExecDestroy(c->graphs->g[i].exec);
    memset(c->graphs->g, 0, sizeof c->graphs->g);
    c->graphs->n = 0;
}

void cuda_graphs_free(rlCuda *c) {
    cuda_graphs_clear(c);
    free(c->graphs);
    c->graphs = NULL;
}

/* The entry of the current shape and variant, made (least recently used one
 * replaced) when new. */
static rlGraph *graph_entry(rlCuda *c, unsigned variant) {
    rlGraphs *gs = c->graphs;
    for (int i = 0; i < gs->n; i++) {
        rlGraph *g = &gs->g[i];
        if (g->n_tokens == c->n_tokens && g->n_seqs == c->n_seqs && g->n_rows == c->n_rows &&
            g->pitch == c->max_blocks && g->variant == variant)
            return g;
    }
    rlGraph *g = &gs->g[0];
    if (gs->n < GRAPHS_MAX)
        g = &gs->g[gs->n++];
    else
        for (int i = 1; i < gs->n; i++)
            if (gs->g[i].last_use < g->last_use) g = &gs->g[i];
    if (g->exec) cudaGraphExecDestroy(g->exec);
    *g = (rlGraph){c->n_tokens, c->n_seqs, c->n_rows, c->max_blocks, variant, 0, 0, NULL};
    return g;
}

/* Capture body into g; on failure the shape stays eager and nothing is recorded. */
static void graph_capture(rlCuda *c, rlGraph *g, void (*body)(void *), void *ctx) {
    cudaGraph_t graph = NULL;
    g->state = -1;
    if (cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    c->capturing = 1;
    body(ctx);
    c->capturing = 0;
    cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
    if (e == cudaSuccess && c->err.code == RL_OK &&
        cudaGraphInstantiate(&g->exec, graph, 0) == cudaSuccess)
        g->state = 2;
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    c->err.code = RL_OK;     /* the step runs again below, eagerly or replayed */
    c->err.msg[0] = 0;
}

int cuda_graph_run(rlBackend *be, void (*body)(void *ctx), void *ctx, unsigned variant,
                   rlError *err) {
    (void)err;    /* failures are recorded and reported by the step's sync */
    rlCuda *c = cuda_of(be);
    if (!c->graphs || !c->graph_shape || c->err.code != RL_OK) {
        body(ctx);
        return 0;
    }
    rlGraph *g = graph_entry(c, variant);
    g->last_use = ++c->graphs->tick;
    if (g->state == 1) graph_capture(c, g, body, ctx);
    if (g->state == 2) {
        cuda_check(c, cudaGraphLaunch(g->exec, c->stream), "decode step (graph launch)");
        return 0;
    }
    if (g->state == 0) g->state = 1;
    body(ctx);
    return 0;
}
