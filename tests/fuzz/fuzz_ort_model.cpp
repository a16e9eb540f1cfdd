// A model in ONNX Runtime's flatbuffer format (.ort): import and session creation.
#include "fuzz_util.hpp"
#include "onnx/ort_format.hpp"
#include "runtime/session.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace edgetrain;
  try {
    Session session(LoadOrtFormatModel(data, size, "<fuzz .ort>", ExecutionImportOptions()));
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
