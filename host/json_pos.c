/* json_pos.c: the position index of a JSON text (see json_pos.h): a minimal
 * tokenizer records the start of every value and key in pre-order; a walk of
 * jansson's tree in the same order maps each container to the positions of
 * its children. Containers are looked up by pointer (never the scalars:
 * jansson shares true/false/null singletons between places). */
#include "json_pos.h"
#include <stdlib.h>
#include <string.h>

#define MAX_TOKEN_DEPTH 4096

/* One value of the text. */
typedef struct tok {
    int line, col;          /* where the value starts */
    int kline, kcol;        /* where its key starts (object members) */
    size_t koff, klen;      /* raw key text, between the quotes */
    int nchild;             /* containers: number of members or elements */
} tok;

/* One object or array of jansson's tree. */
typedef struct cont {
    const json_t *v;
    int tok;                /* the container's own token */
    int first, n;           /* its children's tokens: kids[first .. first+n) */
} cont;

struct clremat_json_index {
    tok *toks;
    int ntok, captok;
    cont *conts;
    int ncont, capcont;
    int *kids;
    int nkids, capkids;
    int valid;              /* text and tree agreed */
    int oom;
};

/* ------------------------------------------------------------- tokenizer */

typedef struct lexer {
    const char *s;
    size_t n, i;
    int line, col;
    clremat_json_index *ix;
} lexer;

static void adv(lexer *lx)
{
    unsigned char c;
    if (lx->i >= lx->n)
        return;
    c = (unsigned char)lx->s[lx->i++];
    if (c == '\n') {
        lx->line++;
        lx->col = 1;
    } else if ((c & 0xC0) != 0x80) {
        /* the column advances once per character: at its first byte */
        if (lx->i < lx->n && ((unsigned char)lx->s[lx->i] & 0xC0) == 0x80) {
            while (lx->i < lx->n && ((unsigned char)lx->s[lx->i] & 0xC0) == 0x80)
                lx->i++;
        }
        lx->col++;
    }
}

static void skip_ws(lexer *lx)
{
    while (lx->i < lx->n && (lx->s[lx->i] == ' ' || lx->s[lx->i] == '\t' || lx->s[lx->i] == '\n' ||
                             lx->s[lx->i] == '\r'))
        adv(lx);
}

/* Skips a string starting at the opening quote. */
static void skip_string(lexer *lx)
{
    adv(lx);
    while (lx->i < lx->n && lx->s[lx->i] != '"') {
        if (lx->s[lx->i] == '\\')
            adv(lx);
        adv(lx);
    }
    adv(lx);
}

static int new_tok(lexer *lx, int kline, int kcol, size_t koff, size_t klen)
{
    clremat_json_index *ix = lx->ix;
    if (ix->ntok == ix->captok) {
        int cap = ix->captok ? 2 * ix->captok : 64;
        tok *nt = realloc(ix->toks, (size_t)cap * sizeof *nt);
        if (!nt) {
            ix->oom = 1;
            return -1;
        }
        ix->toks = nt;
        ix->captok = cap;
    }
    ix->toks[ix->ntok] = (tok){lx->line, lx->col, kline, kcol, koff, klen, 0};
    return ix->ntok++;
}

static void lex_value(lexer *lx, int kline, int kcol, size_t koff, size_t klen, int depth)
{
    int t;
    char open, close;
    skip_ws(lx);
    if (lx->i >= lx->n || depth > MAX_TOKEN_DEPTH || lx->ix->oom)
        return;
    if ((t = new_tok(lx, kline, kcol, koff, klen)) < 0)
        return;
    open = lx->s[lx->i];
    if (open == '"') {
        skip_string(lx);
        return;
    }
    if (open != '{' && open != '[') {
        while (lx->i < lx->n && (strchr("+-.eE", lx->s[lx->i]) ||
                                 (lx->s[lx->i] >= '0' && lx->s[lx->i] <= '9') ||
                                 (lx->s[lx->i] >= 'a' && lx->s[lx->i] <= 'z')))
            adv(lx);
        return;
    }
    close = open == '{' ? '}' : ']';
    adv(lx);
    for (;;) {
        int kl = 0, kc = 0;
        size_t ko = 0, kn = 0;
        skip_ws(lx);
        if (lx->i >= lx->n || lx->ix->oom)
            return;
        if (lx->s[lx->i] == close) {
            adv(lx);
            return;
        }
        if (open == '{') {
            kl = lx->line;
            kc = lx->col;
            ko = lx->i + 1;
            skip_string(lx);
            kn = lx->i >= ko + 1 ? lx->i - 1 - ko : 0;
            skip_ws(lx);
            if (lx->i < lx->n && lx->s[lx->i] == ':')
                adv(lx);
        }
        lex_value(lx, kl, kc, ko, kn, depth + 1);
        lx->ix->toks[t].nchild++;
        skip_ws(lx);
        if (lx->i < lx->n && lx->s[lx->i] == ',')
            adv(lx);
        else if (lx->i < lx->n && lx->s[lx->i] == close) {
            adv(lx);
            return;
        } else
            return;
    }
}

/* ------------------------------------------------------------- tree walk */

static int add_cont(clremat_json_index *ix, const json_t *v, int t, int n)
{
    if (ix->ncont == ix->capcont) {
        int cap = ix->capcont ? 2 * ix->capcont : 32;
        cont *nc = realloc(ix->conts, (size_t)cap * sizeof *nc);
        if (!nc)
            return -1;
        ix->conts = nc;
        ix->capcont = cap;
    }
    while (ix->nkids + n > ix->capkids) {
        int cap = ix->capkids ? 2 * ix->capkids : 64;
        int *nk = realloc(ix->kids, (size_t)cap * sizeof *nk);
        if (!nk)
            return -1;
        ix->kids = nk;
        ix->capkids = cap;
    }
    ix->conts[ix->ncont] = (cont){v, t, ix->nkids, n};
    ix->nkids += n;
    return ix->ncont++;
}

/* Walks v in pre-order; *k is the next token. */
static void walk(clremat_json_index *ix, const char *text, json_t *v, int *k)
{
    int t = (*k)++, c, n;
    if (t >= ix->ntok) {
        ix->valid = 0;
        return;
    }
    if (!json_is_object(v) && !json_is_array(v))
        return;
    n = (int)(json_is_object(v) ? json_object_size(v) : json_array_size(v));
    if (ix->toks[t].nchild != n)
        ix->valid = 0;
    if ((c = add_cont(ix, v, t, n)) < 0) {
        ix->oom = 1;
        return;
    }
    if (json_is_object(v)) {
        const char *key;
        json_t *child;
        int i = 0;
        json_object_foreach(v, key, child) {
            int kt = *k;
            ix->kids[ix->conts[c].first + i++] = kt;
            if (kt < ix->ntok) {
                const tok *tk = &ix->toks[kt];
                /* the key order must match the text's (insertion order) */
                if (!memchr(text + tk->koff, '\\', tk->klen) &&
                    (strlen(key) != tk->klen || memcmp(key, text + tk->koff, tk->klen)))
                    ix->valid = 0;
            }
            walk(ix, text, child, k);
            if (i >= n)
                break;
        }
    } else {
        for (int i = 0; i < n; i++) {
            ix->kids[ix->conts[c].first + i] = *k;
            walk(ix, text, json_array_get(v, (size_t)i), k);
        }
    }
}

static int cmp_cont(const void *a, const void *b)
{
    const json_t *x = ((const cont *)a)->v, *y = ((const cont *)b)->v;
    return x < y ? -1 : x > y;
}

clremat_json_index *clremat_json_index_new(const char *text, size_t len, json_t *root)
{
    clremat_json_index *ix = calloc(1, sizeof *ix);
    lexer lx = {text, len, 0, 1, 1, NULL};
    int k = 0;
    if (!ix)
        return NULL;
    lx.ix = ix;
    ix->valid = 1;
    lex_value(&lx, 0, 0, 0, 0, 0);
    if (!ix->oom && root)
        walk(ix, text, root, &k);
    if (ix->oom) {
        clremat_json_index_free(ix);
        return NULL;
    }
    if (k != ix->ntok)
        ix->valid = 0;
    qsort(ix->conts, (size_t)ix->ncont, sizeof *ix->conts, cmp_cont);
    return ix;
}

void clremat_json_index_free(clremat_json_index *ix)
{
    if (!ix)
        return;
    free(ix->toks);
    free(ix->conts);
    free(ix->kids);
    free(ix);
}

static const cont *find_cont(const clremat_json_index *ix, const json_t *v)
{
    cont key;
    if (!ix || !v)
        return NULL;
    key.v = v;
    return bsearch(&key, ix->conts, (size_t)ix->ncont, sizeof *ix->conts, cmp_cont);
}

static clremat_jpos tok_pos(const clremat_json_index *ix, int t, int key)
{
    clremat_jpos p = {0, 0};
    if (t < 0 || t >= ix->ntok)
        return p;
    p.line = key && ix->toks[t].kline ? ix->toks[t].kline : ix->toks[t].line;
    p.col = key && ix->toks[t].kline ? ix->toks[t].kcol : ix->toks[t].col;
    return p;
}

clremat_jpos clremat_json_pos(const clremat_json_index *ix, const json_t *v)
{
    const cont *c = find_cont(ix, v);
    clremat_jpos none = {0, 0};
    return c ? tok_pos(ix, c->tok, 0) : none;
}

clremat_jpos clremat_json_member_pos(const clremat_json_index *ix, const json_t *obj, const char *key,
                                     int key_pos)
{
    const cont *c = find_cont(ix, obj);
    const char *k;
    json_t *child;
    int i = 0;
    if (!c)
        return (clremat_jpos){0, 0};
    if (ix->valid) {
        json_object_foreach((json_t *)obj, k, child) {
            if (i >= c->n)
                break;
            if (!strcmp(k, key))
                return tok_pos(ix, ix->kids[c->first + i], key_pos);
            i++;
        }
    }
    return tok_pos(ix, c->tok, 0);
}

clremat_jpos clremat_json_elem_pos(const clremat_json_index *ix, const json_t *arr, size_t i)
{
    const cont *c = find_cont(ix, arr);
    if (!c)
        return (clremat_jpos){0, 0};
    if (ix->valid && i < (size_t)c->n)
        return tok_pos(ix, ix->kids[c->first + (int)i], 0);
    return tok_pos(ix, c->tok, 0);
}
