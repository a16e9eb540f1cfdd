// A model in ONNX Runtime's flatbuffer format (.ort): import and session creation.
#include "fuzz_util.hpp"
#include "onnx/ort_format.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace edgetrain;
  try {
    Session session(LoadOrtFormatModel(data, size, "<fuzz .ort>", ExecutionImportOptions()));
    fuzz::RunOnZeroInputs(session);
  } catch (const Error&) {
  }
  return 0;
}
