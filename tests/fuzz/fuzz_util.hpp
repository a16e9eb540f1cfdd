// Shared pieces of the libFuzzer harnesses: inputs synthesised from a model's declarations, and a
// private file for readers that take a path. A harness lets edgetrain::Error through silently
// (a typed refusal is the expected outcome); anything else escapes and is a finding.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/tensor.hpp"
#include "ir/graph.hpp"
#include "runtime/session.hpp"

namespace edgetrain::fuzz {

// Zero-filled tensors for `infos` (unknown dims are 2); nothing when a tensor would be large.
inline bool SynthesiseInputs(const std::vector<ValueInfo>& infos, std::vector<Tensor>& out) {
  constexpr int64_t kMaxElements = 1 << 20;
  for (const ValueInfo& info : infos) {
    if (info.is_sequence || info.dtype == DataType::kUndefined || info.dtype == DataType::kString) return false;
    Shape shape;
    int64_t elements = 1;
    for (const Dim& d : info.shape) {
      const int64_t n = d.known() ? d.value : 2;
      if (n < 0 || n > kMaxElements) return false;
      elements *= std::max<int64_t>(n, 1);
      if (elements > kMaxElements) return false;
      shape.push_back(n);
    }
    Tensor t(info.dtype, shape, info.name);
    if (t.nbytes()) std::memset(t.raw(), 0, t.nbytes());
    out.push_back(std::move(t));
  }
  return true;
}

// One run of `session` on zero inputs shaped as declared (skipped when they cannot be made).
inline void RunOnZeroInputs(Session& session) {
  std::vector<ValueInfo> infos;
  for (const ValueInfo* in : session.Inputs()) infos.push_back(*in);
  std::vector<Tensor> inputs;
  if (!SynthesiseInputs(infos, inputs)) return;
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) feeds[infos[i].name] = inputs[i];
  session.Run(feeds);
}

// A file of this process that a harness rewrites for each input (readers that take a path).
class ScratchFile {
 public:
  explicit ScratchFile(const char* suffix) {
    const char* dir = getenv("TMPDIR");
    path_ = std::string(dir && *dir ? dir : "/tmp") + "/edgetrain-fuzz-" + std::to_string(getpid()) + suffix;
  }
  ~ScratchFile() { std::remove(path_.c_str()); }
  const std::string& Write(const uint8_t* data, size_t size) {
    FILE* f = std::fopen(path_.c_str(), "wb");
    if (!f) std::abort();
    if (size && std::fwrite(data, 1, size, f) != size) std::abort();
    std::fclose(f);
    return path_;
  }

 private:
  std::string path_;
};

}  // namespace edgetrain::fuzz
