/* tokens: the token input of data.source "model" -- token ids from an .npy file (int32 or int64, shape (n,) or
 * (1, n), little- or big-endian, C order), or the bytes of a text file (byte-level models: id = byte value).
 * The header reader (tokens_info) reads no ids, so a config can be checked without reading the input.
 *
 * Failure: -1 with kvc_fail("<file>: <what> (got <value>)"): a file that cannot be opened, an .npy that is not
 * one (magic, version, header), a dtype other than int32/int64 (named), a shape other than (n,) or (B, n), a
 * file shorter than its header says, an empty input (n = 0), and, when ids are read, one outside 0..vocab-1
 * (named with its index).
 */
#ifndef KVC_TOKENS_H
#define KVC_TOKENS_H

#include <stddef.h>
#include <stdint.h>

typedef enum { TOKENS_NPY, TOKENS_TEXT } TokensKind;

/* *rows = B (1 for (n,) and for a text), *n = tokens per sequence (npy: from its header; text: its size in
 * bytes). 0 or -1. */
int tokens_info(size_t *rows, size_t *n, const char *path, TokensKind kind);
/* Reads the first `count` tokens of sequence `row` (count <= n, row < B of tokens_info) into out, checking
 * each against vocab. */
int tokens_read(int32_t *out, size_t count, size_t row, const char *path, TokensKind kind, size_t vocab);

#endif
