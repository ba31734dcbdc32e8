/* cli_import_hf.c: `clremat import-hf CONFIG.json`: the clremat model file of
 * a Hugging Face Llama config.json (host/hf_llama.c), checked by loading it
 * before it is printed or written. */
#include "cli.h"
#include "atomic_file.h"
#include "graph.h"
#include "hf_llama.h"
#include <stdlib.h>
#include <string.h>

int cli_import_hf(int argc, char **argv)
{
    const char *config, *output;
    int64_t seq_len;
    char *json = NULL;
    clremat_graph *g = NULL;
    int st = cli_import_hf_parse(argc, argv, &config, &seq_len, &output);
    if (st != CLI_CONTINUE)
        return st;
    if (output) {
        const clremat_path_role paths[] = {{"config", config, 0}, {"--output", output, 1}};
        if (clremat_output_check(output, "--output") != CLREMAT_OK || clremat_paths_distinct(paths, 2) != CLREMAT_OK)
            return cli_error("%s", clremat_last_error());
    }
    if (clremat_hf_model_json(config, seq_len, &json) != CLREMAT_OK)
        return cli_error("%s", clremat_last_error());
    /* the text must load as a model (shapes and parameters inferred) */
    if (clremat_graph_load_generated(json, config, &g) != CLREMAT_OK) {
        free(json);
        return cli_error("import-hf: the model made from %s does not load: %s", config, clremat_last_error());
    }
    clremat_graph_free(g);
    if (!output) {
        fputs(json, stdout);
    } else {
        clremat_afile a;
        if ((st = clremat_afile_open(&a, output)) == CLREMAT_OK) {
            fputs(json, a.f);
            st = clremat_afile_commit(&a);
        }
        if (st != CLREMAT_OK) {
            free(json);
            return cli_error("%s", clremat_last_error());
        }
    }
    free(json);
    return 0;
}
