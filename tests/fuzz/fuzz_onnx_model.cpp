// An ONNX model from the network: import, session creation (folding, fusion, planning), one run on
// zero inputs shaped as declared.
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace edgetrain;
  try {
    Session session(LoadModelFromBuffer(data, size, "<fuzz model>", "/nonexistent", ExecutionImportOptions()));
    fuzz::RunOnZeroInputs(session);
  } catch (const Error&) {
  }
  return 0;
}
