/* keras_h5.c: the HDF5 side of Keras import/export: reads float32 datasets
 * from a weights file held in memory (HDF5's core driver over a file
 * image, so nothing is extracted to disk) and writes a copy of it with
 * datasets replaced. */
#include <errno.h>
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

/* One dataset of the open file f: its shape, and with out its n values
 * (n must be what the shape holds). In the child of clremat_h5_guarded. */
static int h5_read(hid_t f, const char *origin, const char *h5path, clremat_keras_shape *shape, float *out,
                   int64_t n_out)
{
    hid_t d = -1, sp = -1, ty = -1;
    hsize_t hd[8];
    int r, st = CLREMAT_OK;
    int64_t n = 1;

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
    memset(shape, 0, sizeof *shape);
    shape->rank = r;
    for (int i = 0; i < r; i++) {
        shape->dims[i] = (int64_t)hd[i];
        n = hd[i] > (hsize_t)INT64_MAX / (hsize_t)(n ? n : 1) ? INT64_MAX : n * (int64_t)hd[i];
    }
    if (out) {
        if (n != n_out) {
            st = clremat_set_error(CLREMAT_ERR_MISMATCH, "%s: dataset '%s' holds %lld values, expected %lld", origin,
                                   h5path, (long long)n, (long long)n_out);
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
    return st;
}

/* The arguments of a batch of reads and the job that runs them in the
 * child, the file opened once: out = n shapes, or (counts given) the n
 * datasets' values one after the other. */
typedef struct {
    const unsigned char *img;
    size_t len;
    const char *origin;
    int n;
    const char *const *paths;
    const int64_t *counts; /* NULL: shapes only */
    size_t values;         /* with counts: their sum */
} h5_read_args;

static int h5_read_job(void *arg, unsigned char **out, size_t *len)
{
    const h5_read_args *a = arg;
    const size_t bytes = a->counts ? a->values * sizeof(float) : (size_t)a->n * sizeof(clremat_keras_shape);
    hid_t f;
    int st = CLREMAT_OK;
    size_t at = 0;
    quiet();
    if (!(*out = malloc(bytes ? bytes : 1)))
        return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s: no memory for the weights (%zu bytes)", a->origin,
                                 bytes);
    if ((f = open_image(a->img, a->len)) < 0)
        st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: the weights file is not a readable HDF5 file", a->origin);
    for (int i = 0; i < a->n && !st; i++) {
        clremat_keras_shape sh;
        if (a->counts) {
            st = h5_read(f, a->origin, a->paths[i], &sh, (float *)(*out + at), a->counts[i]);
            at += (size_t)a->counts[i] * sizeof(float);
        } else {
            st = h5_read(f, a->origin, a->paths[i], &sh, NULL, 0);
            memcpy(*out + at, &sh, sizeof sh);
            at += sizeof sh;
        }
    }
    if (f >= 0)
        H5Fclose(f);
    if (st) {
        free(*out);
        *out = NULL;
        return st;
    }
    *len = bytes;
    return CLREMAT_OK;
}

/* Runs a batch in the child; its want bytes of result straight into dst. */
static int read_batch(h5_read_args *a, void *dst, size_t want)
{
    char doing[600];
    if (a->n == 1)
        snprintf(doing, sizeof doing, "reading dataset '%s'", a->paths[0]);
    else
        snprintf(doing, sizeof doing, "reading %d datasets ('%s' to '%s')", a->n, a->paths[0],
                 a->paths[a->n - 1]);
    return clremat_h5_guarded_into(a->origin, doing, a->len, h5_read_job, a, dst, want);
}

int clremat_keras_h5_shapes(const unsigned char *img, size_t len, const char *origin, int n,
                            const char *const *paths, clremat_keras_shape *shapes)
{
    h5_read_args a = {img, len, origin, n, paths, NULL, 0};
    if (n <= 0)
        return CLREMAT_OK;
    return read_batch(&a, shapes, (size_t)n * sizeof *shapes);
}

int clremat_keras_h5_values(const unsigned char *img, size_t len, const char *origin, int n,
                            const char *const *paths, const int64_t *counts, float *out)
{
    h5_read_args a = {img, len, origin, n, paths, counts, 0};
    for (int i = 0; i < n; i++) {
        if (counts[i] < 0 || (uint64_t)counts[i] > (SIZE_MAX / sizeof(float) - a.values) / 2)
            return clremat_set_error(CLREMAT_ERR_PARSE, "%s: dataset '%s': %lld values cannot be held", origin,
                                     paths[i], (long long)counts[i]);
        a.values += (size_t)counts[i];
    }
    if (n <= 0 || a.values == 0)
        return CLREMAT_OK;
    return read_batch(&a, out, a.values * sizeof(float));
}

/* clremat_keras_h5_write in this process (the child of clremat_h5_guarded) */
static int h5_write(const unsigned char *img, size_t len, const char *tmp_path, const char *const *paths,
                    const float *const *vals, int n)
{
    FILE *fp = fopen(tmp_path, "wb");
    hid_t f, fapl;
    int st = CLREMAT_OK;

    quiet();
    errno = 0;
    if (!fp || fwrite(img, 1, len, fp) != len || fflush(fp) != 0) {
        const int e = errno;
        if (fp)
            fclose(fp);
        return clremat_set_error(CLREMAT_ERR_IO, "%s: cannot write the weights file: %s", tmp_path,
                                 e ? strerror(e) : "write error");
    }
    if (fclose(fp) != 0)
        return clremat_set_error(CLREMAT_ERR_IO, "%s: cannot write the weights file: %s", tmp_path, strerror(errno));
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

typedef struct {
    const unsigned char *img;
    size_t len;
    const char *tmp_path;
    const char *const *paths;
    const float *const *vals;
    int n;
} h5_write_args;

static int h5_write_job(void *arg, unsigned char **out, size_t *len)
{
    const h5_write_args *a = arg;
    *out = NULL;
    *len = 0;
    return h5_write(a->img, a->len, a->tmp_path, a->paths, a->vals, a->n);
}

int clremat_keras_h5_write(const char *origin, const unsigned char *img, size_t len, const char *tmp_path,
                           const char *const *paths, const float *const *vals, int n)
{
    h5_write_args a = {img, len, tmp_path, paths, vals, n};
    unsigned char *buf = NULL;
    char doing[2400];
    size_t got = 0;
    int st;
    snprintf(doing, sizeof doing, "writing the trained weights into a copy of its weights file, %s", tmp_path);
    st = clremat_h5_guarded(origin, doing, len, h5_write_job, &a, &buf, &got);
    free(buf);
    return st;
}
