#include "error.h"

#include <stdarg.h>
#include <stdio.h>

#define DFA__ERROR_CAPACITY 512

static _Thread_local char last_error[DFA__ERROR_CAPACITY];

dfa_status dfa__fail(dfa_status status, const char *fn, const char *fmt, ...) {
    int n = snprintf(last_error, sizeof last_error, "%s: ", fn);
    if (n < 0 || n >= (int)sizeof last_error) n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error + n, sizeof last_error - (size_t)n, fmt, ap);
    va_end(ap);
    return status;
}

void dfa__clear_error(void) { last_error[0] = '\0'; }

const char *dfa_last_error(void) { return last_error; }

const char *dfa_status_string(dfa_status s) {
    switch (s) {
    case DFA_OK: return "DFA_OK";
    case DFA_ERR_INVALID_ARGUMENT: return "DFA_ERR_INVALID_ARGUMENT";
    case DFA_ERR_UNSUPPORTED: return "DFA_ERR_UNSUPPORTED";
    case DFA_ERR_OUT_OF_MEMORY: return "DFA_ERR_OUT_OF_MEMORY";
    case DFA_ERR_BACKEND: return "DFA_ERR_BACKEND";
    case DFA_ERR_INTERNAL: return "DFA_ERR_INTERNAL";
    }
    return "DFA_ERR_UNKNOWN_STATUS";
}
