/* One version in one place: the project() version of the top-level CMakeLists.txt (handed in
 * as DFA_TEST_CMAKE_VERSION) is what the headers' macros, dfa_version() and the front of
 * dfa_version_string() say. And the status numbers are the stable ones distflash.h promises. */
#include <stdio.h>
#include <string.h>

#include "testlib.h"

#ifndef DFA_TEST_CMAKE_VERSION
#error "tests/CMakeLists.txt passes the project's version as DFA_TEST_CMAKE_VERSION"
#endif

_Static_assert(DFA_VERSION == DFA_VERSION_MAJOR * 10000 + DFA_VERSION_MINOR * 100 + DFA_VERSION_PATCH,
               "DFA_VERSION is major * 10000 + minor * 100 + patch");
_Static_assert(DFA_VERSION_MINOR < 100 && DFA_VERSION_PATCH < 100, "the numeric version has two digits for each");
_Static_assert(DFA_OK == 0 && DFA_ERR_INVALID_ARGUMENT == 1 && DFA_ERR_UNSUPPORTED == 2 && DFA_ERR_OUT_OF_MEMORY == 3 &&
                   DFA_ERR_BACKEND == 4 && DFA_ERR_INTERNAL == 5,
               "the status numbers are stable (distflash.h)");

int main(void) {
    tl_init("test_version");
    char macros[64];
    snprintf(macros, sizeof macros, "%d.%d.%d", DFA_VERSION_MAJOR, DFA_VERSION_MINOR, DFA_VERSION_PATCH);
    CHECK(!strcmp(macros, DFA_TEST_CMAKE_VERSION), "the headers say %s, CMakeLists.txt %s", macros,
          DFA_TEST_CMAKE_VERSION);
    CHECK(dfa_version() == DFA_VERSION, "dfa_version() is %u, the headers' DFA_VERSION %d", dfa_version(), DFA_VERSION);
    CHECK(dfa_version() == (unsigned)(DFA_VERSION_MAJOR * 10000 + DFA_VERSION_MINOR * 100 + DFA_VERSION_PATCH),
          "dfa_version() is %u", dfa_version());
    const char *s = dfa_version_string();
    const size_t n = strlen(DFA_TEST_CMAKE_VERSION);
    CHECK(s && !strncmp(s, DFA_TEST_CMAKE_VERSION, n) && s[n] == ' ', "dfa_version_string() is \"%s\", not %s first",
          s ? s : "(null)", DFA_TEST_CMAKE_VERSION);
    /* every status has its own name; the next number is unknown */
    const char *names[] = {"DFA_OK", "DFA_ERR_INVALID_ARGUMENT", "DFA_ERR_UNSUPPORTED", "DFA_ERR_OUT_OF_MEMORY",
                           "DFA_ERR_BACKEND", "DFA_ERR_INTERNAL"};
    for (int i = 0; i < 6; i++)
        CHECK(!strcmp(dfa_status_string((dfa_status)i), names[i]), "status %d is %s, not %s", i,
              dfa_status_string((dfa_status)i), names[i]);
    CHECK(!strcmp(dfa_status_string((dfa_status)6), "DFA_ERR_UNKNOWN_STATUS"), "status 6 is %s",
          dfa_status_string((dfa_status)6));
    return tl_finish("test_version");
}
