/* overlap.c: turns a sequential plan into one where each recomputation runs
 * on a second queue, overlapping the backward of the segment before it.
 *
 * In the sequential plan a recompute run R (RECOMPUTE and FREE actions)
 * follows the backward run B of the previous segment. The overlapped order
 * is: B without its frees (the first action carries `marker`: R waits for
 * everything enqueued before B), R on the recompute queue, then B's frees
 * (the first action after R carries `join`: the compute queue waits for R).
 * B's frees wait because B's kernels may still be using those buffers when
 * R allocates; holding them is the overlap's memory price, and the
 * re-simulation (clremat_plan_from_actions) puts it in the predicted peak. */
#include "plan.h"
#include "backend.h"
#include <stdlib.h>
#include <string.h>

static int is_free(clremat_action_kind k) { return k == CLREMAT_ACT_FREE || k == CLREMAT_ACT_FREE_GRAD; }

/* 1 if R (acts[r0..r1)) recomputes a layer whose tensor B (acts[b0..r0)) frees. */
static int conflicts(const clremat_action *acts, int b0, int r0, int r1)
{
    for (int i = b0; i < r0; i++) {
        if (acts[i].kind != CLREMAT_ACT_FREE)
            continue;
        for (int j = r0; j < r1; j++)
            if (acts[j].kind == CLREMAT_ACT_RECOMPUTE && acts[j].layer == acts[i].layer)
                return 1;
    }
    return 0;
}

int clremat_plan_overlap(const clremat_plan_input *in, clremat_plan *plan)
{
    int n = plan->n_actions, k = 0, moved = 0, st;
    const clremat_action *a = plan->actions;
    clremat_action *out = calloc((size_t)n + 1, sizeof *out);
    unsigned char *q = calloc((size_t)n + 1, 1), *mk = calloc((size_t)n + 1, 1), *jn = calloc((size_t)n + 1, 1);
    clremat_plan next;

    if (!out || !q || !mk || !jn) {
        st = clremat_set_error(CLREMAT_ERR_INTERNAL, "out of host memory planning");
        goto done;
    }
    for (int i = 0; i < n;) {
        int b0 = i, r0, r1, has_bwd = 0;
        /* B: backward-phase actions up to the next recompute run */
        while (i < n && (a[i].kind == CLREMAT_ACT_BACKWARD || is_free(a[i].kind) ||
                         a[i].kind == CLREMAT_ACT_RECOMPUTE_ACT)) {
            has_bwd |= a[i].kind == CLREMAT_ACT_BACKWARD;
            i++;
        }
        r0 = i;
        while (i < n && (a[i].kind == CLREMAT_ACT_RECOMPUTE || a[i].kind == CLREMAT_ACT_FREE))
            i++;
        r1 = i;
        if (r0 == b0 || r1 == r0 || a[r0].kind != CLREMAT_ACT_RECOMPUTE || !has_bwd || r1 >= n ||
            conflicts(a, b0, r0, r1)) {
            /* not a (backward, recompute) pair: copy as it is */
            if (r1 == b0)
                r1 = i = b0 + 1;
            for (int j = b0; j < r1; j++)
                out[k++] = a[j];
            continue;
        }
        mk[k] = 1;
        for (int j = b0; j < r0; j++)
            if (!is_free(a[j].kind))
                out[k++] = a[j];
        for (int j = r0; j < r1; j++) {
            q[k] = a[j].kind == CLREMAT_ACT_RECOMPUTE;
            out[k++] = a[j];
        }
        jn[k] = 1;
        for (int j = b0; j < r0; j++)
            if (is_free(a[j].kind))
                out[k++] = a[j];
        moved++;
    }
    if (k != n) {
        st = clremat_set_error(CLREMAT_ERR_INTERNAL, "overlap: %d actions in, %d out", n, k);
        goto done;
    }
    if (moved == 0) { /* nothing to overlap: the sequential plan stands */
        plan->overlap = 1;
        st = CLREMAT_OK;
        goto done;
    }
    memset(&next, 0, sizeof next);
    st = clremat_plan_from_actions(in, out, n, &plan->policy, &next);
    if (st != CLREMAT_OK)
        goto done;
    for (int i = 0; i < n; i++) {
        next.actions[i].queue = q[i];
        next.actions[i].marker = mk[i];
        next.actions[i].join = jn[i];
    }
    /* keep what the policy decided; the simulation derives the rest */
    memcpy(next.wrapped_block, plan->wrapped_block, (size_t)in->g->n_blocks);
    memcpy(next.act_discard, plan->act_discard, (size_t)in->g->n_layers);
    next.overlap = 1;
    next.n_overlapped = moved;
    clremat_plan_free(plan);
    *plan = next;
done:
    free(out);
    free(q);
    free(mk);
    free(jn);
    return st;
}
