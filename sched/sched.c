/* sched.c: step building, admission, forking of samples and preemption.
 *
 * Requests live in two arrays kept in run order (priority, then arrival):
 * running (holding blocks) and waiting (new or preempted).  Insertion is a
 * binary search plus a memmove: O(n) per admission, negligible next to a
 * forward step even with thousands queued; a heap would lose the cheap
 * in-order walk every step does.
 *
 * A sample's token and block arrays grow as it runs (capacity doubling, up
 * to the request's prompt + max_tokens): a queued request holds what its
 * prompt needs, however large its max_tokens, so thousands may wait. */
#include "sched/sched.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

struct rlSched {
    rlSchedConfig cfg;
    rlBlockPool *pool;
    int max_blocks;             /* block table width: max_model_len in blocks */
    rlSchedReq **running, **waiting, **all;
    int n_running, n_waiting, n_all;
    int cap_running, cap_waiting, cap_all;
    uint64_t next_arrival;
    uint64_t step_id;           /* numbers steps: rlSchedReq.planned_step */
    uint64_t preemptions, hit_tokens, query_tokens;
};

/* Generated tokens a new sample has room for before its first growth. */
#define TOKEN_SLACK 16

static int ceil_div(int a, int b) { return (a + b - 1) / b; }

/* Room for need elements of size bytes in *arr: the capacity doubles from
 * *cap (from need when there is none yet), never past most (at least need). */
static int grow_to(void *arr, int *cap, int need, int most, size_t size) {
    if (need <= *cap) return 0;
    int64_t n = *cap ? *cap : need;
    while (n < need) n *= 2;
    if (n > most) n = most;
    void *p = realloc(*(void **)arr, (size_t)n * size);
    if (!p) return -1;
    *(void **)arr = p;
    *cap = (int)n;
    return 0;
}

static int grow(void *arr, int *cap, int need) {
    return grow_to(arr, cap, need, INT_MAX, sizeof(void *));
}

rlSched *sched_create(const rlSchedConfig *cfg) {
    if (cfg->block_size <= 0 || cfg->n_blocks <= 0 || cfg->max_num_seqs <= 0 ||
        cfg->max_num_batched_tokens <= 0 || cfg->max_model_len <= 0)
        return NULL;
    rlSched *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->cfg = *cfg;
    if (s->cfg.max_prompt_rows <= 0 || s->cfg.max_prompt_rows > cfg->max_num_batched_tokens)
        s->cfg.max_prompt_rows = cfg->max_num_batched_tokens;
    s->max_blocks = ceil_div(cfg->max_model_len, cfg->block_size);
    s->pool = block_pool_create(cfg->n_blocks, cfg->block_size);
    if (!s->pool) {
        sched_free(s);
        return NULL;
    }
    return s;
}

rlStep *sched_step_create(const rlSched *s) {
    rlStep *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    size_t nt = (size_t)s->cfg.max_num_batched_tokens, ns = (size_t)s->cfg.max_num_seqs;
    p->max_blocks = s->max_blocks;
    p->tokens = malloc(nt * sizeof(int32_t));
    p->positions = malloc(nt * sizeof(int32_t));
    p->slots = malloc(nt * sizeof(int32_t));
    p->seq_start = calloc(ns + 1, sizeof(int32_t));
    p->seq_len = malloc(ns * sizeof(int32_t));
    p->block_tables = malloc(ns * (size_t)s->max_blocks * sizeof(int32_t));
    p->rows = malloc(((size_t)s->cfg.max_prompt_rows + ns) * sizeof(rlSchedRow));
    p->seq_req = malloc(ns * sizeof(rlSchedReq *));
    p->seq_index = malloc(ns * sizeof(int32_t));
    if (!p->tokens || !p->positions || !p->slots || !p->seq_start || !p->seq_len ||
        !p->block_tables || !p->rows || !p->seq_req || !p->seq_index) {
        sched_step_free(p);
        return NULL;
    }
    return p;
}

void sched_step_free(rlStep *p) {
    if (!p) return;
    free(p->tokens);
    free(p->positions);
    free(p->slots);
    free(p->seq_start);
    free(p->seq_len);
    free(p->block_tables);
    free(p->rows);
    free(p->seq_req);
    free(p->seq_index);
    free(p->expired);
    free(p);
}

static void req_free(rlSchedReq *r) {
    for (int i = 0; i < r->n; i++) {
        free(r->seqs[i].tokens);
        free(r->seqs[i].blocks);
    }
    free(r->seqs);
    free(r);
}

void sched_free(rlSched *s) {
    if (!s) return;
    for (int i = 0; i < s->n_all; i++) req_free(s->all[i]);
    free(s->all);
    free(s->running);
    free(s->waiting);
    block_pool_free(s->pool);
    free(s);
}

/* The prompt's full blocks are shared by all samples; each sample then needs
 * its own blocks for the prompt's tail and its generated tokens. */
int sched_blocks_needed(const rlSched *s, int n_prompt, int n, int max_tokens) {
    int bs = s->cfg.block_size;
    return n_prompt / bs + n * ceil_div(n_prompt % bs + max_tokens, bs);
}

int sched_max_tokens(const rlSched *s, int n_prompt, int n) {
    int bs = s->cfg.block_size;
    int64_t context = (int64_t)s->cfg.max_model_len - n_prompt;
    /* each sample's blocks once the shared full blocks of the prompt are out */
    int64_t per = n > 0 ? ((int64_t)s->cfg.n_blocks - n_prompt / bs) / n : 0;
    int64_t pool = per * bs - n_prompt % bs;
    int64_t m = context < pool ? context : pool;
    return m > 0 ? (int)m : 0;
}

/* a runs before b */
static int req_before(const rlSchedReq *a, const rlSchedReq *b) {
    if (a->priority != b->priority) return a->priority < b->priority;   /* lower first, as vLLM */
    return a->arrival < b->arrival;
}

static void list_insert(rlSchedReq **list, int *n, rlSchedReq *r) {
    int lo = 0, hi = *n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (req_before(list[mid], r)) lo = mid + 1;
        else hi = mid;
    }
    memmove(list + lo + 1, list + lo, (size_t)(*n - lo) * sizeof(*list));
    list[lo] = r;
    (*n)++;
}

static void list_remove(rlSchedReq **list, int *n, rlSchedReq *r) {
    for (int i = 0; i < *n; i++) {
        if (list[i] != r) continue;
        memmove(list + i, list + i + 1, (size_t)(*n - i - 1) * sizeof(*list));
        (*n)--;
        return;
    }
}

/* Room in q's block table for its first n_tokens tokens, up to the most
 * its request can ever hold. */
static int seq_room(const rlSched *s, const rlSchedReq *r, rlSchedSeq *q, int n_tokens) {
    int bs = s->cfg.block_size;
    return grow_to(&q->blocks, &q->cap_blocks, ceil_div(n_tokens, bs),
                   ceil_div(r->n_prompt + r->max_tokens, bs), sizeof(int32_t));
}

rlSchedAdd sched_add(rlSched *s, const rlSchedParams *p, rlSchedReq **out) {
    *out = NULL;
    if (p->n_prompt < 1) return RL_SCHED_EMPTY;
    if (p->n < 1 || p->n > s->cfg.max_num_seqs) return RL_SCHED_TOO_WIDE;
    if (p->max_tokens < 0 || (int64_t)p->n_prompt + p->max_tokens > s->cfg.max_model_len)
        return RL_SCHED_TOO_LONG;
    if (sched_blocks_needed(s, p->n_prompt, p->n, p->max_tokens) > s->cfg.n_blocks)
        return RL_SCHED_TOO_BIG;
    /* Any request may sit in either list (preemption moves them back). */
    if (grow(&s->all, &s->cap_all, s->n_all + 1) ||
        grow(&s->waiting, &s->cap_waiting, s->n_all + 1) ||
        grow(&s->running, &s->cap_running, s->n_all + 1))
        return RL_SCHED_ENOMEM;
    rlSchedReq *r = calloc(1, sizeof(*r));
    if (!r) return RL_SCHED_ENOMEM;
    r->n = p->n;
    r->seqs = calloc((size_t)p->n, sizeof(*r->seqs));
    if (!r->seqs) {
        free(r);
        return RL_SCHED_ENOMEM;
    }
    r->n_prompt = p->n_prompt;
    r->max_tokens = p->max_tokens;
    /* Every sample holds the prompt (a fork recomputes its tail from it)
     * and a table for the prompt's blocks: req_fork's shared blocks then
     * always fit. */
    int first_tokens = p->n_prompt + (p->max_tokens < TOKEN_SLACK ? p->max_tokens : TOKEN_SLACK);
    for (int i = 0; i < p->n; i++) {
        rlSchedSeq *q = &r->seqs[i];
        if (grow_to(&q->tokens, &q->cap_tokens, first_tokens, first_tokens, sizeof(int32_t)) ||
            seq_room(s, r, q, p->n_prompt)) {
            req_free(r);
            return RL_SCHED_ENOMEM;
        }
        memcpy(q->tokens, p->prompt, (size_t)p->n_prompt * sizeof(int32_t));
        q->n_tokens = p->n_prompt;
        q->state = i == 0 ? RL_SEQ_ACTIVE : RL_SEQ_FORK_WAIT;
    }
    r->state = RL_REQ_WAITING;
    r->priority = p->priority;
    r->deadline_ms = p->deadline_ms;
    r->prompt_logprobs = p->prompt_logprobs;
    r->user = p->user;
    r->arrival = s->next_arrival++;
    r->all_index = s->n_all;
    s->all[s->n_all++] = r;
    list_insert(s->waiting, &s->n_waiting, r);
    *out = r;
    return RL_SCHED_OK;
}

static int seq_leader(const rlSchedReq *r) {
    for (int i = 0; i < r->n; i++)
        if (r->seqs[i].state != RL_SEQ_FINISHED) return i;
    return -1;
}

static int req_active_seqs(const rlSchedReq *r) {
    int n = 0;
    for (int i = 0; i < r->n; i++) n += r->seqs[i].state != RL_SEQ_FINISHED;
    return n;
}

static int running_seqs(const rlSched *s) {
    int n = 0;
    for (int i = 0; i < s->n_running; i++) n += req_active_seqs(s->running[i]);
    return n;
}

/* Last block first, so a freed prefix's first blocks are the last evicted. */
static void seq_release(rlSched *s, rlSchedSeq *q) {
    while (q->n_blocks > 0) block_unref(s->pool, q->blocks[--q->n_blocks]);
    q->n_computed = 0;
}

static void req_preempt(rlSched *s, rlStep *p, rlSchedReq *r) {
    int lead = seq_leader(r);
    for (int i = 0; i < r->n; i++) {
        rlSchedSeq *q = &r->seqs[i];
        seq_release(s, q);
        if (q->state != RL_SEQ_FINISHED) q->state = i == lead ? RL_SEQ_ACTIVE : RL_SEQ_FORK_WAIT;
    }
    list_remove(s->running, &s->n_running, r);
    r->state = RL_REQ_PREEMPTED;
    r->n_preemptions++;
    list_insert(s->waiting, &s->n_waiting, r);
    s->preemptions++;
    p->n_preempted++;
}

static int seq_runnable(const rlSchedSeq *q) {
    return q->state == RL_SEQ_ACTIVE && q->n_computed < q->n_tokens;
}

static int seq_new_blocks(const rlSched *s, const rlSchedSeq *q, int chunk) {
    int need = ceil_div(q->n_computed + chunk, s->cfg.block_size) - q->n_blocks;
    return need > 0 ? need : 0;
}

/* How many of q's uncomputed tokens to run: at most left, and no more prompt
 * positions wanting a logit row than *rows allows (sample rows need no
 * budget: there is at most one per running sequence).  Takes the rows used. */
static int seq_chunk(const rlSchedReq *r, const rlSchedSeq *q, int left, int *rows) {
    int start = q->n_computed;
    int chunk = q->n_tokens - start < left ? q->n_tokens - start : left;
    if (!r->prompt_logprobs) return chunk;
    int lo = start > r->plp_done ? start : r->plp_done;
    int hi = start + chunk < r->n_prompt - 1 ? start + chunk : r->n_prompt - 1;
    if (hi - lo > *rows) {
        hi = lo + *rows;
        chunk = hi - start;
    }
    if (hi > lo) *rows -= hi - lo;
    return chunk;
}

static void plan_row(rlStep *p, rlRowKind kind, int32_t token, rlSchedReq *r, int seq,
                     int step, int position, int target) {
    p->rows[p->n_rows++] = (rlSchedRow){.kind = kind, .token = token, .req = r, .seq = seq,
                                        .step = step, .position = position, .target = target};
}

/* Later samples take the first sample's full prompt blocks once they are
 * computed, and recompute the prompt's tail into blocks of their own. */
static void req_fork(rlSched *s, rlSchedReq *r, const rlSchedSeq *lead) {
    int full = r->n_prompt / s->cfg.block_size;
    for (int i = 0; i < r->n; i++) {
        rlSchedSeq *q = &r->seqs[i];
        if (q->state != RL_SEQ_FORK_WAIT) continue;
        for (int j = 0; j < full; j++) {
            block_ref(s->pool, lead->blocks[j]);
            q->blocks[j] = lead->blocks[j];
        }
        q->n_blocks = full;
        q->n_computed = full * s->cfg.block_size;
        q->state = q->n_tokens > r->n_prompt ? RL_SEQ_ACTIVE : RL_SEQ_AWAIT_TOKEN;
    }
}

/* Put chunk tokens of sample k into the plan; its blocks must be available
 * and its table have room for them (seq_room). */
static int plan_seq(rlSched *s, rlStep *p, rlSchedReq *r, int k, int chunk) {
    int rows0 = p->n_rows;
    rlSchedSeq *q = &r->seqs[k];
    int bs = s->cfg.block_size;
    int start = q->n_computed, end = start + chunk;
    while (q->n_blocks * bs < end) q->blocks[q->n_blocks++] = block_alloc(s->pool);

    int idx = p->n_seqs++;
    r->planned_step = s->step_id;
    p->seq_req[idx] = r;
    p->seq_index[idx] = k;
    for (int pos = start; pos < end; pos++) {
        int t = p->n_tokens++;
        p->tokens[t] = q->tokens[pos];
        p->positions[t] = pos;
        p->slots[t] = q->blocks[pos / bs] * bs + pos % bs;
        if (r->prompt_logprobs && pos < r->n_prompt - 1 && pos >= r->plp_done)
            plan_row(p, RL_ROW_PROMPT, t, r, k, 0, pos, q->tokens[pos + 1]);
    }
    int prompt_rows = p->n_rows - rows0;
    if (r->prompt_logprobs && end > r->plp_done)
        r->plp_done = end < r->n_prompt - 1 ? end : r->n_prompt - 1;
    if (end == q->n_tokens && r->max_tokens > 0) {
        int last = p->n_tokens - 1;
        if (!r->forked) {
            /* The prompt's last logits give every sample its first token. */
            for (int i = 0; i < r->n; i++)
                if (r->seqs[i].state != RL_SEQ_FINISHED) plan_row(p, RL_ROW_SAMPLE, last, r, i, 0, 0, -1);
        } else {
            plan_row(p, RL_ROW_SAMPLE, last, r, k, q->n_tokens - r->n_prompt, 0, -1);
        }
    }
    if (end == q->n_tokens) r->forked = 1;
    if (s->cfg.prefix_caching)
        for (int j = start / bs; j < end / bs; j++)
            block_register(s->pool, q->blocks[j], j ? q->blocks[j - 1] : -1, q->tokens + j * bs);
    q->n_computed = end;

    p->seq_len[idx] = end;
    p->seq_start[idx + 1] = p->n_tokens;
    if (k == seq_leader(r) && end >= r->n_prompt / bs * bs) req_fork(s, r, q);
    return prompt_rows;
}

/* The youngest running request behind r with nothing in this step yet and
 * not in flight; r itself when there is none, r has nothing in it either and
 * no younger request is in flight (r waits for that one to land rather than
 * lose its work to it); NULL otherwise: every candidate's blocks must stay. */
static rlSchedReq *plan_victim(rlSched *s, rlSchedReq *r) {
    int younger_in_flight = 0;
    for (int j = s->n_running - 1; j >= 0 && s->running[j] != r; j--) {
        rlSchedReq *v = s->running[j];
        if (v->in_flight) younger_in_flight = 1;
        else if (v->planned_step != s->step_id) return v;
    }
    return r->planned_step != s->step_id && !younger_in_flight ? r : NULL;
}

typedef enum planResult { PLAN_DONE = 0, PLAN_PREEMPTED, PLAN_SKIPPED, PLAN_NOMEM } planResult;

/* Schedule the runnable samples of running request r (with decodes set,
 * only those with one token left), preempting younger running requests while
 * blocks are short.  PLAN_PREEMPTED when r itself had to go, PLAN_SKIPPED when it must
 * wait because nothing it may preempt is left, PLAN_NOMEM when a block table
 * could not grow (before any of r is planned). */
static planResult plan_running(rlSched *s, rlStep *p, rlSchedReq *r, int decodes,
                               int *budget, int *rows) {
    int chunks[r->n];
    for (;;) {
        int left = *budget, rows_left = *rows, need = 0;
        for (int k = 0; k < r->n; k++) {
            rlSchedSeq *q = &r->seqs[k];
            chunks[k] = 0;
            if (!seq_runnable(q) || left == 0 || (decodes && q->n_tokens - q->n_computed != 1))
                continue;
            chunks[k] = seq_chunk(r, q, left, &rows_left);
            left -= chunks[k];
            need += seq_new_blocks(s, q, chunks[k]);
        }
        if (need <= block_pool_available(s->pool)) break;
        rlSchedReq *victim = plan_victim(s, r);
        if (!victim) return PLAN_SKIPPED;
        req_preempt(s, p, victim);
        if (victim == r) return PLAN_PREEMPTED;
    }
    for (int k = 0; k < r->n; k++)
        if (chunks[k] && seq_room(s, r, &r->seqs[k], r->seqs[k].n_computed + chunks[k]))
            return PLAN_NOMEM;
    for (int k = 0; k < r->n; k++) {
        if (!chunks[k]) continue;
        *rows -= plan_seq(s, p, r, k, chunks[k]);
        *budget -= chunks[k];
    }
    return PLAN_DONE;
}

static int plan_expire(rlSched *s, rlStep *p, rlSchedReq *r) {
    if (grow(&p->expired, &p->cap_expired, p->n_expired + 1)) return -1;
    list_remove(s->waiting, &s->n_waiting, r);
    for (int i = 0; i < r->n; i++) r->seqs[i].state = RL_SEQ_FINISHED;
    r->state = RL_REQ_FINISHED;
    r->expired = 1;
    p->expired[p->n_expired++] = r;
    return 0;
}

/* Admit the first waiting request if its sequences and first chunk fit:
 * 1 admitted, 0 not now (order is kept: nothing behind it jumps ahead),
 * -1 out of memory. */
static int plan_admit(rlSched *s, rlStep *p, rlSchedReq *r, int *budget, int *rows,
                      int *n_running_seqs) {
    int active = req_active_seqs(r), bs = s->cfg.block_size;
    if (*n_running_seqs + active > s->cfg.max_num_seqs) return 0;
    int lead = seq_leader(r);
    rlSchedSeq *q = &r->seqs[lead];
    /* Room for every block its tokens fill: the hits and the first chunk. */
    if (seq_room(s, r, q, q->n_tokens)) return -1;
    if (s->cfg.prefix_caching && (!r->prompt_logprobs || r->plp_done >= r->n_prompt - 1)) {
        /* The last token is always computed: its logits are needed. */
        int max_hit = (q->n_tokens - 1) / bs, parent = -1;
        while (q->n_blocks < max_hit) {
            int b = block_lookup(s->pool, parent, q->tokens + q->n_blocks * bs);
            if (b < 0) break;
            q->blocks[q->n_blocks++] = parent = b;
        }
        q->n_computed = q->n_blocks * bs;
    }
    int rows_left = *rows;
    int chunk = seq_chunk(r, q, *budget, &rows_left);
    if (chunk == 0 || seq_new_blocks(s, q, chunk) > block_pool_available(s->pool)) {
        seq_release(s, q);
        return 0;
    }
    s->query_tokens += (uint64_t)q->n_tokens;
    s->hit_tokens += (uint64_t)q->n_computed;
    if (!r->started) r->cached_tokens = q->n_computed;
    r->started = 1;
    list_remove(s->waiting, &s->n_waiting, r);
    list_insert(s->running, &s->n_running, r);
    r->state = RL_REQ_RUNNING;
    *n_running_seqs += active;
    *rows -= plan_seq(s, p, r, lead, chunk);
    *budget -= chunk;
    return 1;
}

/* Block tables as wide as this step's longest one, not max_model_len: a
 * device backend copies them every step. */
static void plan_tables(rlStep *p) {
    int width = 1;
    for (int i = 0; i < p->n_seqs; i++) {
        const rlSchedSeq *q = &p->seq_req[i]->seqs[p->seq_index[i]];
        if (q->n_blocks > width) width = q->n_blocks;
    }
    p->max_blocks = width;
    for (int i = 0; i < p->n_seqs; i++) {
        const rlSchedSeq *q = &p->seq_req[i]->seqs[p->seq_index[i]];
        int32_t *table = p->block_tables + (size_t)i * (size_t)width;
        memcpy(table, q->blocks, (size_t)q->n_blocks * sizeof(int32_t));
        memset(table + q->n_blocks, 0, (size_t)(width - q->n_blocks) * sizeof(int32_t));
    }
}

/* Sequences one step takes before it stops adding requests.  With depth
 * steps in flight each takes about 1/depth of those that want to run
 * (running or waiting, up to max_num_seqs), so that depth steps of disjoint
 * groups keep a pipeline full.  A step always takes at least one request,
 * so an idle pipeline starts a lone request at once. */
static int step_share(const rlSched *s) {
    int depth = s->cfg.pipeline_depth;
    if (depth <= 1) return INT_MAX;
    int want = running_seqs(s);
    for (int i = 0; i < s->n_waiting && want < s->cfg.max_num_seqs; i++)
        want += req_active_seqs(s->waiting[i]);
    if (want > s->cfg.max_num_seqs) want = s->cfg.max_num_seqs;
    return want > depth ? ceil_div(want, depth) : 1;
}

int sched_step(rlSched *s, int64_t now_ms, rlStep *p) {
    p->n_seqs = p->n_tokens = p->n_rows = 0;
    p->seq_start[0] = 0;
    p->n_expired = 0;
    p->n_preempted = 0;
    int budget = s->cfg.max_num_batched_tokens, rows = s->cfg.max_prompt_rows;
    s->step_id++;
    /* The share splits requests into disjoint groups: a request in the step
     * counts with all its samples, and plans those left (forks' prompt
     * tails) past the share, so its samples never wait for each other. */
    int share = step_share(s), taken = 0;
    /* Every running decode first, then the running prompts' chunks, so a
     * long prompt never holds decodes back.  A prompt chunk that found no
     * blocks stops admissions: what frees up goes to requests already in.
     * Requests in flight sit this step out. */
    int starved = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < s->n_running && budget > 0;) {
            rlSchedReq *r = s->running[i];
            int in_step = r->planned_step == s->step_id;
            planResult rc = PLAN_DONE;
            if (!r->in_flight && (in_step || taken < share)) {
                rc = plan_running(s, p, r, pass == 0, &budget, &rows);
                if (!in_step && r->planned_step == s->step_id) taken += req_active_seqs(r);
            }
            if (rc == PLAN_NOMEM) return -1;
            starved |= rc == PLAN_SKIPPED;
            if (rc != PLAN_PREEMPTED) i++;
        }
    int n_seqs = running_seqs(s);
    while (!starved && s->n_waiting > 0 && budget > 0) {
        rlSchedReq *r = s->waiting[0];
        if (!r->started && r->deadline_ms > 0 && now_ms > r->deadline_ms) {
            if (plan_expire(s, p, r)) return -1;
            continue;
        }
        if (taken >= share) break;
        int admitted = plan_admit(s, p, r, &budget, &rows, &n_seqs);
        if (admitted < 0) return -1;
        if (!admitted) break;
        taken += req_active_seqs(r);
    }
    plan_tables(p);
    return 0;
}

void sched_in_flight(rlSched *s, const rlStep *p) {
    (void)s;
    for (int i = 0; i < p->n_seqs; i++) p->seq_req[i]->in_flight = 1;
}

void sched_landed(rlSched *s, const rlStep *p) {
    (void)s;
    for (int i = 0; i < p->n_seqs; i++) p->seq_req[i]->in_flight = 0;
}

int sched_append(rlSched *s, rlSchedReq *r, int seq, int32_t token) {
    (void)s;
    rlSchedSeq *q = &r->seqs[seq];
    int most = r->n_prompt + r->max_tokens;
    if (q->n_tokens >= most) return 0;
    if (grow_to(&q->tokens, &q->cap_tokens, q->n_tokens + 1, most, sizeof(int32_t))) return -1;
    q->tokens[q->n_tokens++] = token;
    if (q->state == RL_SEQ_AWAIT_TOKEN) q->state = RL_SEQ_ACTIVE;
    return 0;
}

void sched_finish_seq(rlSched *s, rlSchedReq *r, int seq) {
    rlSchedSeq *q = &r->seqs[seq];
    if (q->state == RL_SEQ_FINISHED) return;
    seq_release(s, q);
    q->state = RL_SEQ_FINISHED;
    if (seq_leader(r) >= 0) return;
    if (r->state == RL_REQ_RUNNING) list_remove(s->running, &s->n_running, r);
    else if (r->state != RL_REQ_FINISHED) list_remove(s->waiting, &s->n_waiting, r);
    r->state = RL_REQ_FINISHED;
}

void sched_remove(rlSched *s, rlSchedReq *r) {
    for (int i = 0; i < r->n; i++) seq_release(s, &r->seqs[i]);
    if (r->state == RL_REQ_RUNNING) list_remove(s->running, &s->n_running, r);
    else if (r->state != RL_REQ_FINISHED) list_remove(s->waiting, &s->n_waiting, r);
    rlSchedReq *last = s->all[--s->n_all];
    s->all[r->all_index] = last;
    last->all_index = r->all_index;
    req_free(r);
}

int sched_has_work(const rlSched *s) { return s->n_running + s->n_waiting > 0; }

int sched_free_seqs(const rlSched *s) {
    int used = running_seqs(s);
    for (int i = 0; i < s->n_waiting; i++) used += req_active_seqs(s->waiting[i]);
    return used < s->cfg.max_num_seqs ? s->cfg.max_num_seqs - used : 0;
}

void sched_stats(const rlSched *s, rlSchedStats *st) {
    st->running = s->n_running;
    st->waiting = s->n_waiting;
    st->running_seqs = running_seqs(s);
    st->preemptions = s->preemptions;
    block_pool_counts(s->pool, &st->blocks);
    st->prefix_hit_tokens = s->hit_tokens;
    st->prefix_query_tokens = s->query_tokens;
}

int sched_check(const rlSched *s) {
    int n = s->cfg.n_blocks, used = 0, rc = 0;
    int *refs = calloc((size_t)n, sizeof(int));
    if (!refs) return -1;
    for (int i = 0; i < s->n_all; i++) {
        const rlSchedReq *r = s->all[i];
        for (int k = 0; k < r->n; k++) {
            const rlSchedSeq *q = &r->seqs[k];
            if (q->n_computed > q->n_blocks * s->cfg.block_size) rc = -1;
            for (int j = 0; j < q->n_blocks; j++) refs[q->blocks[j]]++;
        }
        if (r->in_flight && r->state != RL_REQ_RUNNING) rc = -1;
        if (r->state != RL_REQ_RUNNING && r->state != RL_REQ_FINISHED) {
            for (int k = 0; k < r->n; k++)
                if (r->seqs[k].n_blocks) rc = -1;
        }
    }
    for (int b = 0; b < n; b++) {
        if (refs[b] != block_refcount(s->pool, b)) rc = -1;
        used += refs[b] > 0;
    }
    rlBlockCounts c;
    block_pool_counts(s->pool, &c);
    if (c.used != used || c.used + c.cached + c.free != c.total) rc = -1;
    free(refs);
    return rc;
}

int sched_config_max_rows(const rlSchedConfig *cfg) {
    int prompt = cfg->max_prompt_rows;
    if (prompt <= 0 || prompt > cfg->max_num_batched_tokens) prompt = cfg->max_num_batched_tokens;
    return prompt + cfg->max_num_seqs;
}

int sched_max_rows(const rlSched *s) { return sched_config_max_rows(&s->cfg); }
