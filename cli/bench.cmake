# distflash-bench: the developer subcommands of the distflash CLI, which reach into the
# library's internals or the benchmark plumbing: bench (CPU and CUDA, against the naive
# path and the FMA peak), demo (the attention demo), simulate (schedules and makespans)
# and dist-bench (distributed timings under mpirun). Built beside build/tools/distflash,
# which hands these subcommands to it; not installed.
file(GLOB DFA_BENCH_CLI_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.c)
add_executable(distflash_bench ${DFA_BENCH_CLI_SOURCES})
set_target_properties(distflash_bench PROPERTIES OUTPUT_NAME distflash-bench
                      RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tools)
target_link_libraries(distflash_bench PRIVATE dfa_support)
target_include_directories(distflash_bench PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
if(DFA_HAVE_MPI)
  target_link_libraries(distflash_bench PRIVATE MPI::MPI_C)
endif()
if(DFA_HAVE_CUDA)
  target_link_libraries(distflash_bench PRIVATE CUDA::cudart)
endif()

# The CUDA bench's command line refuses what its options do not mean, before it looks for a
# device (so these run on machines without a GPU, and in builds without CUDA, which say so).
if(DFA_BUILD_TESTS)
  foreach(bad "blocks;square,diagonal" "kv-ratio;0" "kv-ratio;3,x")
    list(GET bad 0 opt)
    list(GET bad 1 val)
    string(MAKE_C_IDENTIFIER "cli_bench_cuda_${opt}_${val}" name)
    add_test(NAME ${name} COMMAND distflash_bench bench --device cuda --${opt} ${val})
    set_tests_properties(${name} PROPERTIES LABELS cpu TIMEOUT 60
                         PASS_REGULAR_EXPRESSION "(usage: distflash bench --device cuda|no CUDA support)")
  endforeach()
  # the masked plan of 4 and 8 ranks at 128k tokens (documents, and documents with a window),
  # printed and checked by the simulator (a refused plan fails the command)
  foreach(args "--ranks;4" "--ranks;8;--window;8192" "--ranks;8;--no-split")
    string(MAKE_C_IDENTIFIER "cli_plan_${args}" name)
    add_test(NAME ${name} COMMAND distflash_bench plan ${args})
    set_tests_properties(${name} PROPERTIES LABELS cpu TIMEOUT 120 PASS_REGULAR_EXPRESSION "checked by the simulator")
  endforeach()
  add_test(NAME cli_plan_no_mask COMMAND distflash_bench plan --docs 0)
  set_tests_properties(cli_plan_no_mask PROPERTIES LABELS cpu TIMEOUT 60 PASS_REGULAR_EXPRESSION "usage: distflash plan")
  # rank-sim (one GPU) refuses what it cannot simulate before it looks for a device
  foreach(bad "ranks;0" "same-docs;--docs;0" "head-dim;96")
    string(MAKE_C_IDENTIFIER "cli_rank_sim_${bad}" name)
    list(GET bad 0 opt)
    list(REMOVE_AT bad 0)
    add_test(NAME ${name} COMMAND distflash_bench rank-sim --${opt} ${bad})
    set_tests_properties(${name} PROPERTIES LABELS cpu TIMEOUT 60
                         PASS_REGULAR_EXPRESSION "(usage: distflash rank-sim|no CUDA support)")
  endforeach()
endif()
