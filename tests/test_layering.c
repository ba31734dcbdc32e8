/* test_layering.c: holds the module layering of docs/ARCHITECTURE.md.
 * Modules, bottom to top: include/ and base/ (0), planner/ (1), backend/ (2),
 * host/ (3), tools/ (4). A source file may include headers of its own level
 * or below, never above; nothing in base/, planner/ or include/ includes an
 * OpenCL or CLBlast header. The same direction holds for calls, read from
 * the built objects with nm: no object calls a function defined in a module
 * above its own, and the files' call graph has no cycle. Each failure names
 * the file, the line or symbol, and the module it reaches.
 * Reads sources under $CLREMAT_SRCDIR and objects under $CLREMAT_BUILDDIR
 * (both set by make check); no device. */
#include "testutil.h"
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const modules[] = {"include", "base", "planner", "backend", "host", "tools"};
static const int module_level[] = {0, 0, 1, 2, 3, 4};
#define N_MODULES (int)(sizeof modules / sizeof modules[0])

/* A report that grows; the test prints it when it fails. */
typedef struct {
    char *text;
    size_t len, cap;
    int count;
} report;

static void report_add(report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report_add(report *r, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof line)
        n = (int)sizeof line - 1;
    if (r->len + (size_t)n + 2 > r->cap) {
        r->cap = (r->len + (size_t)n + 2) * 2;
        r->text = realloc(r->text, r->cap);
        ck_assert_ptr_nonnull(r->text);
    }
    memcpy(r->text + r->len, line, (size_t)n);
    r->len += (size_t)n;
    r->text[r->len++] = '\n';
    r->text[r->len] = 0;
    r->count++;
}

static const char *srcdir(void)
{
    const char *d = getenv("CLREMAT_SRCDIR");
    return d && *d ? d : ".";
}

static const char *builddir(void)
{
    const char *d = getenv("CLREMAT_BUILDDIR");
    return d && *d ? d : ".";
}

static int has_suffix(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

static int file_exists(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f)
        fclose(f);
    return f != NULL;
}

/* Module index of a header name as the compiler finds it from a file of
 * module `from`: the file's own directory first, then every module; -1 when
 * no module has it. */
static int header_module(const char *name, int from)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/%s", srcdir(), modules[from], name);
    if (file_exists(path))
        return from;
    for (int m = 0; m < N_MODULES; m++) {
        snprintf(path, sizeof path, "%s/%s/%s", srcdir(), modules[m], name);
        if (file_exists(path))
            return m;
    }
    return -1;
}

/* Sorted names of the files of dir ending in suffix; *n of them. */
static char **list_files(const char *dir, const char *suffix, int *n)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char **names = NULL;
    int cap = 0;
    *n = 0;
    if (!d)
        return NULL;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !has_suffix(e->d_name, suffix))
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            names = realloc(names, sizeof *names * (size_t)cap);
            ck_assert_ptr_nonnull(names);
        }
        names[(*n)++] = strdup(e->d_name);
    }
    closedir(d);
    for (int i = 1; i < *n; i++) /* insertion sort: a stable report */
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char *t = names[j];
            names[j] = names[j - 1];
            names[j - 1] = t;
        }
    return names;
}

static void free_list(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* The name between the delimiters of an #include line, and its delimiter
 * ('"' or '<'); 0 when the line is not an #include. */
static char include_name(const char *line, char *name, size_t len)
{
    const char *p = line;
    char open, close;
    size_t k = 0;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p++ != '#')
        return 0;
    while (*p == ' ' || *p == '\t')
        p++;
    if (strncmp(p, "include", 7) != 0)
        return 0;
    p += 7;
    while (*p == ' ' || *p == '\t')
        p++;
    open = *p;
    if (open != '"' && open != '<')
        return 0;
    close = open == '"' ? '"' : '>';
    for (p++; *p && *p != close && k + 1 < len; p++)
        name[k++] = *p;
    name[k] = 0;
    return *p == close ? open : 0;
}

/* Checks every #include of module m's sources into r. */
static void check_module_includes(int m, report *r, int *files_seen)
{
    char dir[4096];
    int nf[2];
    char **lists[2];
    snprintf(dir, sizeof dir, "%s/%s", srcdir(), modules[m]);
    lists[0] = list_files(dir, ".c", &nf[0]);
    lists[1] = list_files(dir, ".h", &nf[1]);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < nf[k]; i++) {
            char path[4608], line[1024], name[512];
            FILE *f;
            int lineno = 0;
            if (strcmp(lists[k][i], "kernels_cl.c") == 0) /* generated from kernels.cl */
                continue;
            snprintf(path, sizeof path, "%s/%s", dir, lists[k][i]);
            f = fopen(path, "r");
            ck_assert_msg(f != NULL, "cannot read %s", path);
            (*files_seen)++;
            while (fgets(line, sizeof line, f)) {
                char kind = include_name(line, name, sizeof name);
                lineno++;
                if (kind == '<') {
                    if (module_level[m] <= 1 && (strncmp(name, "CL/", 3) == 0 || strncmp(name, "clblast", 7) == 0))
                        report_add(r, "%s/%s:%d: includes <%s>: %s/ must not depend on OpenCL", modules[m],
                                   lists[k][i], lineno, name, modules[m]);
                } else if (kind == '"') {
                    int hm = header_module(name, m);
                    if (hm < 0 && strcmp(name, "config.h") != 0)
                        report_add(r, "%s/%s:%d: includes \"%s\", which no module has", modules[m], lists[k][i],
                                   lineno, name);
                    else if (hm >= 0 && module_level[hm] > module_level[m])
                        report_add(r, "%s/%s:%d: includes \"%s\" of %s/, a module above %s/", modules[m],
                                   lists[k][i], lineno, name, modules[hm], modules[m]);
                }
            }
            fclose(f);
        }
    free_list(lists[0], nf[0]);
    free_list(lists[1], nf[1]);
}

START_TEST(test_includes_point_down)
{
    report r = {0};
    int files = 0;
    for (int m = 0; m < N_MODULES; m++)
        check_module_includes(m, &r, &files);
    ck_assert_msg(files > 50, "only %d source files found under %s", files, srcdir());
    ck_assert_msg(r.count == 0, "%d include(s) against the layering:\n%s", r.count, r.text ? r.text : "");
    free(r.text);
}
END_TEST

/* ---------------------------------------------------------------- calls */

typedef struct {
    char name[128];
    int file;
} symbol;

typedef struct {
    char path[256];  /* module/file.o */
    int module;
    int n_edges;
    int *edges;      /* files it calls */
    char **via;      /* one symbol per edge, for the report */
} objfile;

typedef struct {
    objfile *files;
    int n_files;
    symbol *defs;
    int n_defs, cap_defs;
} callgraph;

static int find_def(const callgraph *g, const char *name)
{
    for (int i = 0; i < g->n_defs; i++)
        if (strcmp(g->defs[i].name, name) == 0)
            return g->defs[i].file;
    return -1;
}

/* Runs nm on one object; each defined (sym_kind 1) or undefined (0) global
 * symbol goes to fn. */
static void read_symbols(const char *obj, void (*fn)(callgraph *, int, const char *, int), callgraph *g, int file)
{
    char cmd[4700], line[512];
    FILE *p;
    snprintf(cmd, sizeof cmd, "nm -g '%s' 2>&1", obj);
    p = popen(cmd, "r");
    ck_assert_msg(p != NULL, "cannot run nm");
    while (fgets(line, sizeof line, p)) {
        char a[256], b[256], c[256];
        int n = sscanf(line, "%255s %255s %255s", a, b, c);
        if (n == 2 && strcmp(a, "U") == 0)
            fn(g, file, b, 0);
        else if (n == 3 && strlen(b) == 1 && strchr("TDBRC", b[0]))
            fn(g, file, c, 1);
    }
    ck_assert_msg(pclose(p) == 0, "nm failed on %s", obj);
}

static void add_def(callgraph *g, int file, const char *name, int defined)
{
    if (!defined)
        return;
    if (g->n_defs == g->cap_defs) {
        g->cap_defs = g->cap_defs ? 2 * g->cap_defs : 256;
        g->defs = realloc(g->defs, sizeof *g->defs * (size_t)g->cap_defs);
        ck_assert_ptr_nonnull(g->defs);
    }
    snprintf(g->defs[g->n_defs].name, sizeof g->defs[0].name, "%s", name);
    g->defs[g->n_defs++].file = file;
}

static void add_use(callgraph *g, int file, const char *name, int defined)
{
    objfile *o = &g->files[file];
    int to;
    if (defined || (to = find_def(g, name)) < 0 || to == file)
        return;
    for (int i = 0; i < o->n_edges; i++)
        if (o->edges[i] == to)
            return;
    o->edges = realloc(o->edges, sizeof *o->edges * (size_t)(o->n_edges + 1));
    o->via = realloc(o->via, sizeof *o->via * (size_t)(o->n_edges + 1));
    ck_assert(o->edges && o->via);
    o->edges[o->n_edges] = to;
    o->via[o->n_edges++] = strdup(name);
}

/* The objects of every module's sources (a .o beside a source that no
 * longer exists is ignored: a stale object of a moved file). */
static void load_objects(callgraph *g)
{
    for (int m = 1; m < N_MODULES; m++) {
        char dir[4096];
        int nc;
        char **srcs;
        snprintf(dir, sizeof dir, "%s/%s", srcdir(), modules[m]);
        srcs = list_files(dir, ".c", &nc);
        for (int i = 0; i < nc; i++) {
            char obj[4608];
            size_t len = strlen(srcs[i]);
            snprintf(obj, sizeof obj, "%s/%s/%.*s.o", builddir(), modules[m], (int)(len - 2), srcs[i]);
            if (!file_exists(obj))
                continue;
            g->files = realloc(g->files, sizeof *g->files * (size_t)(g->n_files + 1));
            ck_assert_ptr_nonnull(g->files);
            memset(&g->files[g->n_files], 0, sizeof g->files[0]);
            snprintf(g->files[g->n_files].path, sizeof g->files[0].path, "%s/%.*s.o", modules[m], (int)(len - 2),
                     srcs[i]);
            g->files[g->n_files++].module = m;
        }
        free_list(srcs, nc);
    }
    for (int pass = 0; pass < 2; pass++)
        for (int f = 0; f < g->n_files; f++) {
            char obj[4608];
            snprintf(obj, sizeof obj, "%s/%s", builddir(), g->files[f].path);
            read_symbols(obj, pass == 0 ? add_def : add_use, g, f);
        }
}

static void free_graph(callgraph *g)
{
    for (int f = 0; f < g->n_files; f++) {
        for (int i = 0; i < g->files[f].n_edges; i++)
            free(g->files[f].via[i]);
        free(g->files[f].edges);
        free(g->files[f].via);
    }
    free(g->files);
    free(g->defs);
}

START_TEST(test_calls_point_down)
{
    callgraph g = {0};
    report r = {0};
    load_objects(&g);
    ck_assert_msg(g.n_files > 40, "only %d objects found under %s: build first", g.n_files, builddir());
    for (int f = 0; f < g.n_files; f++)
        for (int i = 0; i < g.files[f].n_edges; i++) {
            const objfile *to = &g.files[g.files[f].edges[i]];
            if (module_level[to->module] > module_level[g.files[f].module])
                report_add(&r, "%s calls %s of %s, a module above %s/", g.files[f].path, g.files[f].via[i],
                           to->path, modules[g.files[f].module]);
        }
    ck_assert_msg(r.count == 0, "%d call(s) against the layering:\n%s", r.count, r.text ? r.text : "");
    free(r.text);
    free_graph(&g);
}
END_TEST

/* Tarjan's strongly connected components; every component of more than
 * one file is a call cycle. */
typedef struct {
    const callgraph *g;
    int *index, *low, *stack, *on;
    int next, top;
    report *r;
} tarjan;

static void strong(tarjan *t, int v)
{
    const objfile *o = &t->g->files[v];
    t->index[v] = t->low[v] = t->next++;
    t->stack[t->top++] = v;
    t->on[v] = 1;
    for (int i = 0; i < o->n_edges; i++) {
        int w = o->edges[i];
        if (t->index[w] < 0) {
            strong(t, w);
            if (t->low[w] < t->low[v])
                t->low[v] = t->low[w];
        } else if (t->on[w] && t->index[w] < t->low[v])
            t->low[v] = t->index[w];
    }
    if (t->low[v] == t->index[v]) {
        char line[2048];
        size_t off = 0;
        int n = 0, w;
        line[0] = 0;
        do {
            w = t->stack[--t->top];
            t->on[w] = 0;
            off += (size_t)snprintf(line + off, off < sizeof line ? sizeof line - off : 0, "%s%s", n ? " <-> " : "",
                                    t->g->files[w].path);
            n++;
        } while (w != v && off < sizeof line);
        if (n > 1)
            report_add(t->r, "call cycle: %s", line);
    }
}

START_TEST(test_no_call_cycles)
{
    callgraph g = {0};
    report r = {0};
    tarjan t;
    load_objects(&g);
    ck_assert_msg(g.n_files > 40, "only %d objects found under %s: build first", g.n_files, builddir());
    t.g = &g;
    t.index = malloc(sizeof(int) * (size_t)g.n_files);
    t.low = malloc(sizeof(int) * (size_t)g.n_files);
    t.stack = malloc(sizeof(int) * (size_t)g.n_files);
    t.on = calloc((size_t)g.n_files, sizeof(int));
    ck_assert(t.index && t.low && t.stack && t.on);
    t.next = t.top = 0;
    t.r = &r;
    for (int f = 0; f < g.n_files; f++)
        t.index[f] = -1;
    for (int f = 0; f < g.n_files; f++)
        if (t.index[f] < 0)
            strong(&t, f);
    ck_assert_msg(r.count == 0, "%d call cycle(s) between files:\n%s", r.count, r.text ? r.text : "");
    free(t.index);
    free(t.low);
    free(t.stack);
    free(t.on);
    free(r.text);
    free_graph(&g);
}
END_TEST

/* The checks themselves: a report of an up-include and a cycle in made-up
 * input, so that a parser that never matched could not pass silently. */
START_TEST(test_checker_sees_includes)
{
    char name[64];
    ck_assert_int_eq(include_name("#include \"backend.h\"\n", name, sizeof name), '"');
    ck_assert_str_eq(name, "backend.h");
    ck_assert_int_eq(include_name("  #  include <CL/cl.h>", name, sizeof name), '<');
    ck_assert_str_eq(name, "CL/cl.h");
    ck_assert_int_eq(include_name("/* #include \"x.h\" */", name, sizeof name), 0);
    ck_assert_int_eq(include_name("#define X 1", name, sizeof name), 0);
    /* backend.h is found in backend/ from planner/: level 2 above level 1 */
    ck_assert_int_eq(header_module("backend.h", 2), 3);
    ck_assert_int_eq(module_level[header_module("backend.h", 2)], 2);
    ck_assert_int_eq(header_module("graph.h", 2), 1);
    ck_assert_int_eq(header_module("no-such-header.h", 2), -1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("layering");
    TCase *tc = tcase_create("layering");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_checker_sees_includes);
    tcase_add_test(tc, test_includes_point_down);
    tcase_add_test(tc, test_calls_point_down);
    tcase_add_test(tc, test_no_call_cycles);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
