/* safetensors.c: reading (with full validation of header and offsets) and
 * atomic writing (base/atomic_file.c: temporary file, fsync, rename) of
 * safetensors files. */
#include "atomic_file.h"
#include "backend.h"
#include "safetensors.h"
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#define ST_MAX_HEADER (100u << 20) /* the format's own limit on the JSON header */

static const char *const dtype_names[] = {"F32", "I32", "I64", "F64", "F16", "BF16"};
static const size_t dtype_sizes[] = {4, 4, 8, 8, 2, 2};
#define N_DTYPES 6

const char *clremat_st_dtype_name(clremat_st_dtype d)
{
    return (unsigned)d < N_DTYPES ? dtype_names[d] : "?";
}

size_t clremat_st_dtype_size(clremat_st_dtype d)
{
    return (unsigned)d < N_DTYPES ? dtype_sizes[d] : 0;
}

float clremat_st_half_to_float(uint16_t bits, int bf16)
{
    uint32_t u;
    float f;
    if (bf16) {
        u = (uint32_t)bits << 16;
    } else {
        uint32_t sign = (uint32_t)(bits >> 15) << 31, ex = (bits >> 10) & 0x1f, man = bits & 0x3ff;
        if (ex == 0x1f) { /* infinity, NaN */
            u = sign | 0x7f800000u | (man << 13);
        } else if (ex == 0) { /* zero, subnormal: man * 2^-24 */
            f = ldexpf((float)man, -24);
            return sign ? -f : f;
        } else {
            u = sign | ((ex + 112) << 23) | (man << 13);
        }
    }
    memcpy(&f, &u, sizeof f);
    return f;
}

static int dtype_from_name(const char *s)
{
    for (int i = 0; i < N_DTYPES; i++)
        if (strcmp(s, dtype_names[i]) == 0)
            return i;
    return -1;
}

static uint64_t get_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Reads the whole file into a malloc'd buffer (never blocking on a FIFO:
 * anything but a regular file is refused before it is read). */
static int slurp(const char *path, unsigned char **buf, size_t *len)
{
    FILE *f = NULL;
    uint64_t size;
    unsigned char *b = NULL;
    size_t n;
    int status = clremat_open_regular(path, "safetensors file", &f, &size);
    if (status != CLREMAT_OK)
        return status;
    if (size > (uint64_t)SIZE_MAX - 1 || (status = clremat_host_alloc_check(size, path)) != CLREMAT_OK) {
        if (size > (uint64_t)SIZE_MAX - 1)
            status = clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s: %llu bytes do not fit in host memory", path,
                                       (unsigned long long)size);
        goto fail;
    }
    b = malloc(size > 0 ? (size_t)size : 1);
    if (!b) {
        status = clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s: out of host memory reading %llu bytes", path,
                                   (unsigned long long)size);
        goto fail;
    }
    n = fread(b, 1, (size_t)size, f);
    if (n != (size_t)size) {
        status = clremat_set_error(CLREMAT_ERR_IO, "%s: read %zu of %llu bytes: %s", path, n,
                                   (unsigned long long)size, ferror(f) ? strerror(errno) : "file changed size");
        goto fail;
    }
    fclose(f);
    *buf = b;
    *len = n;
    return CLREMAT_OK;
fail:
    fclose(f);
    free(b);
    return status;
}

/* Orders tensor indices by data begin offset, for the overlap check. */
typedef struct span {
    uint64_t begin, end;
    size_t index;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Validates one header entry and fills t (data pointer set from base). */
static int parse_entry(const char *path, const char *name, json_t *v, const unsigned char *base,
                       uint64_t data_len, clremat_st_tensor *t, span *sp)
{
    json_t *dt, *shape, *offs, *x;
    int d;
    size_t i;
    uint64_t elems = 1, begin, end;
    if (strlen(name) >= sizeof t->name)
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: tensor name '%.40s...' is longer than %zu bytes",
                                 path, name, sizeof t->name - 1);
    if (!json_is_object(v))
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: tensor '%s': header entry is not an object", path, name);
    dt = json_object_get(v, "dtype");
    shape = json_object_get(v, "shape");
    offs = json_object_get(v, "data_offsets");
    if (!json_is_string(dt))
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: tensor '%s': missing or non-string \"dtype\"", path, name);
    d = dtype_from_name(json_string_value(dt));
    if (d < 0)
        return clremat_set_error(CLREMAT_ERR_PARSE,
                                 "%s: tensor '%s': unknown or unsupported dtype '%s' (supported: F32, I32, I64, F64, F16, BF16)",
                                 path, name, json_string_value(dt));
    if (!json_is_array(shape))
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: tensor '%s': missing or non-array \"shape\"", path, name);
    if (json_array_size(shape) > 8)
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: tensor '%s': rank %zu is above the supported 8", path,
                                 name, json_array_size(shape));
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = (clremat_st_dtype)d;
    t->rank = (int)json_array_size(shape);
    json_array_foreach(shape, i, x) {
        json_int_t n;
        if (!json_is_integer(x) || (n = json_integer_value(x)) < 0)
            return clremat_set_error(CLREMAT_ERR_PARSE,
                                     "%s: tensor '%s': shape entry %zu is not a non-negative integer", path, name, i);
        t->dims[i] = n;
        if (n != 0 && elems > (UINT64_MAX / 8) / (uint64_t)n)
            return clremat_set_error(CLREMAT_ERR_PARSE, "%s: tensor '%s': shape too large", path, name);
        elems *= (uint64_t)n;
    }
    t->elems = (int64_t)elems;
    if (!json_is_array(offs) || json_array_size(offs) != 2 || !json_is_integer(json_array_get(offs, 0)) ||
        !json_is_integer(json_array_get(offs, 1)) || json_integer_value(json_array_get(offs, 0)) < 0 ||
        json_integer_value(json_array_get(offs, 1)) < 0)
        return clremat_set_error(CLREMAT_ERR_PARSE,
                                 "%s: tensor '%s': \"data_offsets\" must be [begin, end] with non-negative integers",
                                 path, name);
    begin = (uint64_t)json_integer_value(json_array_get(offs, 0));
    end = (uint64_t)json_integer_value(json_array_get(offs, 1));
    if (begin > end)
        return clremat_set_error(CLREMAT_ERR_PARSE, "%s: tensor '%s': data_offsets [%llu, %llu] end before begin",
                                 path, name, (unsigned long long)begin, (unsigned long long)end);
    if (end > data_len)
        return clremat_set_error(CLREMAT_ERR_PARSE,
                                 "%s: tensor '%s': data_offsets [%llu, %llu] reach beyond the %llu bytes of data "
                                 "(file truncated?)",
                                 path, name, (unsigned long long)begin, (unsigned long long)end,
                                 (unsigned long long)data_len);
    if (end - begin != elems * dtype_sizes[d])
        return clremat_set_error(CLREMAT_ERR_PARSE,
                                 "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes but %s x %llu elements "
                                 "need %llu",
                                 path, name, (unsigned long long)begin, (unsigned long long)end,
                                 (unsigned long long)(end - begin), dtype_names[d], (unsigned long long)elems,
                                 (unsigned long long)(elems * dtype_sizes[d]));
    t->data = base + begin;
    sp->begin = begin;
    sp->end = end;
    return CLREMAT_OK;
}

/* Copies the string entries of a "__metadata__" object into one malloc'd
 * block: the entries, then their keys and values. */
static int copy_meta(const char *path, json_t *obj, clremat_st_meta **out, size_t *n_out)
{
    const char *key;
    json_t *v;
    size_t n = 0, bytes = 0;
    clremat_st_meta *m;
    char *p;
    json_object_foreach(obj, key, v) {
        if (json_is_string(v)) {
            n++;
            bytes += strlen(key) + 1 + json_string_length(v) + 1;
        }
    }
    *out = NULL;
    *n_out = 0;
    if (n == 0)
        return CLREMAT_OK;
    if (!(m = malloc(n * sizeof *m + bytes)))
        return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
    p = (char *)(m + n);
    n = 0;
    json_object_foreach(obj, key, v) {
        size_t kl, vl;
        if (!json_is_string(v))
            continue;
        kl = strlen(key) + 1;
        vl = json_string_length(v);
        memcpy(p, key, kl);
        m[n].key = p;
        p += kl;
        memcpy(p, json_string_value(v), vl);
        p[vl] = 0;
        m[n].value = p;
        p += vl + 1;
        n++;
    }
    *out = m;
    *n_out = n;
    return CLREMAT_OK;
}

/* Validates blob (len bytes, malloc'd; owned from here on: kept in out on
 * success, freed on failure); path names it in errors. */
static int parse_blob(const char *path, unsigned char *blob, size_t len, clremat_st_file *out)
{
    size_t n = 0;
    uint64_t hlen, data_len;
    json_t *root = NULL, *v;
    json_error_t jerr;
    const char *key;
    clremat_st_tensor *ts = NULL;
    clremat_st_meta *meta = NULL;
    size_t n_meta = 0;
    span *spans = NULL;
    int st;
    if (len < 8) {
        st = clremat_set_error(CLREMAT_ERR_PARSE,
                               "%s: file is %zu bytes, too short for the 8-byte header length (truncated?)", path, len);
        goto fail;
    }
    hlen = get_le64(blob);
    if (hlen > len - 8) {
        st = clremat_set_error(CLREMAT_ERR_PARSE,
                               "%s: header length %llu exceeds the %zu bytes after it (truncated or not safetensors?)",
                               path, (unsigned long long)hlen, len - 8);
        goto fail;
    }
    if (hlen > ST_MAX_HEADER) {
        st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: header length %llu is above the 100 MiB limit", path,
                               (unsigned long long)hlen);
        goto fail;
    }
    data_len = len - 8 - hlen;
    root = json_loadb((const char *)blob + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: header JSON invalid at line %d column %d: %s%s", path,
                               jerr.line, jerr.column, jerr.text,
                               strstr(jerr.text, "duplicate") ? " (tensor names must be unique)" : "");
        goto fail;
    }
    if (!json_is_object(root)) {
        st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: header is not a JSON object", path);
        goto fail;
    }
    ts = calloc(json_object_size(root) + 1, sizeof *ts);
    spans = calloc(json_object_size(root) + 1, sizeof *spans);
    if (!ts || !spans) {
        st = clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
        goto fail;
    }
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(v)) {
                st = clremat_set_error(CLREMAT_ERR_PARSE, "%s: \"__metadata__\" is not an object", path);
                goto fail;
            }
            free(meta);
            if ((st = copy_meta(path, v, &meta, &n_meta)) != CLREMAT_OK)
                goto fail;
            continue;
        }
        st = parse_entry(path, key, v, blob + 8 + hlen, data_len, &ts[n], &spans[n]);
        if (st != CLREMAT_OK)
            goto fail;
        spans[n].index = n;
        n++;
    }
    qsort(spans, n, sizeof *spans, span_cmp);
    /* a: the non-empty span reaching furthest so far; empty spans overlap nothing */
    for (size_t i = 0, ai = SIZE_MAX; i < n; i++) {
        const span *a = ai == SIZE_MAX ? NULL : &spans[ai], *b = &spans[i];
        if (b->end == b->begin)
            continue;
        if (!a || b->end > a->end)
            ai = i;
        if (a && b->begin < a->end) {
            st = clremat_set_error(CLREMAT_ERR_PARSE,
                                   "%s: tensor '%s' data [%llu, %llu] overlaps tensor '%s' data [%llu, %llu]", path,
                                   ts[b->index].name, (unsigned long long)b->begin, (unsigned long long)b->end,
                                   ts[a->index].name, (unsigned long long)a->begin, (unsigned long long)a->end);
            goto fail;
        }
    }
    /* the tensors' data, now known not to overlap, must cover the data
     * section exactly, as the reference implementation requires: bytes after
     * the last tensor or between two tensors belong to nothing */
    {
        uint64_t covered = 0, last_end = 0;
        for (size_t i = 0; i < n; i++) {
            covered += spans[i].end - spans[i].begin;
            if (spans[i].end > last_end)
                last_end = spans[i].end;
        }
        if (last_end < data_len) {
            st = clremat_set_error(CLREMAT_ERR_PARSE,
                                   "%s: %llu bytes after the last tensor's data: the tensors' data_offsets end at "
                                   "byte %llu of the data section, the file holds %llu bytes of data (expected "
                                   "file size %llu, actual %zu)",
                                   path, (unsigned long long)(data_len - last_end), (unsigned long long)last_end,
                                   (unsigned long long)data_len, (unsigned long long)(8 + hlen + last_end), len);
            goto fail;
        }
        if (covered != data_len) {
            st = clremat_set_error(CLREMAT_ERR_PARSE,
                                   "%s: the tensors' data_offsets cover %llu of the %llu bytes of data: %llu bytes "
                                   "between tensors belong to none",
                                   path, (unsigned long long)covered, (unsigned long long)data_len,
                                   (unsigned long long)(data_len - covered));
            goto fail;
        }
    }
    json_decref(root);
    free(spans);
    out->tensors = ts;
    out->n = n;
    out->meta = meta;
    out->n_meta = n_meta;
    out->blob = blob;
    out->blob_len = len;
    return CLREMAT_OK;
fail:
    json_decref(root);
    free(spans);
    free(ts);
    free(meta);
    free(blob);
    return st;
}

int clremat_st_read(const char *path, clremat_st_file *out)
{
    unsigned char *blob = NULL;
    size_t len = 0;
    int st;
    if (!path || !out)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "clremat_st_read: NULL argument");
    memset(out, 0, sizeof *out);
    if ((st = slurp(path, &blob, &len)) != CLREMAT_OK)
        return st;
    return parse_blob(path, blob, len, out);
}

int clremat_st_read_mem(const void *data, size_t len, const char *origin, clremat_st_file *out)
{
    unsigned char *blob;
    if ((!data && len) || !out)
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "clremat_st_read_mem: NULL argument");
    memset(out, 0, sizeof *out);
    if (!origin)
        origin = "(memory)";
    blob = malloc(len ? len : 1);
    if (!blob)
        return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s: out of host memory copying %zu bytes", origin, len);
    if (len)
        memcpy(blob, data, len);
    return parse_blob(origin, blob, len, out);
}

const clremat_st_tensor *clremat_st_find(const clremat_st_file *f, const char *name)
{
    if (!f || !name)
        return NULL;
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

const char *clremat_st_meta_get(const clremat_st_file *f, const char *key)
{
    if (!f || !key)
        return NULL;
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[i].key, key) == 0)
            return f->meta[i].value;
    return NULL;
}

void clremat_st_free(clremat_st_file *f)
{
    if (!f)
        return;
    free(f->tensors);
    free(f->meta);
    free(f->blob);
    memset(f, 0, sizeof *f);
}

/* Builds the padded JSON header for the tensors; *data_len gets the data size. */
static int build_header(const char *path, const clremat_st_tensor *ts, size_t n, const clremat_st_meta *meta,
                        size_t n_meta, char **hdr, size_t *hlen, uint64_t *data_len)
{
    json_t *root = json_object(), *mobj = NULL;
    char *s = NULL, *padded;
    uint64_t off = 0;
    size_t len, plen;
    int st = CLREMAT_OK;
    if (!root)
        return clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
    if (n_meta > 0) {
        if (!meta || !(mobj = json_object()) || json_object_set_new(root, "__metadata__", mobj) != 0) {
            st = clremat_set_error(meta ? CLREMAT_ERR_OUT_OF_MEMORY : CLREMAT_ERR_INVALID_ARGUMENT,
                                   "%s: cannot build the metadata", path);
            goto fail;
        }
        for (size_t i = 0; i < n_meta; i++) {
            json_t *v;
            if (!meta[i].key || !meta[i].key[0] || !meta[i].value || json_object_get(mobj, meta[i].key)) {
                st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "%s: metadata entry %zu: empty, NULL or repeated",
                                       path, i);
                goto fail;
            }
            if (!(v = json_string(meta[i].value)) || json_object_set_new(mobj, meta[i].key, v) != 0) {
                st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "%s: metadata '%s' is not valid UTF-8", path,
                                       meta[i].key);
                goto fail;
            }
        }
    }
    for (size_t i = 0; i < n; i++) {
        const clremat_st_tensor *t = &ts[i];
        json_t *e, *shape;
        uint64_t elems = 1, bytes;
        if (t->name[0] == '\0' || strnlen(t->name, sizeof t->name) == sizeof t->name ||
            strcmp(t->name, "__metadata__") == 0) {
            st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "%s: tensor %zu has an invalid name", path, i);
            goto fail;
        }
        if (json_object_get(root, t->name)) {
            st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "%s: tensor name '%s' appears twice", path, t->name);
            goto fail;
        }
        if ((unsigned)t->dtype >= N_DTYPES || t->rank < 0 || t->rank > 8) {
            st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "%s: tensor '%s': invalid dtype %d or rank %d", path,
                                   t->name, (int)t->dtype, t->rank);
            goto fail;
        }
        shape = json_array();
        e = json_object();
        if (!shape || !e || json_object_set_new(root, t->name, e) != 0) {
            json_decref(shape);
            json_decref(e);
            st = clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
            goto fail;
        }
        json_object_set_new(e, "dtype", json_string(dtype_names[t->dtype]));
        json_object_set_new(e, "shape", shape);
        for (int d = 0; d < t->rank; d++) {
            if (t->dims[d] < 0) {
                st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "%s: tensor '%s': negative dimension %lld", path,
                                       t->name, (long long)t->dims[d]);
                goto fail;
            }
            elems *= (uint64_t)t->dims[d];
            json_array_append_new(shape, json_integer(t->dims[d]));
        }
        if ((int64_t)elems != t->elems) {
            st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT,
                                   "%s: tensor '%s': elems %lld does not match its shape (%llu)", path, t->name,
                                   (long long)t->elems, (unsigned long long)elems);
            goto fail;
        }
        if (elems > 0 && !t->data) {
            st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "%s: tensor '%s' has no data", path, t->name);
            goto fail;
        }
        bytes = elems * dtype_sizes[t->dtype];
        json_object_set_new(e, "data_offsets", json_pack("[II]", (json_int_t)off, (json_int_t)(off + bytes)));
        off += bytes;
    }
    s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!s) {
        st = clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
        goto fail;
    }
    len = strlen(s);
    plen = (len + 7) & ~(size_t)7;
    padded = malloc(plen);
    if (!padded) {
        st = clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
        goto fail;
    }
    memcpy(padded, s, len);
    memset(padded + len, ' ', plen - len);
    *hdr = padded;
    *hlen = plen;
    *data_len = off;
fail:
    free(s);
    json_decref(root);
    return st;
}

int clremat_st_write(const char *path, const clremat_st_tensor *tensors, size_t n)
{
    return clremat_st_write_meta(path, tensors, n, NULL, 0);
}

int clremat_st_write_meta(const char *path, const clremat_st_tensor *tensors, size_t n, const clremat_st_meta *meta,
                          size_t n_meta)
{
    char *hdr = NULL;
    size_t hlen = 0;
    uint64_t data_len = 0;
    unsigned char lenbuf[8];
    clremat_afile a;
    int st;
    if (!path || !*path || (n > 0 && !tensors))
        return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT, "clremat_st_write: NULL argument");
    if ((st = build_header(path, tensors, n, meta, n_meta, &hdr, &hlen, &data_len)) != CLREMAT_OK)
        return st;
    if ((st = clremat_afile_open(&a, path)) != CLREMAT_OK)
        goto fail;
    put_le64(lenbuf, hlen);
    fwrite(lenbuf, 1, 8, a.f);
    fwrite(hdr, 1, hlen, a.f);
    for (size_t i = 0; i < n && !ferror(a.f); i++) {
        size_t bytes = (size_t)tensors[i].elems * dtype_sizes[tensors[i].dtype];
        if (bytes > 0)
            fwrite(tensors[i].data, 1, bytes, a.f);
    }
    st = clremat_afile_commit(&a); /* a failed write above makes it fail and remove the file */
fail:
    free(hdr);
    return st;
}
