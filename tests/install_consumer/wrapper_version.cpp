// Uses the installed device runtime through the header-only C++ wrapper: prints the version and the
// parameters of the checkpoint in argv[1]; a missing checkpoint must be an et::Error naming the file.
#include <cstdio>
#include <string>

#include "edgetrain/edgetrain_capi.hpp"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  et::CheckpointState state = et::CheckpointState::Load(std::string(argv[1]) + "/checkpoint");
  std::printf("edgetrain %s: %zu parameters\n", et_version(), state.ParameterNames().size());
  try {
    et::CheckpointState::Load(std::string(argv[1]) + "/absent");
  } catch (const et::Error& e) {
    if (std::string(e.what()).find("absent") == std::string::npos) return 1;
    std::printf("missing checkpoint: %s\n", e.what());
    return 0;
  }
  return 1;
}
