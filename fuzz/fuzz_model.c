/* fuzz_model.c: fuzz target for model files. The input is the text of a
 * model file; it is loaded (parser, graph building, shape inference) and,
 * when it loads (and has at most 64 layers), planned at a small batch with
 * four remat modes (cost model, policies and memory simulator). Errors are
 * fine; crashes, leaks and undefined behaviour are not, and neither is a
 * planner error (CLREMAT_ERR_INTERNAL, a broken invariant) on a model that
 * loaded. */
#include "fuzz.h"
#include "graph.h"
#include <stdlib.h>
#include <string.h>

int fuzz_model(const uint8_t *data, size_t size)
{
    clremat_graph *g = NULL;
    char *text = malloc(size + 1);
    int accepted = 0;
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;
    if (clremat_graph_load_string(text, "fuzz.json", &g) == CLREMAT_OK) {
        accepted = fuzz_plan_graph(g);
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
