/* safetensors.h: reading and writing safetensors files (8-byte little-endian
 * header length, JSON header, raw little-endian data). Writes go to a
 * temporary file renamed into place, so a crash never leaves a half file. */
#ifndef CLREMAT_SAFETENSORS_H
#define CLREMAT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

/** Element types supported (the format's names: F32, I32, I64, F64, and
 * F16, BF16 as Hugging Face checkpoints store them). */
typedef enum clremat_st_dtype {
    CLREMAT_ST_F32 = 0, CLREMAT_ST_I32, CLREMAT_ST_I64, CLREMAT_ST_F64, CLREMAT_ST_F16, CLREMAT_ST_BF16
} clremat_st_dtype;

/** One tensor: name, dtype, shape (rank dims) and its raw little-endian data. */
typedef struct clremat_st_tensor {
    char name[128];
    clremat_st_dtype dtype;
    int rank;
    int64_t dims[8];
    int64_t elems;
    const void *data;           /**< points into the file's data (read; aligned only as the file's
                                     offsets are: copy with memcpy for foreign files) or caller data (write) */
} clremat_st_tensor;

/** One entry of a file's "__metadata__" (a map of strings to strings). */
typedef struct clremat_st_meta {
    const char *key, *value;
} clremat_st_meta;

/** A file read into memory: its tensors in header order. */
typedef struct clremat_st_file {
    clremat_st_tensor *tensors; /**< n tensors ("__metadata__" is skipped) */
    size_t n;
    clremat_st_meta *meta;      /**< n_meta entries of "__metadata__" whose values are strings
                                     (others are ignored), in header order */
    size_t n_meta;
    void *blob;                 /**< whole file contents (read) */
    size_t blob_len;            /**< bytes in blob */
} clremat_st_file;

/** Reads and validates a file: header within the file, offsets in order,
 * within bounds and matching dtype x shape, no overlap, and the tensors' data
 * covering the data section exactly (no trailing bytes, no gaps: as the
 * reference implementation). Errors name the file
 * and what is wrong (CLREMAT_ERR_IO, CLREMAT_ERR_PARSE) in clremat_last_error(). */
int clremat_st_read(const char *path, clremat_st_file *out);

/** Same as clremat_st_read on len bytes in memory (copied: data may be
 * freed afterwards); origin names them in errors (NULL: "(memory)"). */
int clremat_st_read_mem(const void *data, size_t len, const char *origin, clremat_st_file *out);

/** The tensor called name, or NULL. */
const clremat_st_tensor *clremat_st_find(const clremat_st_file *f, const char *name);

/** The value of metadata entry key, or NULL. */
const char *clremat_st_meta_get(const clremat_st_file *f, const char *key);

/** Frees what clremat_st_read allocated. */
void clremat_st_free(clremat_st_file *f);

/** Writes n tensors atomically, in the given order (temporary file in the
 * same directory, fsync, rename; header padded with spaces to 8 bytes). On
 * failure no temporary file is left and an existing file at path is
 * untouched. Bad tensors: CLREMAT_ERR_INVALID_ARGUMENT; I/O: CLREMAT_ERR_IO. */
int clremat_st_write(const char *path, const clremat_st_tensor *tensors, size_t n);

/** clremat_st_write with n_meta "__metadata__" entries (unique non-empty
 * keys, string values) written before the tensors; n_meta 0 writes none. */
int clremat_st_write_meta(const char *path, const clremat_st_tensor *tensors, size_t n, const clremat_st_meta *meta,
                          size_t n_meta);

/** The float value of a 16-bit element: IEEE half (bf16 0) or bfloat16
 * (bf16 1), subnormals, infinities and NaN included. */
float clremat_st_half_to_float(uint16_t bits, int bf16);

/** The dtype's name in the format ("F32", "I32", "I64", "F64", "F16", "BF16"; "?" if invalid). */
const char *clremat_st_dtype_name(clremat_st_dtype d);

/** Bytes per element of the dtype (0 if invalid). */
size_t clremat_st_dtype_size(clremat_st_dtype d);

#endif
