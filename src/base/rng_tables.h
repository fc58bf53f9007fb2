/* rng_tables.h: the ziggurat tables used by rng.c's standard normal (numpy 1.24.2's ki_double,
 * wi_double, fi_double). Defined in rng_tables.c, which scripts/gen-ziggurat-tables.py generates
 * from a dump of numpy's tables; they are data and cannot be recomputed bit for bit. */
#ifndef KVC_RNG_TABLES_H
#define KVC_RNG_TABLES_H
#include <stdint.h>

extern const uint64_t rng_ki_double[256]; /* fast-path bounds on the 52-bit magnitude */
extern const double   rng_wi_double[256]; /* strip width / 2^52 */
extern const double   rng_fi_double[256]; /* exp(-x_i^2 / 2) */

#endif
