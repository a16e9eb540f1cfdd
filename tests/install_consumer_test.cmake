# Installs the built project into WORK/prefix, builds tests/install_consumer against it with
# find_package(edgetrain), and runs both programs on the C-ABI artifacts.
# cmake -DBUILD=<build dir> -DSOURCE=<project> -DARTIFACTS=... -DDATA=... -DWORK=... -DGENERATOR=... -P this file
cmake_minimum_required(VERSION 3.22)
file(REMOVE_RECURSE "${WORK}")

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(JOIN " " command ${ARGN})
  message(STATUS "${command} -> ${rc}\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${command} exited with ${rc}")
  endif()
  set(OUT "${out}" PARENT_SCOPE)
endfunction()

run("${CMAKE_COMMAND}" --install "${BUILD}" --prefix "${WORK}/prefix")
foreach(internal edgetrain.hpp)
  if(EXISTS "${WORK}/prefix/include/edgetrain/${internal}")
    message(FATAL_ERROR "${internal} (internal types) was installed")
  endif()
endforeach()
run("${CMAKE_COMMAND}" -S "${SOURCE}/tests/install_consumer" -B "${WORK}/consumer" -G "${GENERATOR}"
    -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${WORK}/prefix"
    "-DEDGETRAIN_EXAMPLE_SOURCE=${SOURCE}/examples/c/fashion_mnist.c")
run("${CMAKE_COMMAND}" --build "${WORK}/consumer")
run("${WORK}/consumer/wrapper_version" "${ARTIFACTS}")
if(NOT OUT MATCHES "parameters\nmissing checkpoint: .*absent")
  message(FATAL_ERROR "unexpected wrapper_version output:\n${OUT}")
endif()
run("${WORK}/consumer/fashion_mnist" "${ARTIFACTS}" "${DATA}" "${WORK}/out" --epochs 1 --limit 512)
if(NOT OUT MATCHES "test accuracy [0-9.]+% \\([0-9]+/512\\)")
  message(FATAL_ERROR "the installed-package build of the C example printed no test accuracy:\n${OUT}")
endif()
