/* safetensors.h: reading and writing safetensors files (8-byte little-endian
 * header length, JSON header, raw little-endian data). Writes go to a
 * temporary file renamed into place, so a crash never leaves a half file. */
#ifndef CLREMAT_SAFETENSORS_H
#define CLREMAT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef enum clremat_st_dtype { CLREMAT_ST_F32 = 0, CLREMAT_ST_I32, CLREMAT_ST_I64, CLREMAT_ST_F64 } clremat_st_dtype;

typedef struct clremat_st_tensor {
    char name[128];
    clremat_st_dtype dtype;
    int rank;
    int64_t dims[8];
    int64_t elems;
    const void *data;           /**< points into the file's data (read) or caller data (write) */
} clremat_st_tensor;

typedef struct clremat_st_file {
    clremat_st_tensor *tensors;
    size_t n;
    void *blob;                 /**< whole file contents (read) */
    size_t blob_len;
} clremat_st_file;

/** Reads and validates a file: header within the file, offsets in order,
 * within bounds and matching dtype x shape, no overlap. Errors name the file
 * and what is wrong (CLREMAT_ERR_IO, CLREMAT_ERR_PARSE) in clremat_last_error(). */
int clremat_st_read(const char *path, clremat_st_file *out);

/** The tensor called name, or NULL. */
const clremat_st_tensor *clremat_st_find(const clremat_st_file *f, const char *name);

/** Frees what clremat_st_read allocated. */
void clremat_st_free(clremat_st_file *f);

/** Writes n tensors atomically (temporary file in the same directory, fsync,
 * rename). On failure nothing is left at path or beside it. */
int clremat_st_write(const char *path, const clremat_st_tensor *tensors, size_t n);

#endif
