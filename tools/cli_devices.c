/* cli_devices.c: `clremat devices`, the device listing (table or JSON). */
#include "cli.h"
#include "clremat.h"
#include "report_json.h"
#include <stdlib.h>
#include <string.h>

static void print_table(const clremat_device_info *d, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        printf("%u:%u  %s\n", d[i].platform_index, d[i].device_index, d[i].name);
        printf("     platform        %s\n", d[i].platform);
        printf("     vendor          %s\n", d[i].vendor);
        printf("     type            %s\n", d[i].type);
        printf("     driver          %s\n", d[i].driver_version);
        printf("     version         %s / %s\n", d[i].device_version, d[i].opencl_c_version);
        printf("     compute units   %u\n", d[i].compute_units);
        printf("     global memory   %llu bytes (%.2f GiB)\n", (unsigned long long)d[i].global_mem_bytes,
               (double)d[i].global_mem_bytes / 1073741824.0);
        printf("     max allocation  %llu bytes (%.2f GiB)\n", (unsigned long long)d[i].max_alloc_bytes,
               (double)d[i].max_alloc_bytes / 1073741824.0);
        if (d[i].free_mem_bytes)
            printf("     free memory     %llu bytes (%.2f GiB)\n", (unsigned long long)d[i].free_mem_bytes,
                   (double)d[i].free_mem_bytes / 1073741824.0);
        else
            printf("     free memory     not reported (OpenCL has no query; AMD devices report it)\n");
        printf("     out-of-order    %s\n", d[i].out_of_order ? "yes" : "no");
        printf("     profiling       %s\n", d[i].profiling ? "yes" : "no");
    }
    if (n == 0)
        printf("no OpenCL devices found%s\n", clremat_no_device_hint());
}

int cli_devices(const cli_global *g, int argc, char **argv)
{
    cli_devices_opts o;
    const char *device;
    clremat_device_info *devs = NULL;
    size_t n = 0;
    int json, st = cli_devices_parse(g, argc, argv, &o);

    if (st != CLI_CONTINUE)
        return st;
    device = o.device;
    json = o.json;
    if (!device || !*device)
        device = getenv("CLREMAT_DEVICE");
    if (device && *device) {
        clremat_device_info one;
        /* NULL: the library reads CLREMAT_DEVICE itself and names it in an error */
        st = clremat_select_device(o.device && *o.device ? device : NULL, &one);
        if (st != CLREMAT_OK)
            return cli_error("%s", clremat_last_error());
        if (json)
            clremat_report_devices_json(stdout, &one, 1);
        else
            print_table(&one, 1);
        return 0;
    }
    st = clremat_list_devices(&devs, &n);
    if (st != CLREMAT_OK)
        return cli_error("%s", clremat_last_error());
    if (json)
        clremat_report_devices_json(stdout, devs, n);
    else
        print_table(devs, n);
    free(devs);
    return 0;
}
