/* fuzz_model.c: fuzz target for model files. The input is the text of a
 * model file; it is loaded (parser, graph building, shape inference) and,
 * when it loads (and has at most 64 layers), planned at a small batch with
 * four remat modes (cost model, policies and memory simulator). Errors are
 * fine; crashes, leaks and undefined behaviour are not, and neither is a
 * planner error (CLREMAT_ERR_INTERNAL, a broken invariant) on a model that
 * loaded. */
#include "fuzz.h"
#include "executor.h"
#include "graph.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fuzz_model(const uint8_t *data, size_t size)
{
    static const char *const modes[] = {"none", "full", "activations", "larger_than:64"};
    clremat_graph *g = NULL;
    char *text = malloc(size + 1);
    int accepted = 0;
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;
    if (clremat_graph_load_string(text, "fuzz.json", &g) == CLREMAT_OK) {
        accepted = g->n_layers <= 64;
        /* a short input can repeat a block into hundreds of layers; planning
         * those under the sanitizers takes seconds and finds nothing a
         * 64-layer graph would not */
        for (size_t i = 0; g->n_layers <= 64 && i < sizeof modes / sizeof modes[0]; i++) {
            clremat_policy pol;
            clremat_plan plan;
            clremat_layer_cost *costs = NULL;
            if (clremat_policy_parse(modes[i], &pol) != CLREMAT_OK)
                abort(); /* the fixed modes always parse */
            int st = clremat_plan_for(g, 2, &pol, 2, 1ull << 30, NULL, &plan, &costs);
            if (st == CLREMAT_ERR_INTERNAL) { /* a model that loads always plans */
                fprintf(stderr, "fuzz_model: remat %s: %s\n", modes[i], clremat_last_error());
                abort();
            }
            if (st == CLREMAT_OK) {
                clremat_plan_free(&plan);
                free(costs);
            } else {
                accepted = 0;
            }
        }
        clremat_graph_free(g);
    }
    free(text);
    return accepted;
}

#ifdef CLREMAT_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    (void)fuzz_model(data, size);
    return 0;
}
#endif
