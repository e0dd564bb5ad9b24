/* The values the benchmark drivers and labs take on their command lines, parsed in one
 * place: sizes with a k suffix, comma-separated lists of them ("1k,4k,16k"), and storage
 * type names. Each parser accepts the whole string or nothing, and never writes its output
 * when it refuses. */
#ifndef DFA_HARNESS_CLI_VALUES_H
#define DFA_HARNESS_CLI_VALUES_H

#include "distflash.h"

/* A whole decimal integer, optionally followed by k or K (x 1024: "4k" is 4096), within
   [min, max]. Returns 0 and sets *out, or -1. */
int cli_size(const char *s, long min, long max, int *out);

/* A comma-separated list of such integers, at least one and at most max_items, each in
   [min, max] ("1k,4k,16k"; no empty items). Returns the count and fills out, or -1. */
int cli_size_list(const char *s, long min, long max, int *out, int max_items);

/* A storage type by name: f32, bf16 or f16. Returns 0 and sets *out, or -1. */
int cli_dtype(const char *s, dfa_dtype *out);

/* A comma-separated list of storage types ("f32,bf16"): the count, or -1 as cli_size_list. */
int cli_dtype_list(const char *s, dfa_dtype *out, int max_items);

/* "f32", "bf16", "f16", or "?" for anything else. */
const char *cli_dtype_name(dfa_dtype t);

#endif
