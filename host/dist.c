/* dist.c: the MPI layer of data-parallel training (dist.h): start-up under
 * mpirun, one device per local rank, the in-place all-to-all and all-gather
 * host/dp.c sums in rank order, agreement on start-up failures, the per-rank
 * report, and MPI_Abort with a message when a rank fails or the others stop
 * answering within the time limit. Every wait is a nonblocking MPI call
 * tested in a loop against that limit, so no wait is unbounded. */
#include "dist.h"
#include "dp.h"
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static clremat_dist g_d;        /* this process, for the transport's messages */
static long g_exchanges;        /* all-to-alls so far (the fault hook counts them) */
static long g_fault_rank = -1, g_fault_at = -1; /* $CLREMAT_MPI_FAULT: kill:R:K or hang:R:K */
static int g_fault_hang;

void clremat_dist_abort(const clremat_dist *d, const char *msg)
{
    fprintf(stderr, "clremat: rank %d of %d (host %s): %s\n", d->rank, d->nranks, d->host, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1); /* MPI_Abort does not return; this satisfies noreturn */
}

/* Waits for req, testing it every 50 microseconds, at most the time limit;
 * past it the job is ended with a message naming what was waited for. */
static void wait_req(MPI_Request *req, const char *what)
{
    double t0 = MPI_Wtime();
    int done = 0;
    const struct timespec nap = {0, 50000};
    for (;;) {
        if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            char msg[512];
            snprintf(msg, sizeof msg, "MPI failed while %s; ending the job", what);
            clremat_dist_abort(&g_d, msg);
        }
        if (done)
            return;
        if (MPI_Wtime() - t0 > g_d.timeout_s) {
            char msg[512];
            snprintf(msg, sizeof msg,
                     "no answer from the other ranks within %g s while %s (a rank died or hangs); ending the job "
                     "(CLREMAT_MPI_TIMEOUT sets the limit)",
                     g_d.timeout_s, what);
            clremat_dist_abort(&g_d, msg);
        }
        nanosleep(&nap, NULL);
    }
}

static int t_alltoall(void *user, float *buf, int64_t count)
{
    MPI_Request req;
    (void)user;
    if (g_d.rank == g_fault_rank && g_exchanges == g_fault_at) { /* test hook: this rank dies or hangs here */
        fprintf(stderr, "clremat: rank %d: CLREMAT_MPI_FAULT: %s this rank at exchange %ld\n", g_d.rank,
                g_fault_hang ? "hanging" : "killing", g_exchanges);
        fflush(stderr);
        if (!g_fault_hang)
            raise(SIGKILL);
        for (;;)
            pause();
    }
    g_exchanges++;
    if (MPI_Ialltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)count, MPI_FLOAT, MPI_COMM_WORLD, &req) !=
        MPI_SUCCESS)
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "MPI_Ialltoall of %lld floats failed", (long long)count);
    wait_req(&req, "averaging gradients (all-to-all)");
    return CLREMAT_OK;
}

static int t_allgather(void *user, float *buf, int64_t count)
{
    MPI_Request req;
    (void)user;
    if (MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)count, MPI_FLOAT, MPI_COMM_WORLD, &req) !=
        MPI_SUCCESS)
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "MPI_Iallgather of %lld floats failed", (long long)count);
    wait_req(&req, "averaging gradients (all-gather)");
    return CLREMAT_OK;
}

int clremat_dist_init(int *argc, char ***argv, uint64_t bucket_bytes, clremat_dist *d)
{
    const char *t = getenv("CLREMAT_MPI_TIMEOUT"), *f = getenv("CLREMAT_MPI_FAULT");
    MPI_Comm local;
    memset(d, 0, sizeof *d);
    d->nranks = d->local_size = 1;
    d->timeout_s = 300;
    if (t && *t) {
        char *end;
        double v = strtod(t, &end);
        if (*end || !(v > 0))
            return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT,
                                     "CLREMAT_MPI_TIMEOUT must be a positive number of seconds, got \"%s\"", t);
        d->timeout_s = v;
    }
    gethostname(d->host, sizeof d->host - 1);
    /* only under mpirun: a plain run never starts MPI */
    if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMIX_RANK") && !getenv("PMI_SIZE"))
        return CLREMAT_OK;
    if (MPI_Init(argc, argv) != MPI_SUCCESS)
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "MPI_Init failed");
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->nranks);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &d->local_rank);
    MPI_Comm_size(local, &d->local_size);
    MPI_Comm_free(&local);
    g_d = *d;
    if (f && *f) {
        g_fault_hang = strncmp(f, "hang:", 5) == 0;
        if (sscanf(f + (g_fault_hang ? 5 : strncmp(f, "kill:", 5) == 0 ? 5 : 0), "%ld:%ld", &g_fault_rank,
                   &g_fault_at) != 2 || (!g_fault_hang && strncmp(f, "kill:", 5) != 0))
            return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT,
                                     "CLREMAT_MPI_FAULT must be kill:RANK:EXCHANGE or hang:RANK:EXCHANGE, got \"%s\"",
                                     f);
    }
    if (d->nranks >= 2) {
        clremat_dp_transport tr = {0};
        tr.rank = d->rank;
        tr.nranks = d->nranks;
        tr.bucket_bytes = bucket_bytes ? bucket_bytes : (uint64_t)1 << 20;
        tr.alltoall = t_alltoall;
        tr.allgather = t_allgather;
        clremat_dp_set_transport(&tr);
    }
    return CLREMAT_OK;
}

void clremat_dist_finalize(const clremat_dist *d)
{
    int up = 0, down = 0;
    (void)d;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (up && !down)
        MPI_Finalize();
}

/* 1 when device v matches selection sel the way clremat_select_device
 * matches ("P:D", a type, a name or platform substring). */
static int matches(const clremat_device_info *v, const char *sel)
{
    unsigned p, dd;
    char tail;
    size_t n = strlen(sel);
    if (sscanf(sel, "%u:%u%c", &p, &dd, &tail) == 2)
        return v->platform_index == p && v->device_index == dd;
    if (!strcasecmp(sel, "cpu") || !strcasecmp(sel, "gpu") || !strcasecmp(sel, "accelerator"))
        return !strcasecmp(v->type, sel);
    for (const char *h = v->name; *h; h++)
        if (!strncasecmp(h, sel, n))
            return 1;
    for (const char *h = v->platform; *h; h++)
        if (!strncasecmp(h, sel, n))
            return 1;
    return 0;
}

int clremat_dist_pick_device(const clremat_dist *d, const char *sel, char *out, size_t len)
{
    clremat_device_info *devs = NULL;
    size_t n = 0, m = 0;
    long pick = -1;
    int st;
    if (!sel || !*sel)
        sel = getenv("CLREMAT_DEVICE");
    if (sel && strchr(sel, ',')) { /* one per local rank */
        const char *s = sel;
        int k = 0;
        for (; k < d->local_rank && s; k++) {
            s = strchr(s, ',');
            s = s ? s + 1 : NULL;
        }
        if (!s)
            return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT,
                                     "--device '%s' lists %d devices but host %s runs %d ranks (local rank %d has "
                                     "none): list one device per local rank",
                                     sel, k, d->host, d->local_size, d->local_rank);
        snprintf(out, len, "%.*s", (int)strcspn(s, ","), s);
        return CLREMAT_OK;
    }
    if ((st = clremat_list_devices(&devs, &n)) != CLREMAT_OK)
        return st;
    {
        size_t gpus = 0;
        for (size_t i = 0; i < n; i++)
            gpus += !strcasecmp(devs[i].type, "gpu");
        /* the devices the selection matches; by default the GPUs, else every device */
        for (int pass = 0; pass < 2; pass++)
            for (size_t i = 0, k = 0; i < n; i++) {
                int hit = sel && *sel ? matches(&devs[i], sel) : gpus ? !strcasecmp(devs[i].type, "gpu") : 1;
                if (hit && pass == 0)
                    m++;
                else if (hit && pick < 0 && k++ == (size_t)d->local_rank % m)
                    pick = (long)i;
            }
    }
    if (pick >= 0)
        snprintf(out, len, "%u:%u", devs[pick].platform_index, devs[pick].device_index);
    else /* nothing matches: the context's own error lists the devices */
        snprintf(out, len, "%s", sel ? sel : "");
    free(devs);
    return CLREMAT_OK;
}

int clremat_dist_agree(const clremat_dist *d, int st, const char *msg, char *why, size_t len)
{
    enum { MSG = 512 };
    char *all = NULL, mine[MSG];
    int *sts = NULL, first = CLREMAT_OK;
    MPI_Request req;
    size_t off = 0;
    why[0] = 0;
    if (d->nranks < 2)
        return st;
    sts = calloc((size_t)d->nranks, sizeof *sts);
    all = calloc((size_t)d->nranks, MSG);
    if (!sts || !all)
        clremat_dist_abort(d, "out of host memory");
    snprintf(mine, sizeof mine, "(host %s): %s", d->host, st ? msg : "");
    MPI_Iallgather(&st, 1, MPI_INT, sts, 1, MPI_INT, MPI_COMM_WORLD, &req);
    wait_req(&req, "agreeing on start-up");
    MPI_Iallgather(mine, MSG, MPI_CHAR, all, MSG, MPI_CHAR, MPI_COMM_WORLD, &req);
    wait_req(&req, "agreeing on start-up");
    for (int r = 0; r < d->nranks; r++)
        if (sts[r] != CLREMAT_OK) {
            if (first == CLREMAT_OK)
                first = sts[r];
            if (off < len)
                off += (size_t)snprintf(why + off, len - off, "%srank %d of %d %s", off ? "; " : "", r, d->nranks,
                                        all + (size_t)r * MSG);
        }
    free(sts);
    free(all);
    return first;
}

static uint64_t fnv1a(const void *p, size_t n, uint64_t h)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

void clremat_dist_rank_fill(const clremat_dist *d, const clremat_train_result *r, clremat_dist_rank *o)
{
    memset(o, 0, sizeof *o);
    o->rank = d->rank;
    o->local_rank = d->local_rank;
    snprintf(o->host, sizeof o->host, "%s", d->host);
    snprintf(o->device, sizeof o->device, "%s", r->device);
    snprintf(o->platform, sizeof o->platform, "%s", r->platform);
    snprintf(o->remat, sizeof o->remat, "%s", r->remat);
    o->local_batch = r->local_batch;
    o->steps_run = r->steps_run;
    o->predicted_peak = r->predicted_peak;
    o->measured_peak = r->measured_peak;
    o->staging_bytes = r->staging_bytes;
    o->buckets = r->buckets;
    o->median_ms = r->median_ms;
    o->comm_median_ms = r->comm_median_ms;
    o->comm_share = r->comm_share;
    o->wait_median_ms = r->wait_median_ms;
    o->final_loss = r->final_loss;
    o->losses_hash = fnv1a(r->losses, sizeof(float) * (size_t)r->steps_run, 1469598103934665603ull);
    o->params_hash = r->final_params ? fnv1a(r->final_params, r->param_bytes, 1469598103934665603ull) : 0;
}

int clremat_dist_gather(const clremat_dist *d, const clremat_dist_rank *mine, clremat_dist_rank **all)
{
    MPI_Request req;
    *all = NULL;
    if (d->rank == 0 && !(*all = calloc((size_t)d->nranks, sizeof **all)))
        clremat_dist_abort(d, "out of host memory");
    MPI_Igather(mine, (int)sizeof *mine, MPI_BYTE, *all, (int)sizeof *mine, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
    wait_req(&req, "gathering the ranks' reports");
    return CLREMAT_OK;
}
