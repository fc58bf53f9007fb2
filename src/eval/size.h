/* size: `kvc size`, the lesson's KV-cache size arithmetic.
 *
 * bytes = layers x kv_heads x tokens x batch x (k_rank x k_bits + v_rank x v_bits) / 8, compared with the
 * same cache in FP16 at full rank (2 x head_dim x 16 bits per token per head). Scales and low-rank bases are
 * not counted (kvc run counts them). Prints to stdout; returns 0, or -1 with kvc_fail set on bad arguments.
 */
#ifndef KVC_SIZE_H
#define KVC_SIZE_H

int size_command(int argc, char **argv);   /* argv[0] is "size" */

#endif
