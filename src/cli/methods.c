/* methods: `kvc methods`, the compression methods of the registry (src/methods/methods.h) with their
 * parameters, ranges and defaults. */
#include "cli/cli.h"
#include "base/util.h"
#include "methods/methods.h"

#include <stdio.h>
#include <string.h>

const char cmd_methods_usage[] =
    "usage: kvc methods\n"
    "\n"
    "Every method runs once per (layer, KV head) on that head's (tokens, head_dim) cache; the bytes of all\n"
    "heads are summed. A method marked [oracle] looks at the exact attention of the evaluation queries,\n"
    "which no real cache can know: it is a bound, not a method to deploy.\n";

const OptSpec cmd_methods_opts[] = {{NULL, NULL, 0}};

int cmd_methods(int argc, char **argv)
{
    OptParser op;
    opt_init(&op, "methods", argc, argv, cmd_methods_opts);
    switch (opt_next(&op)) {
    case OPT_END:
        break;
    case OPT_ARG:
        kvc_fail("methods: takes no arguments (got \"%s\")", op.value);
        return cmd_fail(EXIT_USAGE);
    default:   /* OPT_ERROR: an option */
        return cmd_fail(EXIT_USAGE);
    }
    for (size_t i = 0; i < method_count; i++) {
        const MethodDesc *m = method_registry[i];
        printf("%s%s\n  shrinks: %s\n  %s\n", m->name, m->needs_query ? "  [oracle: sees the evaluation queries]" : "",
               m->factor, m->summary);
        /* columns sized to this method's longest name, range and default */
        int wn = 0, wr = 0, wd = 0;
        char def[METHOD_MAX_PARAMS][64], range[METHOD_MAX_PARAMS][128];
        for (size_t j = 0; j < m->n_params; j++) {
            const ParamDesc *p = &m->params[j];
            param_default_text(def[j], sizeof def[j], p);
            param_range_text(range[j], sizeof range[j], p);
            if ((int)strlen(p->name) > wn) wn = (int)strlen(p->name);
            if ((int)strlen(range[j]) > wr) wr = (int)strlen(range[j]);
            if ((int)strlen(def[j]) > wd) wd = (int)strlen(def[j]);
        }
        for (size_t j = 0; j < m->n_params; j++)
            printf("    %-*s  %-*s  %-*s  %s\n", wn, m->params[j].name, wr, range[j], wd, def[j], m->params[j].help);
        printf("\n");
    }
    return EXIT_OK;
}
