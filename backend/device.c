/* device.c: enumerates every OpenCL platform and device and resolves a
 * device selection ("P:D", a type, or a name substring). */
#include "backend.h"
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

/* Reads a string property, truncating it to len-1 characters if longer. */
static void get_str(cl_device_id d, cl_device_info what, char *dst, size_t len)
{
    size_t need = 0;
    char *tmp;
    snprintf(dst, len, "?");
    if (clGetDeviceInfo(d, what, 0, NULL, &need) != CL_SUCCESS || need == 0)
        return;
    tmp = malloc(need);
    if (tmp && clGetDeviceInfo(d, what, need, tmp, NULL) == CL_SUCCESS) {
        tmp[need - 1] = 0;
        snprintf(dst, len, "%s", tmp);
    }
    free(tmp);
}

/* Free device memory in bytes where the device reports it: AMD's
 * cl_amd_device_attribute_query gives free kilobytes (total, largest
 * block); OpenCL itself has no such query. 0 when not reported. */
static uint64_t free_memory(cl_device_id d)
{
    char ext[8192] = "";
    size_t kb[2] = {0, 0}, got = 0;
    if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, sizeof ext - 1, ext, NULL) != CL_SUCCESS ||
        !strstr(ext, "cl_amd_device_attribute_query"))
        return 0;
    if (clGetDeviceInfo(d, CL_DEVICE_GLOBAL_FREE_MEMORY_AMD, sizeof kb, kb, &got) != CL_SUCCESS || got < sizeof kb[0])
        return 0;
    return (uint64_t)kb[0] * 1024;
}

static void fill_info(cl_platform_id p, cl_device_id d, unsigned pi, unsigned di, clremat_device_info *o)
{
    cl_device_type type = 0;
    cl_uint cu = 0;
    cl_ulong gmem = 0, maxalloc = 0;
    cl_command_queue_properties qp = 0;

    memset(o, 0, sizeof *o);
    o->platform_index = pi;
    o->device_index = di;
    if (clGetPlatformInfo(p, CL_PLATFORM_NAME, sizeof o->platform, o->platform, NULL) != CL_SUCCESS)
        snprintf(o->platform, sizeof o->platform, "?");
    o->platform[sizeof o->platform - 1] = 0;
    get_str(d, CL_DEVICE_NAME, o->name, sizeof o->name);
    get_str(d, CL_DEVICE_VENDOR, o->vendor, sizeof o->vendor);
    get_str(d, CL_DRIVER_VERSION, o->driver_version, sizeof o->driver_version);
    get_str(d, CL_DEVICE_VERSION, o->device_version, sizeof o->device_version);
    get_str(d, CL_DEVICE_OPENCL_C_VERSION, o->opencl_c_version, sizeof o->opencl_c_version);
    clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);
    clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof gmem, &gmem, NULL);
    clGetDeviceInfo(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof maxalloc, &maxalloc, NULL);
    clGetDeviceInfo(d, CL_DEVICE_QUEUE_PROPERTIES, sizeof qp, &qp, NULL);
    snprintf(o->type, sizeof o->type, "%s",
             (type & CL_DEVICE_TYPE_GPU) ? "gpu" : (type & CL_DEVICE_TYPE_CPU) ? "cpu"
             : (type & CL_DEVICE_TYPE_ACCELERATOR) ? "accelerator" : "other");
    o->compute_units = cu;
    o->global_mem_bytes = gmem;
    o->max_alloc_bytes = maxalloc;
    o->free_mem_bytes = free_memory(d);
    o->out_of_order = (qp & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE) != 0;
    o->profiling = (qp & CL_QUEUE_PROFILING_ENABLE) != 0;
    {
        cl_bool unified = CL_FALSE;
        if (clGetDeviceInfo(d, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL) == CL_SUCCESS)
            o->host_unified = unified == CL_TRUE;
    }
}

/* The first clGetPlatformIDs makes the ICD loader dlopen every OpenCL
 * runtime installed, whose constructors keep allocations for the life of the
 * process. Mesa's Clover then dlcloses its gallium pipe driver, so its
 * allocation shows no module LeakSanitizer could be told to suppress; in
 * AddressSanitizer builds the runtimes' start-up is kept out of leak
 * checking instead (tests/lsan.supp covers the rest). */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
static cl_int platform_ids(cl_uint n, cl_platform_id *p, cl_uint *np)
{
    cl_int err;
    __lsan_disable();
    err = clGetPlatformIDs(n, p, np);
    __lsan_enable();
    return err;
}
#else
#define platform_ids clGetPlatformIDs
#endif

/* Environment settings for the OpenCL runtimes, made once before PoCL is
 * loaded by the first clGetPlatformIDs.
 * PoCL's CPU driver leaves the placement of its worker threads to the OS.
 * For short kernels (a 256^3 GEMM runs for about 0.3 ms) the woken workers
 * were often found on one core, so the launch ran at one core's speed: on a
 * 2-core machine the native GEMM reached 60-80 GFLOP/s at 256^3 and 512^3
 * in most processes, 115-140 with each worker pinned to its own core
 * (POCL_AFFINITY=1), and training steps were no slower pinned
 * (bench/README.md). So it is set, before PoCL is loaded by the first
 * clGetPlatformIDs, unless the environment already says otherwise
 * (POCL_AFFINITY=0 turns it off; docs/environment.md). */
static void set_runtime_defaults(void)
{
    const char *cache = getenv("POCL_CACHE_DIR");
    setenv("POCL_AFFINITY", "1", 0);
    /* PoCL 3.1 aborts the process (an assertion in pocl_cache_init_topdir)
     * when POCL_CACHE_DIR is set but empty; empty means unset elsewhere
     * (XDG_CACHE_HOME, CLREMAT_DEVICE), so here too */
    if (cache && !*cache)
        unsetenv("POCL_CACHE_DIR");
}

/* Calls fn for every device; stops early when fn returns non-zero. */
static int for_each_device(int (*fn)(void *, cl_platform_id, cl_device_id, unsigned, unsigned), void *user)
{
    cl_uint np = 0;
    cl_platform_id *plats = NULL;
    cl_int err;
    static pthread_once_t defaults_once = PTHREAD_ONCE_INIT;
    pthread_once(&defaults_once, set_runtime_defaults);
    err = platform_ids(0, NULL, &np);
    if (err == CL_PLATFORM_NOT_FOUND_KHR || np == 0)
        return CLREMAT_OK;
    if (err != CL_SUCCESS)
        return clremat_set_error(err, "clGetPlatformIDs failed: %s", clremat_status_str(err));
    plats = calloc(np, sizeof *plats);
    if (!plats)
        return clremat_set_error(CL_OUT_OF_HOST_MEMORY, "out of host memory");
    err = platform_ids(np, plats, NULL);
    for (cl_uint pi = 0; err == CL_SUCCESS && pi < np; pi++) {
        cl_uint nd = 0;
        cl_device_id *devs;
        if (clGetDeviceIDs(plats[pi], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) != CL_SUCCESS || nd == 0)
            continue;
        devs = calloc(nd, sizeof *devs);
        if (!devs)
            break;
        if (clGetDeviceIDs(plats[pi], CL_DEVICE_TYPE_ALL, nd, devs, NULL) == CL_SUCCESS) {
            for (cl_uint di = 0; di < nd; di++)
                if (fn(user, plats[pi], devs[di], pi, di)) {
                    free(devs);
                    goto done;
                }
        }
        free(devs);
    }
done:
    free(plats);
    return CLREMAT_OK;
}

struct list_acc {
    clremat_device_info *v;
    size_t n, cap;
    int oom;
};

static int list_cb(void *user, cl_platform_id p, cl_device_id d, unsigned pi, unsigned di)
{
    struct list_acc *a = user;
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 8;
        clremat_device_info *v = realloc(a->v, cap * sizeof *v);
        if (!v) {
            a->oom = 1;
            return 1;
        }
        a->v = v;
        a->cap = cap;
    }
    fill_info(p, d, pi, di, &a->v[a->n++]);
    return 0;
}

int clremat_list_devices(clremat_device_info **devices, size_t *count)
{
    struct list_acc a = {0};
    int st = for_each_device(list_cb, &a);
    if (st == CLREMAT_OK && a.oom)
        st = clremat_set_error(CL_OUT_OF_HOST_MEMORY, "out of host memory listing devices");
    if (st != CLREMAT_OK) {
        free(a.v);
        return st;
    }
    *devices = a.v;
    *count = a.n;
    return CLREMAT_OK;
}

static int contains_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0)
            return 1;
    return 0;
}

/* Index into devs of the device a selection names, or -1. */
static long match(const clremat_device_info *devs, size_t n, const char *sel)
{
    unsigned p, d;
    char tail;
    /* "P:D": digits only (sscanf alone would take " 1:-2" or wrap 99999999999) */
    if (strspn(sel, "0123456789") > 0 && strspn(sel, "0123456789") <= 6 && sel[strspn(sel, "0123456789")] == ':' &&
        strspn(sel + strspn(sel, "0123456789") + 1, "0123456789") > 0 &&
        strspn(sel + strspn(sel, "0123456789") + 1, "0123456789") <= 6 &&
        sscanf(sel, "%u:%u%c", &p, &d, &tail) == 2) {
        for (size_t i = 0; i < n; i++)
            if (devs[i].platform_index == p && devs[i].device_index == d)
                return (long)i;
        return -1;
    }
    if (!strcasecmp(sel, "cpu") || !strcasecmp(sel, "gpu") || !strcasecmp(sel, "accelerator")) {
        for (size_t i = 0; i < n; i++)
            if (!strcasecmp(devs[i].type, sel))
                return (long)i;
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (contains_ci(devs[i].name, sel))
            return (long)i;
    for (size_t i = 0; i < n; i++)
        if (contains_ci(devs[i].platform, sel))
            return (long)i;
    return -1;
}

/* Whether the folder of ICD files at path holds one whose name mentions
 * PoCL (Debian's pocl.icd, or a renamed copy). */
static int vendors_name_pocl(const char *path)
{
    DIR *d = opendir(path);
    const struct dirent *e;
    int found = 0;
    if (!d)
        return 0;
    while (!found && (e = readdir(d)))
        found = contains_ci(e->d_name, "pocl") && strlen(e->d_name) > 4 &&
                !strcmp(e->d_name + strlen(e->d_name) - 4, ".icd");
    closedir(d);
    return found;
}

/* Whether the OpenCL ICD loader would load PoCL: a library named in
 * OCL_ICD_FILENAMES, the folder or file OCL_ICD_VENDORS names (ocl-icd's
 * overrides), else /etc/OpenCL/vendors. */
static int pocl_registered(void)
{
    const char *files = getenv("OCL_ICD_FILENAMES"), *vendors = getenv("OCL_ICD_VENDORS");
    struct stat sb;
    if (files && contains_ci(files, "pocl"))
        return 1;
    if (vendors && *vendors) /* a folder, or one ICD file: its own name, not its folder's */
        return stat(vendors, &sb) == 0 && S_ISDIR(sb.st_mode)
                   ? vendors_name_pocl(vendors)
                   : contains_ci(strrchr(vendors, '/') ? strrchr(vendors, '/') + 1 : vendors, "pocl");
    return vendors_name_pocl("/etc/OpenCL/vendors");
}

/* PoCL lists no device when it cannot create its kernel cache: its ICD is
 * registered (pocl_registered), yet the folder (POCL_CACHE_DIR, else
 * $XDG_CACHE_HOME/pocl, else $HOME/.cache/pocl) cannot be made. */
const char *clremat_no_device_hint(void)
{
    static _Thread_local char hint[8600];
    const char *pocl = getenv("POCL_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char dir[4200], probe[4200];
    struct stat sb;
    if (!pocl_registered())
        return "";
    if (pocl && *pocl)
        snprintf(dir, sizeof dir, "%s", pocl);
    else if (xdg && *xdg)
        snprintf(dir, sizeof dir, "%s/pocl", xdg);
    else if (home && *home)
        snprintf(dir, sizeof dir, "%s/.cache/pocl", home);
    else
        return "";
    /* the nearest existing folder on the way must be a writable folder */
    snprintf(probe, sizeof probe, "%s", dir);
    for (;;) {
        char *slash;
        if (stat(probe, &sb) == 0) {
            if (S_ISDIR(sb.st_mode) && access(probe, W_OK | X_OK) == 0)
                return "";
            break;
        }
        if (!(slash = strrchr(probe, '/')) || slash == probe)
            break;
        *slash = 0;
    }
    snprintf(hint, sizeof hint, "; PoCL is installed but cannot create its kernel cache in %s (%s is not a writable "
             "folder): set POCL_CACHE_DIR or XDG_CACHE_HOME to one", dir, probe);
    return hint;
}

int clremat_select_device(const char *selection, clremat_device_info *out)
{
    return clremat_select_device_as(selection, "--device", out);
}

int clremat_select_device_as(const char *selection, const char *from, clremat_device_info *out)
{
    clremat_device_info *devs = NULL;
    size_t n = 0;
    long idx = -1;
    int st = clremat_list_devices(&devs, &n);
    if (st != CLREMAT_OK)
        return st;
    if (!selection || !*selection) {
        selection = getenv("CLREMAT_DEVICE");
        from = "CLREMAT_DEVICE";
    }
    if (n == 0) {
        free(devs);
        return clremat_set_error(CLREMAT_ERR_NO_DEVICE,
            "no OpenCL device found: install an OpenCL implementation such as PoCL "
            "(apt-get install pocl-opencl-icd), or for Mesa rusticl set RUSTICL_ENABLE=llvmpipe%s",
            clremat_no_device_hint());
    }
    if (selection && *selection) {
        idx = match(devs, n, selection);
    } else {
        idx = match(devs, n, "gpu");
        if (idx < 0)
            idx = 0;
    }
    if (idx < 0) {
        char msg[CLREMAT_ERRMSG_LEN];
        int off = snprintf(msg, sizeof msg, "%s '%s' matches no OpenCL device; devices are:", from, selection);
        for (size_t i = 0; i < n && off > 0 && (size_t)off < sizeof msg; i++)
            off += snprintf(msg + off, sizeof msg - (size_t)off, "\n  %u:%u  %s  [%s, %s]",
                            devs[i].platform_index, devs[i].device_index, devs[i].name,
                            devs[i].platform, devs[i].type);
        free(devs);
        return clremat_set_error(CLREMAT_ERR_DEVICE_NOT_FOUND, "%s", msg);
    }
    *out = devs[idx];
    free(devs);
    return CLREMAT_OK;
}

struct find_acc {
    unsigned pi, di;
    cl_platform_id p;
    cl_device_id d;
};

static int find_cb(void *user, cl_platform_id p, cl_device_id d, unsigned pi, unsigned di)
{
    struct find_acc *a = user;
    if (pi != a->pi || di != a->di)
        return 0;
    a->p = p;
    a->d = d;
    return 1;
}

/* Internal: the OpenCL handles of an enumerated device. */
int clremat_device_handles(const clremat_device_info *info, cl_platform_id *p, cl_device_id *d)
{
    struct find_acc a = {info->platform_index, info->device_index, NULL, NULL};
    int st = for_each_device(find_cb, &a);
    if (st != CLREMAT_OK)
        return st;
    if (!a.d)
        return clremat_set_error(CLREMAT_ERR_DEVICE_NOT_FOUND, "device %u:%u disappeared",
                                 info->platform_index, info->device_index);
    *p = a.p;
    *d = a.d;
    return CLREMAT_OK;
}
