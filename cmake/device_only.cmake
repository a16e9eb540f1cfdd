# The device-only build (-DEDGETRAIN_DEVICE_ONLY=ON), included by CMakeLists.txt after edgetrain_device:
# the C ABI's offline functions as typed errors, the C examples, and the device tests (tests/device_only).

# Code that runs once per model load or checkpoint, and the graph and session code around the kernels (a dispatch
# per node and step), is compiled for size; the kernels (src/ops families) keep -O3.
set_source_files_properties(
  src/onnx/onnx_codec.cpp src/onnx/importer.cpp src/onnx/exporter.cpp src/onnx/tensor_proto.cpp
  src/onnx/ort_format.cpp src/checkpoint/checkpoint.cpp src/training/checkpoint_state.cpp src/core/npy.cpp
  src/core/atomic_file.cpp src/capi/c_api.cpp src/training/ort_layout.cpp src/training/artifact_contract.cpp
  src/training/lr_scheduler.cpp src/ir/passes.cpp src/ir/graph.cpp src/runtime/session.cpp
  src/runtime/arena_plan.cpp src/runtime/memory_budget.cpp
  src/training/training_session.cpp src/training/frozen_prefix.cpp src/ops/registry.cpp src/core/dtype.cpp
  PROPERTIES COMPILE_OPTIONS -Os)
# So are the operator families no training step spends its time in: strings, Det/Unique, optionals, the vision
# operators (NonMaxSuppression, RoiAlign, GridSample) and control flow (whose bodies' kernels keep -O3).
set_source_files_properties(
  src/ops/string_ops.cpp src/ops/linalg_set.cpp src/ops/optional.cpp src/ops/vision.cpp src/ops/control_flow.cpp
  PROPERTIES COMPILE_OPTIONS -Os)
target_sources(edgetrain_device PRIVATE src/capi/c_api_device_only.cpp)
# Programs link with identical code folding where the linker has it (gold): many element-type instances of a
# kernel compile to the same machine code.
if(NOT EMSCRIPTEN)
  include(CheckLinkerFlag)
  check_linker_flag(CXX "-fuse-ld=gold;-Wl,--icf=safe" EDGETRAIN_LINKER_ICF)
  if(EDGETRAIN_LINKER_ICF)
    add_link_options(-fuse-ld=gold -Wl,--icf=safe)
  endif()
endif()
# Leaves out what only the offline library uses: gradient rules and the ONNX bodies of backward and optimizer ops
# (src/ops/kernel.hpp), and training agents (c_api_device_only.cpp).
target_compile_definitions(edgetrain_device PUBLIC EDGETRAIN_DEVICE_ONLY=1)

# What programs link: here the device runtime alone.
add_library(edgetrain INTERFACE)
target_link_libraries(edgetrain INTERFACE edgetrain_device)

if(EDGETRAIN_BUILD_EXAMPLES)
  add_subdirectory(examples)
endif()
if(EDGETRAIN_BUILD_BENCH)  # train steps timed side by side with a full build's (README, Device runtime)
  add_executable(train_step_bench bench/train_step_bench.cpp)
  set_target_properties(train_step_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
  target_compile_definitions(train_step_bench PRIVATE EDGETRAIN_BENCH_DEVICE_ONLY=1)
  target_link_libraries(train_step_bench PRIVATE edgetrain_device)
endif()
if(EDGETRAIN_BUILD_TESTS)
  enable_testing()
  add_subdirectory(tests/device_only)
endif()
