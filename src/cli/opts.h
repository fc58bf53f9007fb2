/* opts: the one command-line option parser of every kvc command (src/cli/ only; the library never sees argv).
 *
 * A command lists its options in a table of OptSpec, ended by {NULL}, and reads its words with opt_next().
 * The rules are the same for every command:
 *  - an option with a value is written "--name VALUE" or "--name=VALUE"; the word after "--name" is its value
 *    whatever it looks like ("--head-dim -5" hands "-5" to --head-dim, which then refuses it); a one-letter
 *    spelling also takes its value attached ("-j4" as "-j 4", "-oout.csv" as "-o out.csv");
 *  - a flag takes no value: "--per-head=1" is refused ("run: --per-head: takes no value (got \"1\")");
 *  - an option may be given again: the command decides whether the last one counts or each one is collected
 *    (--set);
 *  - "-h" and "--help" where an option may stand ask for the command's usage; main.c answers them once for every
 *    command (opt_help_asked) before the command runs;
 *  - "--" ends the options (every later word is an argument); "-" alone is an argument;
 *  - any other word starting with '-' is an unknown option, refused with the nearest long option when one is
 *    close: "run: unknown option; did you mean \"--threads\"? see kvc run --help (got \"--tread\")".
 * Every refusal is one kvc_fail() message "<where>: <what> (got <value>)"; the command exits 2 (cmd_fail).
 *
 * Values: opt_uint (a decimal integer in a range), opt_count (the same with a unit suffix: 64Ki, 60k, 1M) and
 * opt_split / opt_uint_list (comma lists, where an empty item, as in "8,,16", is refused rather than skipped).
 */
#ifndef KVC_OPTS_H
#define KVC_OPTS_H

#include <stddef.h>
#include <stdint.h>

typedef struct OptSpec {
    const char *name;    /* "--threads", or a short-only option "-q" */
    const char *alias;   /* a second spelling ("-o" for "--out", "--quiet" for "-q"), or NULL */
    int has_value;       /* 1: the option takes a value */
} OptSpec;

/* What opt_next returns besides an index into the spec table. */
enum { OPT_END = -1, OPT_ARG = -2, OPT_HELP = -3, OPT_ERROR = -4 };

typedef struct OptParser {
    const char *cmd;        /* "run": messages start with it */
    int argc;
    char **argv;            /* argv[0] is the command's name */
    const OptSpec *spec;
    int i;                  /* the word read last */
    int args_only;          /* "--" was seen */
    const char *value;      /* the option's value (NULL for a flag), or the argument (OPT_ARG) */
    char where[80];         /* "<cmd>: <option>" of the option read last, for value messages */
} OptParser;

/* Starts reading argv[1..argc) of command cmd with the options of spec (ended by an entry with name NULL). */
void opt_init(OptParser *p, const char *cmd, int argc, char **argv, const OptSpec *spec);

/* The next word: the index in spec of an option (p->value holds its value), OPT_ARG for an argument (p->value
 * holds it), OPT_HELP for -h/--help, OPT_END after the last word, or OPT_ERROR after kvc_fail (an unknown
 * option, a flag given a value, a value missing at the end). */
int opt_next(OptParser *p);

/* 1 when -h or --help stands where an option may, in argv[1..argc) read with spec; nothing is reported. */
int opt_help_asked(int argc, char **argv, const OptSpec *spec);

/* s as a decimal integer in lo..hi. Returns 0, or -1 with kvc_fail("<where>: must be an integer in lo..hi
 * (got \"s\")"); where names the option ("run: --threads", p->where). */
/* The command's one positional argument, the config file: *path = v, or -1 with kvc_fail set when one was given
 * already ("<cmd>: only one config file is accepted"). */
int opt_config_path(const char *cmd, const char *v, const char **path);
int opt_uint(const char *s, const char *where, uint64_t lo, uint64_t hi, uint64_t *out);
int opt_size(const char *s, const char *where, size_t lo, size_t hi, size_t *out);   /* the same, in size_t */

/* A count such as tokens: a decimal integer with an optional unit suffix, k M G T (x 1000, x 1000^2, ...: SI,
 * so "60k" is 60000) or Ki Mi Gi Ti (x 1024, x 1024^2, ...: IEC, so "4Ki" is 4096); the number before the
 * suffix is a whole number and the product must be in lo..hi. No other suffix is read ("4K" is refused: it
 * means 4000 to some and 4096 to others). -1 with kvc_fail("<where>: must be an integer in lo..hi, ...") as
 * opt_uint. */
int opt_count(const char *s, const char *where, uint64_t lo, uint64_t hi, uint64_t *out);

/* The items of the comma list buf, split in place (commas become NULs): items[0..*n) point into buf, at most
 * max of them. An empty list, an empty item ("8,,16", ",8", "8,") or more than max items: -1 with
 * kvc_fail("<where>: ... (got \"<the list>\")"). */
int opt_split(char *buf, const char *where, char **items, size_t max, size_t *n);

/* A comma list of integers in lo..hi (at most max of them): opt_split, then opt_size on each item. */
int opt_uint_list(const char *s, const char *where, size_t lo, size_t hi, size_t *out, size_t max, size_t *n);

/* The name in names[0..n) nearest to word by edit distance, or NULL when none is within max_dist. */
const char *opt_nearest(const char *word, const char *const *names, size_t n, size_t max_dist);

#endif
