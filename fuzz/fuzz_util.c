/* fuzz_util.c: what the fuzz targets share (fuzz.h): planning a loaded
 * graph in a few remat modes, loading a model text an importer wrote, and
 * a private scratch file for the targets whose code under test reads a
 * path rather than memory. */
#include "fuzz.h"
#include "executor.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int fuzz_plan_graph(clremat_graph *g)
{
    static const char *const modes[] = {"none", "full", "activations", "larger_than:64"};
    /* a short input can repeat a block into hundreds of layers; planning
     * those under the sanitizers takes seconds and finds nothing a
     * 64-layer graph would not */
    if (g->n_layers > 64)
        return 0;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        clremat_policy pol;
        clremat_plan plan;
        clremat_layer_cost *costs = NULL;
        if (clremat_policy_parse(modes[i], &pol) != CLREMAT_OK)
            abort(); /* the fixed modes always parse */
        int st = clremat_plan_for(g, 2, &pol, 2, 1ull << 30, NULL, &plan, &costs);
        if (st == CLREMAT_ERR_INTERNAL) { /* a model that loads always plans */
            fprintf(stderr, "fuzz: remat %s: %s\n", modes[i], clremat_last_error());
            abort();
        }
        if (st != CLREMAT_OK)
            return 0;
        clremat_plan_free(&plan);
        free(costs);
    }
    return 1;
}

int fuzz_load_generated(const char *text, const char *source, const char *target)
{
    clremat_graph *g = NULL;
    json_error_t jerr;
    json_t *doc = json_loads(text, 0, &jerr);
    int accepted = 0;
    if (!doc) { /* the importer wrote text that is not JSON: a name or value not escaped */
        fprintf(stderr, "%s: the model written is not JSON (%d:%d: %s):\n%s\n", target, jerr.line, jerr.column,
                jerr.text, text);
        abort();
    }
    json_decref(doc);
    /* the loader may still refuse it (shapes the importers leave to it) */
    if (clremat_graph_load_generated(text, source, &g) == CLREMAT_OK) {
        accepted = fuzz_plan_graph(g);
        clremat_graph_free(g);
    }
    return accepted;
}

static char scratch_dir[64];
static char scratch_file[128];

static void scratch_remove(void)
{
    if (scratch_file[0])
        unlink(scratch_file);
    if (scratch_dir[0])
        rmdir(scratch_dir);
}

const char *fuzz_scratch_file(const char *name, const uint8_t *data, size_t size)
{
    FILE *f;
    if (!scratch_dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(scratch_dir, sizeof scratch_dir, "%s/clremat-fuzz-XXXXXX", tmp && strlen(tmp) < 40 ? tmp : "/tmp");
        if (!mkdtemp(scratch_dir)) {
            perror("fuzz: mkdtemp");
            abort(); /* no scratch folder: nothing can be tested */
        }
        atexit(scratch_remove);
    }
    if (scratch_file[0])
        unlink(scratch_file);
    snprintf(scratch_file, sizeof scratch_file, "%s/%s", scratch_dir, name);
    if (!(f = fopen(scratch_file, "wb")) || fwrite(data, 1, size, f) != size || fclose(f) != 0) {
        perror("fuzz: scratch file");
        abort();
    }
    return scratch_file;
}
