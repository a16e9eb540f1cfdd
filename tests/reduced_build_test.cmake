# Operator reduction (README, Reduced builds): `edgetrain reduce-ops` and a build with -DEDGETRAIN_OPS_CONFIG.
# cmake -DMODE=config|build|malformed -DCLI=... -DSOURCE=... -DWORK=... [build: -DDATA=... -DFULL_APP=... -DREDUCED_BUILD=...
#       -DGENERATOR=... -DBUILD_TYPE=... -DLAUNCHER=... -DCXX=... -DCC=... -DDNNL=...] -P this file
#   config:    reduce-ops lists the MLP artifacts' operators (and the fused ones a session puts in) with the header;
#              a missing model and an empty directory are errors naming them.
#   build:     a build reduced to the MLP's config trains the MLP artifacts through the C example, links no kernel
#              the config leaves out, refuses LeNet-BN's artifacts naming Conv and the config, and the MLP's artifacts
#              in float64 (an element type the config lacks) naming the type, the operator and the config.
#   malformed: a bad config line fails the configure step naming the file and line.
cmake_minimum_required(VERSION 3.22)

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

# Runs ARGN; fails unless it exits with `expected_rc` ("nonzero": anything but 0). Sets <prefix>_OUT, <prefix>_ERR.
function(run prefix expected_rc)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(JOIN " " command ${ARGN})
  string(LENGTH "${out}" out_length)
  if(out_length GREATER 4000)
    string(SUBSTRING "${out}" 0 4000 shown)
  else()
    set(shown "${out}")
  endif()
  message(STATUS "${command} -> ${rc}\n${shown}${err}")
  if((expected_rc STREQUAL "nonzero" AND rc STREQUAL "0") OR (NOT expected_rc STREQUAL "nonzero" AND
                                                               NOT rc STREQUAL "${expected_rc}"))
    message(FATAL_ERROR "${command} exited with ${rc}, expected ${expected_rc}")
  endif()
  set(${prefix}_OUT "${out}" PARENT_SCOPE)
  set(${prefix}_ERR "${err}" PARENT_SCOPE)
endfunction()

# CMake wraps the lines of its error messages: whitespace runs compare as one space.
function(expect_contains text needle)
  string(REGEX REPLACE "[ \n]+" " " text "${text}")
  string(REGEX REPLACE "[ \n]+" " " needle "${needle}")
  string(FIND "${text}" "${needle}" position)
  if(position EQUAL -1)
    message(FATAL_ERROR "expected '${needle}' in:\n${text}")
  endif()
endfunction()

function(expect_line text regex)
  string(REPLACE "\n" ";" lines "${text}")
  foreach(line IN LISTS lines)
    if(line MATCHES "^${regex}$")
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "expected a line matching '${regex}' in:\n${text}")
endfunction()

function(generate name model)
  run(GEN 0 "${CLI}" generate-artifacts "${SOURCE}/models/${model}" -o "${WORK}/${name}" --additional-output output)
endfunction()

if(MODE STREQUAL "config")
  generate(mlp mlp.onnx)
  run(OPS 0 "${CLI}" reduce-ops "${WORK}/mlp")
  expect_contains("${OPS_OUT}" "# edgetrain operator config, written by `edgetrain reduce-ops`")
  expect_contains("${OPS_OUT}" "# Models: ${WORK}/mlp/eval_model.onnx ${WORK}/mlp/optimizer_model.onnx")
  # The training graph's forward and backward, the loss, the optimizer, and FusedGemm, which only the eval
  # session's fusion pass puts in (Relu(Gemm) in the exported forward).
  expect_line("${OPS_OUT}" "ai.onnx Gemm [0-9]+ float32")
  expect_line("${OPS_OUT}" "ai.onnx Relu [0-9]+ float32")
  expect_line("${OPS_OUT}" "ai.onnx SoftmaxCrossEntropyLoss [0-9]+ float32,int64")
  expect_line("${OPS_OUT}" "ai.edgetrain AdamWUpdate 1 [a-z0-9,]*float32[a-z0-9,]*")
  expect_line("${OPS_OUT}" "com.microsoft FusedGemm 1 float32")
  string(FIND "${OPS_OUT}" " Conv " conv)
  if(NOT conv EQUAL -1)
    message(FATAL_ERROR "the MLP needs no Conv:\n${OPS_OUT}")
  endif()
  # A training agent's backward model, built at run time, needs gradient operators of its own.
  run(AGENT 0 "${CLI}" reduce-ops "${SOURCE}/models/mlp.onnx" --agent "${SOURCE}/models/mlp.onnx")
  expect_contains("${AGENT_OUT}" "# Models: ${SOURCE}/models/mlp.onnx ${SOURCE}/models/mlp.onnx (training agent)")
  expect_line("${AGENT_OUT}" "ai.edgetrain SumToShape 1 [a-z0-9,-]+")
  string(FIND "${OPS_OUT}" "SumToShape" sum_to_shape)
  if(NOT sum_to_shape EQUAL -1)
    message(FATAL_ERROR "the MLP's artifacts alone need no SumToShape:\n${OPS_OUT}")
  endif()
  run(MISSING nonzero "${CLI}" reduce-ops "${WORK}/no_such_model.onnx")
  expect_contains("${MISSING_ERR}" "no_such_model.onnx")
  file(MAKE_DIRECTORY "${WORK}/empty")
  run(EMPTY nonzero "${CLI}" reduce-ops "${WORK}/empty")
  expect_contains("${EMPTY_ERR}" "directory '${WORK}/empty' holds no .onnx or .ort model")

elseif(MODE STREQUAL "build")
  generate(mlp mlp.onnx)
  generate(lenet lenet_bn.onnx)
  # The C example ends by training its exported model with a training agent: the config covers that model too.
  run(FULL 0 "${FULL_APP}" "${WORK}/mlp" "${DATA}" "${WORK}/full_out" --epochs 1 --limit 64)
  run(OPS 0 "${CLI}" reduce-ops "${WORK}/mlp" --agent "${WORK}/full_out/model.onnx")
  file(WRITE "${WORK}/mlp.config" "${OPS_OUT}")
  # The parent build's compiler, flags and launcher, and a build directory as deep as the parent's, so that the
  # sources outside src/ops come from the compiler cache.
  file(REMOVE_RECURSE "${REDUCED_BUILD}")
  run(CONFIGURE 0 "${CMAKE_COMMAND}" -S "${SOURCE}" -B "${REDUCED_BUILD}" -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=${BUILD_TYPE}
      "-DCMAKE_CXX_COMPILER=${CXX}" "-DCMAKE_C_COMPILER=${CC}" "-DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER}"
      "-DCMAKE_C_COMPILER_LAUNCHER=${LAUNCHER}" -DEDGETRAIN_WITH_DNNL=${DNNL} -DEDGETRAIN_BUILD_TESTS=OFF
      -DEDGETRAIN_BUILD_BENCH=OFF -DEDGETRAIN_BUILD_PYTHON=OFF "-DEDGETRAIN_OPS_CONFIG=${WORK}/mlp.config")
  expect_contains("${CONFIGURE_OUT}" "Operator-reduced build: ")
  run(BUILD 0 "${CMAKE_COMMAND}" --build "${REDUCED_BUILD}" --target fashion_mnist -j 2)
  set(app "${REDUCED_BUILD}/examples/fashion_mnist")

  run(TRAIN 0 "${app}" "${WORK}/mlp" "${DATA}" "${WORK}/out" --epochs 1 --limit 6000)
  if(NOT TRAIN_OUT MATCHES "epoch 1: [^\n]*test accuracy [0-9.]+% \\(([0-9]+)/([0-9]+)\\)")
    message(FATAL_ERROR "no eval accuracy after epoch 1")
  endif()
  if(CMAKE_MATCH_1 LESS 3600)  # 60% after one epoch on 6000 samples (a full build reaches about 75%)
    message(FATAL_ERROR "test accuracy ${CMAKE_MATCH_1}/${CMAKE_MATCH_2} of the reduced build is below 60%")
  endif()
  expect_contains("${TRAIN_OUT}" "exported ${WORK}/out/model.onnx")

  # Kernels the config leaves out are not in the program (symbols of the unstripped Release binary).
  run(NM_FULL 0 nm -C "${FULL_APP}")
  run(NM_REDUCED 0 nm -C "${app}")
  foreach(kernel ConvTransposeKernel BatchNormalizationKernel LayerNormalizationBackward MaxPoolKernel GemmKernel)
    expect_contains("${NM_FULL_OUT}" "${kernel}")
  endforeach()
  foreach(kernel ConvTransposeKernel BatchNormalizationKernel LayerNormalizationBackward MaxPoolKernel)
    string(FIND "${NM_REDUCED_OUT}" "${kernel}" found)
    if(NOT found EQUAL -1)
      message(FATAL_ERROR "the MLP-reduced build links ${kernel}, which its config leaves out")
    endif()
  endforeach()
  expect_contains("${NM_REDUCED_OUT}" "GemmKernel")
  # Kernels are compiled only for the element types the config lists (no float64 here) plus float32.
  expect_contains("${CONFIGURE_OUT}" "; element types: float32 ")
  expect_contains("${NM_FULL_OUT}" "SoftmaxAlongAxis<double>")
  string(FIND "${NM_REDUCED_OUT}" "SoftmaxAlongAxis<double>" found)
  if(NOT found EQUAL -1)
    message(FATAL_ERROR "the MLP-reduced build has float64 kernels, which its config does not list")
  endif()
  expect_contains("${NM_REDUCED_OUT}" "SoftmaxAlongAxis<float>")

  run(LENET nonzero "${app}" "${WORK}/lenet" "${DATA}" "${WORK}/lenet_out" --epochs 1 --limit 64)
  expect_contains("${LENET_ERR}" "operators left out of this operator-reduced build (${WORK}/mlp.config does not list")
  expect_contains("${LENET_ERR}" "(ai.onnx, Conv, ")
  expect_contains("${LENET_ERR}" "training_model.onnx")

  # The MLP in float64: operators the config lists, an element type it does not; refused at session creation.
  run(F64 0 /usr/bin/python3 -c [[
import sys, onnx
from onnx import numpy_helper
m = onnx.load(sys.argv[1])
for i, t in enumerate(m.graph.initializer):
    m.graph.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype("float64"), t.name))
for v in list(m.graph.input) + list(m.graph.output):
    v.type.tensor_type.elem_type = onnx.TensorProto.DOUBLE
onnx.save(m, sys.argv[2])
]] "${SOURCE}/models/mlp.onnx" "${WORK}/mlp64.onnx")
  run(GEN 0 "${CLI}" generate-artifacts "${WORK}/mlp64.onnx" -o "${WORK}/mlp64" --additional-output output)
  run(MLP64 nonzero "${app}" "${WORK}/mlp64" "${DATA}" "${WORK}/mlp64_out" --epochs 1 --limit 64)
  expect_contains("${MLP64_ERR}" "et_training_session_create failed (code 3): ${WORK}/mlp64/training_model.onnx: element \
type float64 of node '/net/net.0/Flatten' (ai.onnx, Flatten, 17) is left out of this operator-reduced build \
(${WORK}/mlp.config lists it for no operator; `edgetrain reduce-ops MODEL...` lists what models need)")

elseif(MODE STREQUAL "malformed")
  # Each config has one bad line (the third); the configure step stops there, naming the file and line.
  set(good "# a comment\nai.onnx Gemm 17 float32  # a trailing comment\n")
  set(cases
      "ai.onnx Gemm thirteen float32|bad_opset.config:3: opset 'thirteen' of Gemm is not a number from 1 to 999"
      "ai.onnx Relu 14 float32,complex64|bad_type.config:3: 'complex64' is not an element type"
      "ai.onnx Relu 14|short.config:3: expected `DOMAIN OP OPSET TYPES` (4 fields), got 3: 'ai.onnx Relu 14'"
      "ai..onnx Relu 14 float32|bad_domain.config:3: 'ai..onnx' is not an operator domain")
  foreach(case IN LISTS cases)
    string(REPLACE "|" ";" parts "${case}")
    list(GET parts 0 line)
    list(GET parts 1 message)
    string(REGEX REPLACE ":.*" "" file "${message}")
    file(WRITE "${WORK}/${file}" "${good}${line}\n")
    run(CONFIGURE nonzero "${CMAKE_COMMAND}" -S "${SOURCE}" -B "${WORK}/build_${file}" -G Ninja
        -DEDGETRAIN_BUILD_TESTS=OFF -DEDGETRAIN_BUILD_PYTHON=OFF "-DEDGETRAIN_OPS_CONFIG=${WORK}/${file}")
    expect_contains("${CONFIGURE_ERR}" "${WORK}/${message}")
  endforeach()
  file(WRITE "${WORK}/empty.config" "# no operator\n\n")
  run(EMPTY nonzero "${CMAKE_COMMAND}" -S "${SOURCE}" -B "${WORK}/build_empty" -G Ninja -DEDGETRAIN_BUILD_TESTS=OFF
      -DEDGETRAIN_BUILD_PYTHON=OFF "-DEDGETRAIN_OPS_CONFIG=${WORK}/empty.config")
  expect_contains("${EMPTY_ERR}" "${WORK}/empty.config: lists no operator")
  run(MISSING nonzero "${CMAKE_COMMAND}" -S "${SOURCE}" -B "${WORK}/build_missing" -G Ninja -DEDGETRAIN_BUILD_TESTS=OFF
      -DEDGETRAIN_BUILD_PYTHON=OFF "-DEDGETRAIN_OPS_CONFIG=${WORK}/missing.config")
  expect_contains("${MISSING_ERR}" "${WORK}/missing.config: no such file")
else()
  message(FATAL_ERROR "MODE must be config, build or malformed")
endif()
