#include "cli/cli.h"
#include <stdio.h>
int cli_gguf_main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "strata gguf: not built yet\n");
    return 1;
}
