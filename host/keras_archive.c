/* keras_archive.c: the files of a Keras model: members of a `.keras` zip
 * (libzip), a to_json text file and its `.weights.h5`, and the test that
 * tells a Keras file from a clremat model file. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>
#include "atomic_file.h"
#include "error.h"
#include "keras.h"

#define KERAS_MEMBER_MAX ((zip_uint64_t)1 << 30)

int clremat_keras_zip_member(const char *path, const char *member, unsigned char **data, size_t *len)
{
    int zerr = 0;
    zip_t *z;
    zip_stat_t zs;
    FILE *f;
    zip_file_t *zf;
    unsigned char *buf;
    zip_int64_t got;

    *data = NULL;
    *len = 0;
    /* a missing file, a folder or a FIFO gets the loader's usual message
     * (checked without blocking before libzip opens it) */
    if (clremat_open_regular(path, "model file", &f, NULL) != CLREMAT_OK)
        return CLREMAT_ERR_IO;
    fclose(f);
    z = zip_open(path, ZIP_RDONLY, &zerr);
    if (!z) {
        zip_error_t e;
        zip_error_init_with_code(&e, zerr);
        int st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: not a readable .keras archive (zip): %s", path,
                                   zip_error_strerror(&e));
        zip_error_fini(&e);
        return st;
    }
    if (zip_stat(z, member, 0, &zs) != 0 || !(zs.valid & ZIP_STAT_SIZE)) {
        zip_close(z);
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: the .keras archive has no member '%s' (a Keras 3 archive "
                                 "holds config.json, model.weights.h5 and metadata.json)", path, member);
    }
    if (zs.size > KERAS_MEMBER_MAX) {
        zip_close(z);
        return clremat_set_error(CLREMAT_ERR_IO, "%s: member '%s' is %llu bytes, more than the 1 GiB accepted", path,
                                 member, (unsigned long long)zs.size);
    }
    buf = malloc((size_t)zs.size + 1);
    zf = buf ? zip_fopen(z, member, 0) : NULL;
    if (!zf) {
        free(buf);
        zip_close(z);
        return clremat_set_error(buf ? CLREMAT_ERR_PARSE : CLREMAT_ERR_OUT_OF_MEMORY, "%s: cannot open member '%s'",
                                 path, member);
    }
    got = zip_fread(zf, buf, zs.size);
    zip_fclose(zf);
    zip_close(z);
    if (got < 0 || (zip_uint64_t)got != zs.size) {
        free(buf);
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: member '%s' is truncated or corrupt", path, member);
    }
    buf[zs.size] = 0;
    *data = buf;
    *len = (size_t)zs.size;
    return CLREMAT_OK;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

int clremat_keras_is_keras(const char *path)
{
    json_t *root;
    FILE *f;
    int yes;
    if (!path)
        return 0;
    if (ends_with(path, ".keras") || clremat_keras_is_legacy(path))
        return 1;
    if (!ends_with(path, ".json"))
        return 0;
    /* opened without blocking, regular files only (a FIFO never hangs us);
     * anything unreadable is left to the model loader to report */
    if (clremat_open_regular(path, "model file", &f, NULL) != CLREMAT_OK)
        return 0;
    root = json_loadf(f, 0, NULL);
    fclose(f);
    yes = root && json_is_object(root) && json_object_get(root, "class_name") && json_object_get(root, "config") &&
          !json_object_get(root, "layers");
    json_decref(root);
    return yes;
}
