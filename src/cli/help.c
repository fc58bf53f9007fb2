/* help: `kvc help [COMMAND]`, `kvc --help` (the list of commands) and `kvc --version`. */
#include "cli/cli.h"
#include "base/util.h"
#include "cli/provenance.h"
#include "decode/decode.h"

#include <stdio.h>

const char cmd_help_usage[] = "usage: kvc help [COMMAND]\n";
const OptSpec cmd_help_opts[] = {{NULL, NULL, 0}};

void cmd_usage_main(FILE *f)
{
    fprintf(f, "kvc %s: a laboratory for KV-cache compression\n\n", KVC_VERSION);
    fprintf(f, "usage: kvc COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < cmd_count; i++) fprintf(f, "  %-9s %s\n", cmd_table[i].name, cmd_table[i].summary);
    fprintf(f, "\n  kvc --version     print the version, commit, compiler, BLAS build and decode kernels\n"
               "  kvc help COMMAND  help for one command (also: kvc COMMAND --help)\n\n"
               "exit status: 0 ok, 1 runtime failure (e.g. a write error), 2 usage or input error\n");
}

/* The first line is "kvc VERSION" alone (scripts read it); then what the build and this machine chose. */
int cmd_version(void)
{
    printf("kvc %s\n", KVC_VERSION);
    printf("commit:   %s\n", prov_commit());
    printf("compiler: %s\n", prov_compiler());
    printf("flags:    %s\n", prov_build_flags());
    printf("blas:     %s (core %s)\n", prov_blas(), prov_blas_core());
    printf("kernels:  %s (decode kernels chosen at run time for this CPU: avx512, avx2 or scalar%s%s)\n", decode_isa(),
           decode_amx_values() ? "; int8 / int4 keys and values of several query heads on AMX tiles"
           : decode_amx()      ? "; int8 / int4 keys of several query heads on AMX tiles"
                               : "",
           decode_amx_bf16() ? "; e4m3 and bf16 keys of several query heads on AMX-BF16 tiles" : "");
    return EXIT_OK;
}

int cmd_help(int argc, char **argv)
{
    const char *topic = NULL;
    OptParser p;
    opt_init(&p, "help", argc, argv, cmd_help_opts);
    for (int k; (k = opt_next(&p)) != OPT_END;) {
        if (k == OPT_ERROR) return cmd_fail(EXIT_USAGE);
        if (topic) {
            kvc_fail("help: one command at most; see kvc help (got \"%s\" after \"%s\")", p.value, topic);
            return cmd_fail(EXIT_USAGE);
        }
        topic = p.value;
    }
    if (!topic) {
        cmd_usage_main(stdout);
        return EXIT_OK;
    }
    const Command *c = cmd_find(topic);
    if (!c) {
        kvc_fail("help: unknown command; see kvc help (got \"%s\")", topic);
        return cmd_fail(EXIT_USAGE);
    }
    fputs(c->usage, stdout);
    return EXIT_OK;
}
