/* keras_export.c: trained parameters back into Keras 3's layout: the
 * original weights file with every mapped variable overwritten (so its
 * groups, names and attributes stay exactly as Keras wrote them and the
 * original model's load_weights() reads it), alone (.weights.h5) or in a
 * new .keras archive with the original config.json and metadata.json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zip.h>
#include "atomic_file.h"
#include "error.h"
#include "keras.h"

static int write_h5(const clremat_keras_model *m, const clremat_graph *g, const float *params, const char *tmp)
{
    const char **paths = calloc((size_t)m->n_vars + 1, sizeof *paths);
    float **vals = calloc((size_t)m->n_vars + 1, sizeof *vals);
    clremat_keras_shape *shapes = NULL;
    int st = paths && vals ? CLREMAT_OK : clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory");
    if (!st)
        st = clremat_keras_var_shapes(m, &shapes);
    for (int i = 0; i < m->n_vars && !st; i++) {
        paths[i] = m->vars[i].h5path;
        st = clremat_keras_gather(m, g, i, &shapes[i], params, &vals[i]);
    }
    free(shapes);
    if (!st)
        st = clremat_keras_h5_write(m->h5_origin, m->h5, m->h5_len, tmp, paths, (const float *const *)vals, m->n_vars);
    for (int i = 0; vals && i < m->n_vars; i++)
        free(vals[i]);
    free(vals);
    free(paths);
    return st;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int add_member(zip_t *z, const char *name, const void *data, size_t len)
{
    zip_source_t *src = zip_source_buffer(z, data, len, 0);
    if (!src || zip_file_add(z, name, src, ZIP_FL_OVERWRITE) < 0) {
        zip_source_free(src);
        return -1;
    }
    return 0;
}

int clremat_keras_save(const clremat_keras_model *m, const clremat_graph *g, const float *params, const char *path)
{
    clremat_afile a;
    char *h5tmp = NULL;
    unsigned char *img = NULL;
    long n = 0;
    FILE *f;
    int st;

    if (!m->h5)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "%s: the Keras model has no weights file to export "
                                 "into (Keras layout)", m->origin);
    if (m->legacy && !clremat_keras_is_legacy(path))
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "%s: %s is a legacy .h5 model: its weights go back "
                                 "into a legacy .h5 file (the original with the new weights, read by "
                                 "keras.models.load_model or load_weights), not .keras or .weights.h5 (Keras 3's "
                                 "layout, which the legacy file does not carry)", path, m->origin);
    if (!m->legacy && clremat_keras_is_legacy(path))
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "%s: Keras 3 weights are saved as .weights.h5 (Keras's "
                                 "load_weights reads its layout only from that suffix) or .keras", path);
    if ((st = clremat_afile_open(&a, path)))
        return st;
    /* a.f stays open (and locked) while HDF5 and libzip write a.tmp by name */
    if (!ends_with(path, ".keras")) {
        if ((st = write_h5(m, g, params, a.tmp))) {
            clremat_afile_abort(&a);
            return clremat_set_error(st, "%s: %s", path, clremat_last_error());
        }
        return clremat_afile_commit(&a);
    }
    /* .keras: the new weights in a scratch file beside the target, then a zip */
    if (!(h5tmp = malloc(strlen(a.tmp) + sizeof CLREMAT_AFILE_SCRATCH_SUFFIX))) {
        clremat_afile_abort(&a);
        return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    sprintf(h5tmp, "%s" CLREMAT_AFILE_SCRATCH_SUFFIX, a.tmp);
    if ((st = write_h5(m, g, params, h5tmp)))
        clremat_set_error(st, "%s: %s", path, clremat_last_error()); /* the target first, then the scratch file */
    if (!st && (f = fopen(h5tmp, "rb"))) {
        fseek(f, 0, SEEK_END);
        n = ftell(f);
        fseek(f, 0, SEEK_SET);
        img = n > 0 ? malloc((size_t)n) : NULL;
        if (!img || fread(img, 1, (size_t)n, f) != (size_t)n)
            st = clremat_set_error(CLREMAT_ERR_IO, "%s: reading back the weights failed", h5tmp);
        fclose(f);
    } else if (!st) {
        st = clremat_set_error(CLREMAT_ERR_IO, "%s: cannot read back the weights", h5tmp);
    }
    unlink(h5tmp);
    free(h5tmp);
    if (!st) {
        int zerr = 0;
        zip_t *z = zip_open(a.tmp, ZIP_TRUNCATE | ZIP_CREATE, &zerr);
        if (!z || add_member(z, "metadata.json", m->metadata_text ? m->metadata_text : "{}",
                             m->metadata_text ? strlen(m->metadata_text) : 2) ||
            add_member(z, "config.json", m->config_text, strlen(m->config_text)) ||
            add_member(z, "model.weights.h5", img, (size_t)n) || zip_close(z) < 0) {
            if (z) { /* libzip's message, with the system error (ENOSPC, EFBIG) */
                st = clremat_set_error(CLREMAT_ERR_IO, "%s: writing the .keras archive failed: %s", path,
                                       zip_strerror(z));
                zip_discard(z);
            } else {
                zip_error_t ze;
                zip_error_init_with_code(&ze, zerr);
                st = clremat_set_error(CLREMAT_ERR_IO, "%s: writing the .keras archive failed: %s", path,
                                       zip_error_strerror(&ze));
                zip_error_fini(&ze);
            }
        }
    }
    free(img);
    if (st) {
        clremat_afile_abort(&a);
        return st;
    }
    return clremat_afile_commit(&a);
}
