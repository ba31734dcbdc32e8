/* plan_speed.c: how long the budget planner takes on large graphs: a chain
 * of N dense layers and a net of N residual blocks (dense gelu, dense, add),
 * at budgets a quarter, half and three quarters of the way from the least
 * peak to none's. Prints seconds per plan and checks each plan fits its
 * budget. No device. Usage: bench/plan_speed [CHAIN_LAYERS [BLOCKS]]
 * (defaults 1000 and 200). */
#include "executor.h"
#include "plan.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A model file as a string: n dense gelu layers, or n residual blocks. */
static char *model(int n, int residual)
{
    size_t cap = (size_t)n * 300 + 1024, off = 0;
    char *s = malloc(cap);
    if (!s)
        return NULL;
    off += (size_t)snprintf(s + off, cap - off, "{\"name\": \"%s%d\", \"input\": {\"shape\": [64]}, \"layers\": [",
                            residual ? "residual" : "chain", n);
    if (residual)
        off += (size_t)snprintf(s + off, cap - off,
                                "{\"name\": \"stem\", \"type\": \"dense\", \"units\": 64}, {\"block\": \"res\", "
                                "\"repeat\": %d, \"layers\": [{\"name\": \"a\", \"type\": \"dense\", \"units\": 128, "
                                "\"activation\": \"gelu\"}, {\"name\": \"b\", \"type\": \"dense\", \"units\": 64}, "
                                "{\"name\": \"add\", \"type\": \"add\", \"inputs\": [\"b\", \"@block_input\"]}]}, ",
                                n);
    else
        for (int i = 0; i < n; i++)
            off += (size_t)snprintf(s + off, cap - off,
                                    "{\"name\": \"d%d\", \"type\": \"dense\", \"units\": 64, \"activation\": "
                                    "\"gelu\"}, ",
                                    i);
    snprintf(s + off, cap - off,
             "{\"name\": \"logits\", \"type\": \"dense\", \"units\": 8}, "
             "{\"name\": \"loss\", \"type\": \"softmax_cross_entropy\"}]}");
    return s;
}

static int bench(int n, int residual)
{
    char *json = model(n, residual);
    clremat_graph *g = NULL;
    clremat_plan_input in;
    clremat_plan none, p;
    clremat_policy pol;
    uint64_t lo;
    int rc = 1;
    if (!json || clremat_graph_load_string(json, "bench", &g) != CLREMAT_OK ||
        clremat_plan_input_for(NULL, g, 32, 2, NULL, &in, NULL, NULL) != CLREMAT_OK) {
        fprintf(stderr, "plan_speed: %s\n", clremat_last_error());
        free(json);
        return 1;
    }
    clremat_policy_parse("none", &pol);
    if (clremat_plan_build(&in, &pol, &none) != CLREMAT_OK)
        goto done;
    /* the least peak, from the refusal of one byte */
    {
        double t0 = now();
        const char *e, *at;
        unsigned long long v = 0;
        if (clremat_plan_budget(&in, 1, &p) != CLREMAT_ERR_PLAN)
            goto done;
        e = clremat_last_error();
        at = strstr(e, "reaches");
        if (!at || !(at = strstr(at, ": ")) || sscanf(at + 2, "%llu", &v) != 1)
            goto done;
        lo = v;
        printf("%-14s %5d layers: least peak %llu bytes (none %llu), found in %.3f s\n",
               residual ? "residual net" : "chain", g->n_layers, v, (unsigned long long)none.peak_bytes, now() - t0);
    }
    for (int q = 1; q <= 3; q++) {
        uint64_t budget = lo + (none.peak_bytes - lo) * (uint64_t)q / 4;
        double t0 = now(), dt;
        if (clremat_plan_budget(&in, budget, &p) != CLREMAT_OK) {
            fprintf(stderr, "plan_speed: %s\n", clremat_last_error());
            goto done;
        }
        dt = now() - t0;
        printf("  budget %12llu: peak %12llu, recompute %.4g FLOPs, planned in %.3f s\n", (unsigned long long)budget,
               (unsigned long long)p.peak_bytes, p.recompute_flops, dt);
        if (p.peak_bytes > budget) {
            fprintf(stderr, "plan_speed: peak above the budget\n");
            clremat_plan_free(&p);
            goto done;
        }
        clremat_plan_free(&p);
    }
    rc = 0;
done:
    clremat_plan_free(&none);
    free((void *)in.costs);
    clremat_graph_free(g);
    free(json);
    return rc;
}

int main(int argc, char **argv)
{
    int chain = argc > 1 ? atoi(argv[1]) : 1000, blocks = argc > 2 ? atoi(argv[2]) : 200;
    return bench(chain, 0) | bench(blocks, 1);
}
