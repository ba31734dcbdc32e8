/* json_pos.h: line/column positions of the values of a JSON text parsed by
 * jansson. jansson reports positions only for syntax errors; this index
 * tokenizes the same text, records where every value (and every object key)
 * starts in document pre-order, and pairs them with jansson's tree walked in
 * the same order, so a loader can say FILE:LINE:COL for any value. */
#ifndef CLREMAT_JSON_POS_H
#define CLREMAT_JSON_POS_H

#include <stddef.h>
#include <jansson.h>

/** A position in the text: 1-based line and column (columns count UTF-8
 * characters). 0:0 when unknown. */
typedef struct clremat_jpos {
    int line, col;
} clremat_jpos;

typedef struct clremat_json_index clremat_json_index;

/** Builds the index of root, parsed by jansson from text[0..len). Returns NULL
 * only when out of host memory; when the text and tree do not agree (which
 * should not happen) positions degrade to the enclosing container's. */
clremat_json_index *clremat_json_index_new(const char *text, size_t len, json_t *root);

/** Frees an index; NULL is ignored. */
void clremat_json_index_free(clremat_json_index *ix);

/** Where the container (object or array) v starts; 0:0 if not indexed. */
clremat_jpos clremat_json_pos(const clremat_json_index *ix, const json_t *v);

/** Where the value of member key of object obj starts (key_pos: where the key
 * itself starts). Falls back to obj's position. */
clremat_jpos clremat_json_member_pos(const clremat_json_index *ix, const json_t *obj, const char *key,
                                     int key_pos);

/** Where element i of array arr starts. Falls back to arr's position. */
clremat_jpos clremat_json_elem_pos(const clremat_json_index *ix, const json_t *arr, size_t i);

#endif
