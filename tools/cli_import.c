/* cli_import.c: `clremat import-keras MODEL [-o model.json] [--weights-out
 * W.safetensors] [--weights W.weights.h5] [--loss NAME]`: converts a Keras
 * model into a clremat model file and its weights (docs/keras.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "atomic_file.h"
#include "cli.h"
#include "keras.h"
#include "model_load.h"
#include "safetensors.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: clremat import-keras MODEL [-o OUT.json] [--weights-out W.safetensors]\n"
               "                            [--weights W.weights.h5] [--loss mse|sparse_categorical_crossentropy_from_logits]\n"
               "\n"
               "MODEL is a Keras 3 .keras archive, a legacy HDF5 model (model.save(\"m.h5\")), or a\n"
               "model.to_json() file (its weights from --weights, else from MODEL with .json replaced by\n"
               ".weights.h5 when that exists). Writes the clremat\n"
               "model (stdout without -o) and, with --weights-out, its Keras weights as safetensors\n"
               "(loadable with `clremat train --load`). --loss names the loss of a file saved without a\n"
               "compile config (refused when the file has one: its loss is used). --weights is for a\n"
               "to_json file only (refused for .keras and legacy .h5, which hold their own weights).\n"
               "Unsupported layers and options are refused (docs/keras.md).\n");
}

static int write_weights(const clremat_keras_model *km, const clremat_graph *g, const char *path)
{
    int64_t n = clremat_graph_param_elems(g), off = 0;
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    clremat_st_tensor *ts = calloc((size_t)g->n_layers * CLREMAT_MAX_PARAMS + 1, sizeof *ts);
    size_t nt = 0;
    int st;
    if (!p || !ts) {
        free(p);
        free(ts);
        return cli_error("out of host memory for %lld parameters", (long long)n);
    }
    if ((st = clremat_keras_params(km, g, p)) == CLREMAT_OK) {
        for (int l = 0; l < g->n_layers; l++)
            for (int k = 0; k < g->layers[l].n_params; k++) {
                const clremat_param *q = &g->layers[l].params[k];
                clremat_st_tensor *t = &ts[nt++];
                snprintf(t->name, sizeof t->name, "%s/%s", g->layers[l].name, q->name);
                t->dtype = CLREMAT_ST_F32;
                t->rank = q->shape.rank;
                for (int d = 0; d < q->shape.rank; d++)
                    t->dims[d] = q->shape.dims[d];
                t->elems = q->elems;
                t->data = p + off;
                off += q->elems;
            }
        st = clremat_st_write(path, ts, nt);
    }
    free(p);
    free(ts);
    return st ? cli_error("%s", clremat_last_error()) : 0;
}

int cli_import_keras(int argc, char **argv)
{
    const char *model = NULL, *out = NULL, *wout = NULL, *weights = NULL, *loss = NULL;
    clremat_keras_model km;
    clremat_graph *g = NULL;
    int st;

    for (int i = 1; i < argc; i++) {
        const char **dst = !strcmp(argv[i], "-o") || !strcmp(argv[i], "--output") ? &out
                           : !strcmp(argv[i], "--weights-out")                      ? &wout
                           : !strcmp(argv[i], "--weights")                          ? &weights
                           : !strcmp(argv[i], "--loss")                             ? &loss
                                                                                    : NULL;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (dst) {
            if (i + 1 >= argc || !argv[i + 1][0])
                return cli_error("%s needs a value", argv[i]);
            if (!strncmp(argv[i + 1], "--", 2) && argv[i + 1][2]) /* as the other commands' options */
                return cli_error("%s needs a value, got the option '%s' (a file of that name: ./%s)", argv[i],
                                 argv[i + 1], argv[i + 1]);
            if (*dst)
                return cli_error("%s given twice ('%s' and '%s')", argv[i], *dst, argv[i + 1]);
            *dst = argv[++i];
        } else if (argv[i][0] == '-') {
            usage(stderr);
            return cli_error("unknown option '%s'", argv[i]);
        } else if (model) {
            return cli_error("one MODEL only (got '%s' and '%s')", model, argv[i]);
        } else {
            model = argv[i];
        }
    }
    if (!model) {
        usage(stderr);
        return cli_error("import-keras needs a MODEL (.keras, legacy .h5 or Keras JSON)");
    }
    if ((out && (st = clremat_output_check(out, "-o"))) || (wout && (st = clremat_output_check(wout, "--weights-out"))))
        return cli_error("%s", clremat_last_error());
    if (weights && !wout) /* the clremat model file holds no weights: they would be read for nothing */
        return cli_error("--weights %s: only --weights-out W.safetensors writes weights (the clremat model file "
                         "holds none); give it, or leave --weights out", weights);
    if (!weights && !strstr(model, ".keras"))
        weights = clremat_keras_json_weights(model);
    {
        const clremat_path_role paths[] = {
            {"model", model, 0}, {"--weights", weights, 0}, {"-o", out, 1}, {"--weights-out", wout, 1}};
        if (clremat_paths_distinct(paths, sizeof paths / sizeof paths[0]) != CLREMAT_OK)
            return cli_error("%s", clremat_last_error());
    }
    /* --weights with a .keras or legacy .h5 model: clremat_keras_read refuses it */
    if ((st = clremat_keras_read(model, weights, loss, &km)))
        return cli_error("%s", clremat_last_error());
    /* the model must load as clremat reads it; the text is written only then */
    if ((st = clremat_graph_load_generated(km.json, model, &g))) {
        clremat_keras_free(&km);
        return cli_error("%s", clremat_last_error());
    }
    if (wout && !km.h5) {
        st = cli_error("--weights-out: %s has no weights (give --weights W.weights.h5)", model);
    } else if (wout) {
        st = write_weights(&km, g, wout);
    }
    if (!st && out) {
        clremat_afile a;
        if ((st = clremat_afile_open(&a, out)))
            st = cli_error("%s", clremat_last_error());
        else if (fputs(km.json, a.f) < 0 || fputc('\n', a.f) < 0) {
            clremat_afile_abort(&a);
            st = cli_error("-o %s: write failed", out);
        } else if (clremat_afile_commit(&a))
            st = cli_error("%s", clremat_last_error());
    } else if (!st) {
        printf("%s\n", km.json);
    }
    if (!st) {
        fprintf(stderr, "imported %s: %d layers, %lld parameters, loss %s", model, g->n_layers,
                (long long)clremat_graph_param_elems(g), km.loss);
        if (km.optimizer[0])
            fprintf(stderr, ", optimizer %s (learning rate %g)", km.optimizer, km.lr);
        fprintf(stderr, "\n");
    }
    clremat_graph_free(g);
    clremat_keras_free(&km);
    return st;
}
