/* keras_h5.c: the HDF5 side of Keras import/export: reads float32 datasets
 * from a weights file held in memory (HDF5's core driver over a file
 * image, so nothing is extracted to disk) and writes a copy of it with
 * datasets replaced. */
#include <hdf5.h>
#include <stdio.h>
#include <string.h>
#include "error.h"
#include "h5_guard.h"
#include "keras.h"
#include <stdint.h>
#include <stdlib.h>

/* HDF5 prints its own error stack unless told not to: errors here are ours. */
static void quiet(void)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

static hid_t open_image(const unsigned char *img, size_t len)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), f = -1;
    if (fapl < 0)
        return -1;
    if (H5Pset_fapl_core(fapl, 65536, 0) >= 0 && H5Pset_file_image(fapl, (void *)img, len) >= 0)
        f = H5Fopen("keras-weights-image.h5", H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    return f;
}

/* clremat_keras_h5_read in this process (the child of clremat_h5_guarded) */
static int h5_read(const unsigned char *img, size_t len, const char *origin, const char *h5path, int *rank,
                   int64_t *dims, float *out, int64_t max_elems)
{
    hid_t f, d = -1, sp = -1, ty = -1;
    hsize_t hd[8];
    int r, st = CLREMAT_OK;
    int64_t n = 1;

    quiet();
    if ((f = open_image(img, len)) < 0)
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: the weights file is not a readable HDF5 file", origin);
    if (H5Lexists(f, h5path, H5P_DEFAULT) <= 0 || (d = H5Dopen2(f, h5path, H5P_DEFAULT)) < 0) {
        st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: the weights file has no dataset '%s'", origin, h5path);
        goto done;
    }
    sp = H5Dget_space(d);
    ty = H5Dget_type(d);
    r = H5Sget_simple_extent_ndims(sp);
    if (r < 0 || r > 8 || H5Tget_class(ty) != H5T_FLOAT || H5Tget_size(ty) != 4) {
        st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: dataset '%s' is not a float32 array of rank 0 to 8 "
                               "(only float32 weights are supported)", origin, h5path);
        goto done;
    }
    H5Sget_simple_extent_dims(sp, hd, NULL);
    *rank = r;
    for (int i = 0; i < r; i++) {
        dims[i] = (int64_t)hd[i];
        n *= dims[i];
    }
    if (out) {
        if (n != max_elems) {
            st = clremat_set_error(CLREMAT_ERR_MISMATCH, "%s: dataset '%s' holds %lld values, expected %lld", origin,
                                   h5path, (long long)n, (long long)max_elems);
            goto done;
        }
        if (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0)
            st = clremat_set_error(CLREMAT_ERR_IO, "%s: reading dataset '%s' failed", origin, h5path);
    }
done:
    if (ty >= 0)
        H5Tclose(ty);
    if (sp >= 0)
        H5Sclose(sp);
    if (d >= 0)
        H5Dclose(d);
    H5Fclose(f);
    return st;
}

/* The arguments of one read, and the job that runs it in the child: out =
 * the rank (int32), 8 dimensions (int64), then the values when asked for. */
typedef struct {
    const unsigned char *img;
    size_t len;
    const char *origin, *h5path;
    int64_t max_elems;
    int want_values;
} h5_read_args;

typedef struct {
    int32_t rank;
    int64_t dims[8];
} h5_shape;

static int h5_read_job(void *arg, unsigned char **out, size_t *len)
{
    const h5_read_args *a = arg;
    const size_t values = a->want_values ? (size_t)a->max_elems * sizeof(float) : 0;
    h5_shape sh;
    int rank = 0, st;
    memset(&sh, 0, sizeof sh);
    if (!(*out = malloc(sizeof sh + values)))
        return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s: no memory for dataset '%s' (%zu bytes)", a->origin,
                                 a->h5path, values);
    st = h5_read(a->img, a->len, a->origin, a->h5path, &rank, sh.dims,
                 a->want_values ? (float *)(*out + sizeof sh) : NULL, a->max_elems);
    if (st) {
        free(*out);
        *out = NULL;
        return st;
    }
    sh.rank = rank;
    memcpy(*out, &sh, sizeof sh);
    *len = sizeof sh + values;
    return CLREMAT_OK;
}

int clremat_keras_h5_read(const unsigned char *img, size_t len, const char *origin, const char *h5path, int *rank,
                          int64_t *dims, float *out, int64_t max_elems)
{
    h5_read_args a = {img, len, origin, h5path, max_elems, out != NULL};
    char what[600];
    unsigned char *buf = NULL;
    size_t got = 0;
    h5_shape sh;
    int st;
    if (out && (max_elems < 0 || (uint64_t)max_elems > SIZE_MAX / sizeof(float) - sizeof sh))
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: dataset '%s': %lld values cannot be held", origin, h5path,
                                 (long long)max_elems);
    snprintf(what, sizeof what, "dataset '%s'", h5path);
    if ((st = clremat_h5_guarded(origin, what, len, h5_read_job, &a, &buf, &got)))
        return st;
    if (got != sizeof sh + (out ? (size_t)max_elems * sizeof(float) : 0)) {
        free(buf);
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "%s: dataset '%s': the HDF5 reader returned %zu bytes",
                                 origin, h5path, got);
    }
    memcpy(&sh, buf, sizeof sh);
    *rank = sh.rank;
    for (int i = 0; i < sh.rank && i < 8; i++)
        dims[i] = sh.dims[i];
    if (out)
        memcpy(out, buf + sizeof sh, (size_t)max_elems * sizeof(float));
    free(buf);
    return CLREMAT_OK;
}

int clremat_keras_h5_write(const unsigned char *img, size_t len, const char *tmp_path, const char *const *paths,
                           const float *const *vals, int n)
{
    FILE *fp = fopen(tmp_path, "wb");
    hid_t f, fapl;
    int st = CLREMAT_OK;

    quiet();
    if (!fp || fwrite(img, 1, len, fp) != len || fclose(fp) != 0) {
        if (fp)
            fclose(fp);
        return clremat_set_error(CLREMAT_ERR_IO, "%s: cannot write the weights file", tmp_path);
    }
    /* the temporary file is under atomic_file.h's exclusive flock: HDF5's
     * own file locking would refuse it */
    if ((fapl = H5Pcreate(H5P_FILE_ACCESS)) < 0 || H5Pset_file_locking(fapl, 0, 1) < 0)
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "HDF5: cannot make a file access property list");
    f = H5Fopen(tmp_path, H5F_ACC_RDWR, fapl);
    H5Pclose(fapl);
    if (f < 0)
        return clremat_set_error(CLREMAT_ERR_IO, "%s: HDF5 cannot reopen the copied weights file", tmp_path);
    for (int i = 0; i < n && !st; i++) {
        hid_t d = H5Dopen2(f, paths[i], H5P_DEFAULT);
        if (d < 0 || H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, vals[i]) < 0)
            st = clremat_set_error(CLREMAT_ERR_IO, "%s: writing dataset '%s' failed", tmp_path, paths[i]);
        if (d >= 0)
            H5Dclose(d);
    }
    if (H5Fclose(f) < 0 && !st)
        st = clremat_set_error(CLREMAT_ERR_IO, "%s: closing the weights file failed", tmp_path);
    return st;
}
