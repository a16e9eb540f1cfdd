# Builds tests/ort_compat/ort_c_train.c as an ORT app is built (`cc app.c -I<ort include> -L<dir> -lonnxruntime`)
# against edgetrain's libonnxruntime.so, checks that OrtGetApiBase is its only strong exported symbol, runs the app's
# error-path checks. cmake -DCC=... -DSOURCE=... -DINCLUDE=... -DLIBRARY=... -DARTIFACTS=... -DWORK=... -P this file
cmake_minimum_required(VERSION 3.22)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
get_filename_component(library_dir "${LIBRARY}" DIRECTORY)
get_filename_component(source_dir "${SOURCE}" DIRECTORY)
execute_process(COMMAND "${CC}" -std=c99 -Wall -Wextra -Wpedantic -I "${INCLUDE}" -I "${source_dir}" "${SOURCE}"
                        -o "${WORK}/ort_c_train" -L "${library_dir}" -lonnxruntime -lz "-Wl,-rpath,${library_dir}"
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(rc OR NOT err STREQUAL "")
  message(FATAL_ERROR "compiling and linking against -lonnxruntime failed (${rc}):\n${err}")
endif()

execute_process(COMMAND nm -D --defined-only "${LIBRARY}" OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
string(REGEX MATCHALL " [TDB] [^\n]+" exported "${symbols}")
list(FILTER exported EXCLUDE REGEX " (_init|_fini)$")
if(rc OR NOT exported STREQUAL " T OrtGetApiBase")
  message(FATAL_ERROR "libonnxruntime.so should export OrtGetApiBase alone, exports:${exported}")
endif()

execute_process(COMMAND "${WORK}/ort_c_train" --errors "${ARTIFACTS}" "${WORK}" RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
message(STATUS "${out}${err}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "ok TrainStep with a wrongly shaped input")
  message(FATAL_ERROR "the app linked to libonnxruntime.so failed (${rc})")
endif()
