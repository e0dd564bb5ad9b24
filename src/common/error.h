/* Internal: thread-local error message behind dfa_last_error(). */
#ifndef DFA_COMMON_ERROR_H
#define DFA_COMMON_ERROR_H

#include "distflash.h"

#if defined(__GNUC__)
#define DFA__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DFA__PRINTF(a, b)
#endif

/* Records "fn: message" as the calling thread's last error and returns status. */
dfa_status dfa__fail(dfa_status status, const char *fn, const char *fmt, ...) DFA__PRINTF(3, 4);

/* Clears the calling thread's last error (each entry point starts with this). */
void dfa__clear_error(void);

#endif
