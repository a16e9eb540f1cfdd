// An ODTC checkpoint (versions 1 and 2). The first byte picks the path: even, from memory; odd, a
// file whose external data (`<path>.data`) is the input after a uint32 little-endian split point.
#include <cstring>

#include "fuzz_util.hpp"
#include "training/checkpoint_state.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace edgetrain;
  static fuzz::ScratchFile file(".ckpt"), external(".ckpt.data");
  if (size < 1) return 0;
  const bool with_file = data[0] & 1;
  ++data, --size;
  try {
    CheckpointState state;
    if (!with_file) {
      state = CheckpointState::LoadFromBuffer(data, size, "<fuzz checkpoint>");
    } else {
      if (size < 4) return 0;
      uint32_t split;
      std::memcpy(&split, data, 4);
      data += 4, size -= 4;
      split = static_cast<uint32_t>(std::min<size_t>(split, size));
      const std::string& path = file.Write(data, split);
      external.Write(data + split, size - split);
      state = CheckpointState::Load(path);
    }
    for (const std::string& name : state.ParameterNames())
      if (!state.is_nominal()) state.GetParameter(name);
    for (const std::string& name : state.PropertyNames()) state.GetProperty(name);
  } catch (const Error&) {
  }
  return 0;
}
