/* keras_legacy.c: legacy HDF5 Keras models (`model.save("m.h5")`, Keras 2's
 * format, still written by Keras 3): the root's `model_config` and
 * `training_config` attributes (JSON text) and the weights under
 * `model_weights/LAYER/`, listed by each layer group's `weight_names`
 * attribute. The layer graph is then mapped as for a `.keras` file
 * (host/keras_import.c), only the dataset paths differ. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "atomic_file.h"
#include "error.h"
#include "h5_guard.h"
#include "keras.h"

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

int clremat_keras_is_legacy(const char *path)
{
    return path && (ends_with(path, ".h5") || ends_with(path, ".hdf5")) && !ends_with(path, ".weights.h5");
}

int clremat_keras_save_path(const char *model_path, const char *save_path)
{
    if (ends_with(save_path, ".weights.h5") || ends_with(save_path, ".keras"))
        return 1;
    return clremat_keras_is_legacy(model_path) && clremat_keras_is_legacy(save_path);
}

int clremat_keras_save_check(const char *model_path, const char *save_path)
{
    if (clremat_keras_is_legacy(model_path) && (ends_with(save_path, ".weights.h5") || ends_with(save_path, ".keras")))
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "--save %s: %s is a legacy .h5 model: its weights go "
                                 "back into a legacy .h5 file (--save trained.h5: the original with the new weights, "
                                 "read by keras.models.load_model or load_weights), not .keras or .weights.h5 "
                                 "(Keras 3's layout, which the legacy file does not carry)", save_path, model_path);
    /* a .h5 target of any other model would otherwise get clremat's own
     * format under a Keras file name */
    if (!clremat_keras_is_legacy(model_path) && clremat_keras_is_legacy(save_path))
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "--save %s: a legacy .h5 file is written only for a "
                                 "legacy .h5 model (%s is not one); save a Keras 3 model's weights as .weights.h5 "
                                 "or .keras, and clremat's as .safetensors", save_path, model_path);
    return CLREMAT_OK;
}

static hid_t open_image(const unsigned char *img, size_t len)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), f = -1;
    if (fapl < 0)
        return -1;
    if (H5Pset_fapl_core(fapl, 65536, 0) >= 0 && H5Pset_file_image(fapl, (void *)img, len) >= 0)
        f = H5Fopen("keras-legacy-image.h5", H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    return f;
}

/* The strings of attribute `name` of object `obj` (a scalar or a 1-D array,
 * fixed-length or variable-length): *n of them, each malloc'd; -1 when the
 * object or attribute is missing or is not strings. */
static int attr_strings(hid_t f, const char *obj, const char *name, char ***out, int *n)
{
    hid_t a = -1, ty = -1, sp = -1, mt = -1;
    hssize_t cnt;
    int rc = -1;
    *out = NULL;
    *n = 0;
    if (H5Aexists_by_name(f, obj, name, H5P_DEFAULT) <= 0 || (a = H5Aopen_by_name(f, obj, name, H5P_DEFAULT,
                                                                                   H5P_DEFAULT)) < 0)
        return -1;
    ty = H5Aget_type(a);
    sp = H5Aget_space(a);
    cnt = H5Sget_simple_extent_npoints(sp);
    if (H5Tget_class(ty) != H5T_STRING || cnt < 0 || cnt > 100000)
        goto done;
    if (!(*out = calloc((size_t)cnt + 1, sizeof **out)))
        goto done;
    if (H5Tis_variable_str(ty) > 0) {
        char **v = calloc((size_t)cnt + 1, sizeof *v);
        mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, H5T_VARIABLE);
        if (v && H5Aread(a, mt, v) >= 0) {
            rc = 0;
            for (hssize_t i = 0; i < cnt; i++)
                if (!((*out)[i] = strdup(v[i] ? v[i] : "")))
                    rc = -1;
            H5Dvlen_reclaim(mt, sp, H5P_DEFAULT, v);
        }
        free(v);
    } else {
        size_t w = H5Tget_size(ty);
        char *buf = malloc(w * (size_t)cnt + 1);
        if (buf && H5Aread(a, ty, buf) >= 0) {
            rc = 0;
            for (hssize_t i = 0; i < cnt; i++) {
                if (!((*out)[i] = calloc(w + 1, 1)))
                    rc = -1;
                else
                    memcpy((*out)[i], buf + (size_t)i * w, w);
            }
        }
        free(buf);
    }
    *n = (int)cnt;
done:
    if (mt >= 0)
        H5Tclose(mt);
    H5Sclose(sp);
    H5Tclose(ty);
    H5Aclose(a);
    return rc;
}

static void free_strings(char **s, int n)
{
    for (int i = 0; s && i < n; i++)
        free(s[i]);
    free(s);
}

/* The root's model_config and, when there, training_config of the file
 * image at arg (a clremat_keras_model whose h5 is read), for
 * clremat_h5_guarded (m->origin names the file): out = one byte (1 when training_config is there),
 * model_config, '\0', training_config (or nothing), '\0'. */
static int read_configs(void *arg, unsigned char **out, size_t *len)
{
    const clremat_keras_model *m = arg;
    char **s = NULL, **t = NULL;
    int n = 0, nt = 0, has_t;
    size_t a, b;
    hid_t f;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if ((f = open_image(m->h5, m->h5_len)) < 0)
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: not a readable HDF5 file (a legacy Keras model is what "
                                 "model.save(\"m.h5\") writes)", m->origin);
    if (attr_strings(f, "/", "model_config", &s, &n) || n != 1) {
        free_strings(s, n);
        H5Fclose(f);
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: the HDF5 file has no 'model_config' attribute: it is not a "
                                 "whole Keras model saved with model.save(\"m.h5\") (a weights-only .h5 carries no "
                                 "layer graph; use a .keras file, or to_json + .weights.h5)", m->origin);
    }
    has_t = attr_strings(f, "/", "training_config", &t, &nt) == 0 && nt == 1;
    H5Fclose(f);
    a = strlen(s[0]);
    b = has_t ? strlen(t[0]) : 0;
    if ((*out = malloc(a + b + 3))) {
        (*out)[0] = (unsigned char)has_t;
        memcpy(*out + 1, s[0], a + 1);
        memcpy(*out + 2 + a, has_t ? t[0] : "", b + 1);
        *len = a + b + 3;
    }
    free_strings(s, n);
    free_strings(t, nt);
    return *out ? CLREMAT_OK : clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s: no memory for the model's "
                                                 "configuration (%zu bytes)", m->origin, a + b + 3);
}

int clremat_keras_legacy_open(const char *path, clremat_keras_model *m, char **training)
{
    FILE *fp;
    uint64_t size;
    unsigned char *buf = NULL;
    size_t len = 0, a;
    int st;
    *training = NULL;
    if ((st = clremat_open_regular(path, "Keras model file", &fp, &size)))
        return st;
    if (size > ((uint64_t)1 << 31) || !(m->h5 = malloc((size_t)size + 1)) || fread(m->h5, 1, (size_t)size, fp) != size) {
        fclose(fp);
        return clremat_set_error(CLREMAT_ERR_IO, "%s: cannot read the legacy .h5 model (%llu bytes)", path,
                                 (unsigned long long)size);
    }
    fclose(fp);
    m->h5_len = (size_t)size;
    st = clremat_h5_guarded(path, "reading the root's 'model_config' and 'training_config' attributes",
                            m->h5_len, read_configs, m, &buf, &len);
    if (st)
        return st;
    a = len > 1 ? strnlen((const char *)buf + 1, len - 1) : len;
    if (len < 3 || a + 2 >= len || buf[len - 1] != 0) {
        free(buf);
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "%s: the HDF5 reader returned a malformed configuration",
                                 path);
    }
    if (!(m->config_text = strdup((const char *)buf + 1)) ||
        (buf[0] && !(*training = strdup((const char *)buf + 2 + a)))) {
        free(buf);
        return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s: no memory for the model's configuration", path);
    }
    free(buf);
    m->legacy = 1;
    return CLREMAT_OK;
}

/* Every variable's dataset path from the layer groups' weight_names (the
 * job of clremat_keras_legacy_paths in the child): out = the n_vars h5path
 * fields, one after another. */
static int read_paths(void *arg, unsigned char **out, size_t *len)
{
    clremat_keras_model *m = arg;
    const size_t w = sizeof m->vars[0].h5path;
    hid_t f;
    int st = CLREMAT_OK;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if ((f = open_image(m->h5, m->h5_len)) < 0)
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: not a readable HDF5 file", m->origin);
    for (int i = 0; i < m->n_vars && !st;) {
        char group[256], **names = NULL;
        int j = i, n = 0, k = 0;
        while (j < m->n_vars && strcmp(m->vars[j].owner, m->vars[i].owner) == 0)
            j++;
        snprintf(group, sizeof group, "model_weights/%s", m->vars[i].owner);
        if (attr_strings(f, group, "weight_names", &names, &n) || n != j - i) {
            st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: layer '%s': the weights file lists %d weights in '%s' "
                                   "(attribute weight_names), the layer has %d", m->origin, m->vars[i].owner, n,
                                   group, j - i);
        } else {
            /* trainable weights first, then the non-trainable ones */
            for (int pass = 0; pass < 2 && !st; pass++)
                for (int v = i; v < j && !st; v++)
                    if (m->vars[v].state == pass &&
                        snprintf(m->vars[v].h5path, sizeof m->vars[v].h5path, "%s/%s", group, names[k++]) >=
                            (int)sizeof m->vars[v].h5path)
                        st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: layer '%s': weight name '%s' is too long",
                                               m->origin, m->vars[v].owner, names[k - 1]);
        }
        free_strings(names, n);
        i = j;
    }
    H5Fclose(f);
    if (st)
        return st;
    if (m->n_vars > 0 && !(*out = malloc((size_t)m->n_vars * w)))
        return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s: no memory for the weights' paths", m->origin);
    for (int v = 0; v < m->n_vars; v++)
        memcpy(*out + (size_t)v * w, m->vars[v].h5path, w);
    *len = (size_t)m->n_vars * w;
    return CLREMAT_OK;
}

int clremat_keras_legacy_paths(clremat_keras_model *m)
{
    const size_t w = sizeof m->vars[0].h5path;
    unsigned char *buf = NULL;
    size_t len = 0;
    int st = clremat_h5_guarded(m->origin, "reading the layers' 'weight_names' attributes", m->h5_len, read_paths, m,
                                &buf, &len);
    if (st)
        return st;
    if (len != (size_t)m->n_vars * w) {
        free(buf);
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "%s: the HDF5 reader returned %zu bytes of weight paths, "
                                 "expected %zu", m->origin, len, (size_t)m->n_vars * w);
    }
    for (int v = 0; v < m->n_vars; v++) {
        memcpy(m->vars[v].h5path, buf + (size_t)v * w, w);
        m->vars[v].h5path[w - 1] = 0;
    }
    free(buf);
    return CLREMAT_OK;
}
