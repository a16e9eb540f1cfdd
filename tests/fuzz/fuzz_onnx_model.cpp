// An ONNX model from the network: import, session creation (folding, fusion, planning), one run on
// zero inputs shaped as declared.
#include "fuzz_util.hpp"
#include "runtime/session.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace edgetrain;
  try {
    Session session(LoadModelFromBuffer(data, size, "<fuzz model>", "/nonexistent", ExecutionImportOptions()));
    std::vector<ValueInfo> infos;
    for (const ValueInfo* in : session.Inputs()) infos.push_back(*in);
    std::vector<Tensor> inputs;
    if (!fuzz::SynthesiseInputs(infos, inputs)) return 0;
    std::map<std::string, Tensor> feeds;
    for (size_t i = 0; i < inputs.size(); ++i) feeds[infos[i].name] = inputs[i];
    session.Run(feeds);
  } catch (const Error&) {
  }
  return 0;
}
