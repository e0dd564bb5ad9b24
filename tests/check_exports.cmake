# The shared library exports exactly its public API (ctest test_exports, label cpu).
#
#   cmake -DNM=<nm> -DLIB=<libdistflash.so> -DINCLUDE_DIR=<include/> \
#         -DBUILT_HEADERS=<h1,h2,...> -P check_exports.cmake
#
# Lists the dynamic symbols LIB defines (nm -D --defined-only) and fails, naming them,
#  1. on any symbol that is not a function declared in a public header (include/*.h,
#     whether or not its backend is built here), and
#  2. on any function declared in one of BUILT_HEADERS (the headers of the backends this
#     build compiled: distflash.h always, distflash_cuda.h, distflash_mpi.h, ...) that
#     LIB does not export (a declaration without DFA_API, under hidden visibility).
# A "function declared in a header" is an identifier dfa_* followed by "(" once comments
# and preprocessor lines are removed (public functions are named dfa_*; types and macros
# are not followed by a parenthesis outside comments).
# Ignored: what the linker defines in every shared object (_init, _fini, _edata, _end,
# __bss_start and their relatives). The sanitizer build was checked by hand: ASan/UBSan
# add no defined dynamic symbols to the library (their runtime is a separate shared
# object), so nothing is ignored for them; should a toolchain add some, list them below.
cmake_minimum_required(VERSION 3.20)

foreach(var NM LIB INCLUDE_DIR BUILT_HEADERS)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "check_exports.cmake: -D${var}=... is required")
  endif()
endforeach()

set(linker_symbols _init _fini _edata _end __bss_start __bss_start__ __bss_end__ _bss_end__ __end__
    _etext etext edata end __data_start data_start __dso_handle _DYNAMIC _GLOBAL_OFFSET_TABLE_
    __TMC_END__ _IO_stdin_used)

# The dfa_* functions a header declares, in ${out}.
function(header_functions header out)
  file(READ "${header}" text)
  # block comments, removed one by one (a regular expression would have to be non-greedy)
  set(clean "")
  while(TRUE)
    string(FIND "${text}" "/*" open)
    if(open EQUAL -1)
      string(APPEND clean "${text}")
      break()
    endif()
    string(SUBSTRING "${text}" 0 ${open} before)
    string(APPEND clean "${before} ")
    math(EXPR after "${open} + 2")
    string(SUBSTRING "${text}" ${after} -1 text)
    string(FIND "${text}" "*/" close)
    if(close EQUAL -1)
      message(FATAL_ERROR "${header}: unterminated comment")
    endif()
    math(EXPR after "${close} + 2")
    string(SUBSTRING "${text}" ${after} -1 text)
  endwhile()
  string(REGEX REPLACE "//[^\n]*" "" clean "${clean}")
  string(REGEX REPLACE "(^|\n)[ \t]*#[^\n]*" "\\1" clean "${clean}")
  string(REGEX MATCHALL "dfa_[A-Za-z0-9_]*[ \t\r\n]*\\(" calls "${clean}")
  set(names "")
  foreach(c IN LISTS calls)
    string(REGEX REPLACE "[ \t\r\n]*\\($" "" c "${c}")
    list(APPEND names "${c}")
  endforeach()
  list(REMOVE_DUPLICATES names)
  set(${out} "${names}" PARENT_SCOPE)
endfunction()

file(GLOB all_headers "${INCLUDE_DIR}/*.h")
set(allowed "")
foreach(h IN LISTS all_headers)
  header_functions("${h}" names)
  list(APPEND allowed ${names})
endforeach()
string(REPLACE "," ";" built "${BUILT_HEADERS}")
set(required "")
foreach(h IN LISTS built)
  header_functions("${h}" names)
  if(NOT names)
    message(FATAL_ERROR "${h} declares no dfa_* function: is the parser broken?")
  endif()
  list(APPEND required ${names})
endforeach()

execute_process(COMMAND "${NM}" -D --defined-only "${LIB}"
                OUTPUT_VARIABLE listing ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} -D --defined-only ${LIB} failed (${rc}): ${err}")
endif()
string(REPLACE "\n" ";" lines "${listing}")
set(exported "")
set(extra "")
foreach(line IN LISTS lines)
  # "<address> <type> <name>[@version]"; the name is the last field
  if(NOT line MATCHES "([^ \t]+)[ \t]*$")
    continue()
  endif()
  string(REGEX REPLACE "@.*$" "" name "${CMAKE_MATCH_1}")
  if(name IN_LIST linker_symbols)
    continue()
  endif()
  list(APPEND exported "${name}")
  if(NOT name IN_LIST allowed)
    list(APPEND extra "${line}")
  endif()
endforeach()
set(missing "")
foreach(name IN LISTS required)
  if(NOT name IN_LIST exported)
    list(APPEND missing "${name}")
  endif()
endforeach()

list(LENGTH exported n_exported)
list(LENGTH required n_required)
set(failed FALSE)
if(extra)
  list(JOIN extra "\n  " text)
  message(SEND_ERROR "${LIB} exports symbols that no public header declares "
                     "(make them static, or internal under hidden visibility):\n  ${text}")
  set(failed TRUE)
endif()
if(missing)
  list(JOIN missing "\n  " text)
  message(SEND_ERROR "${LIB} does not export these functions of its public headers "
                     "(missing DFA_API on the declaration, or not built?):\n  ${text}")
  set(failed TRUE)
endif()
if(failed)
  message(FATAL_ERROR "exported-symbol check failed")
endif()
message(STATUS "${LIB}: exports ${n_exported} symbols, all declared in include/; "
               "all ${n_required} functions of the built headers present")
