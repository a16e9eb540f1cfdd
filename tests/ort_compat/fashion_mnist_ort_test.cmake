# The ORT-style C++ and C apps (tests/ort_compat) against the native C example on Fashion-MNIST.
# cmake -DNATIVE=... -DCXX_APP=... -DC_APP=... -DARTIFACTS=... -DDATA=... -DWORK=... [-DLIMIT=N] -P this file
# All three train one epoch with the same recipe, so their test accuracies must be equal (and >= 80% on the full
# set); each app also checks that its exported model classifies as its eval model.
cmake_minimum_required(VERSION 3.22)
file(REMOVE_RECURSE "${WORK}")
set(limit_args)
if(LIMIT)
  set(limit_args --limit ${LIMIT})
endif()

# Runs an app into WORK/<name>; sets <name>_CORRECT and <name>_TOTAL from its last epoch's accuracy.
function(run_app name app)
  file(MAKE_DIRECTORY "${WORK}/${name}")
  execute_process(COMMAND "${app}" "${ARTIFACTS}" "${DATA}" "${WORK}/${name}" --epochs 1 ${limit_args}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "${name} -> ${rc}\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name} exited with ${rc}")
  endif()
  if(NOT out MATCHES "epoch 1: [^\n]*test accuracy [0-9.]+% \\(([0-9]+)/([0-9]+)\\)")
    message(FATAL_ERROR "${name} printed no test accuracy")
  endif()
  set(${name}_CORRECT ${CMAKE_MATCH_1} PARENT_SCOPE)
  set(${name}_TOTAL ${CMAKE_MATCH_2} PARENT_SCOPE)
  if(NOT out MATCHES "exported [^\n]*test accuracy [0-9.]+% \\(${CMAKE_MATCH_1}/${CMAKE_MATCH_2}\\)")
    message(FATAL_ERROR "${name}: the exported model's accuracy differs from the eval model's")
  endif()
endfunction()

run_app(native "${NATIVE}")
run_app(cxx "${CXX_APP}")
run_app(c "${C_APP}")
foreach(name cxx c)
  if(NOT ${name}_CORRECT EQUAL native_CORRECT OR NOT ${name}_TOTAL EQUAL native_TOTAL)
    message(FATAL_ERROR "${name}: ${${name}_CORRECT}/${${name}_TOTAL} right, the native example ${native_CORRECT}/${native_TOTAL}")
  endif()
endforeach()
if(NOT LIMIT AND native_CORRECT LESS 8000)
  message(FATAL_ERROR "test accuracy ${native_CORRECT}/${native_TOTAL} is below 80%")
endif()
message(STATUS "native, ORT C++ and ORT C apps: ${native_CORRECT}/${native_TOTAL} right")
