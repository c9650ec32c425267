/* pith devices: where a model can run. One line for the CPU (its kernel table), one per Vulkan device
 * (index, name, memory, and the features the backend needs or why it cannot run there). The names it
 * prints are what --device and PITH_DEVICE take. */
#include <stdio.h>
#include <string.h>

#include "backend/info.h"
#include "cli/cli.h"

int pith_cmd_devices(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: pith devices\n\n"
                   "Lists the devices a model can run on: 'cpu' with the kernel table chosen for this\n"
                   "processor, then each Vulkan device as vulkan:N with its name, memory and whether the\n"
                   "Vulkan backend can run there (and why not). Pass a name to --device (run, bench,\n"
                   "serve) or set PITH_DEVICE; 'vulkan' alone picks the first usable Vulkan device.\n"
                   "Exit status: 0 when the listing worked, 1 when the Vulkan loader could not be asked.\n");
            return 0;
        }
        fprintf(stderr, "pith devices: unknown argument '%s' (try 'pith devices --help')\n", argv[i]);
        return PITH_EXIT_USAGE;
    }
    char buf[8192];
    pith_err err;
    int rc = pith_backend_list_devices(buf, sizeof buf, &err);
    fputs(buf, stdout);
    if (rc) fprintf(stderr, "pith devices: %s\n", err.msg);
    if (fflush(stdout) || ferror(stdout)) return 1;
    return rc ? 1 : 0;
}
