// The C ABI functions of the offline library, in a device-only build: a typed error naming what is missing.
#include "capi/c_api_internal.hpp"

using namespace edgetrain::capi;

extern "C" {

et_error* et_training_agent_create(const char* model_path, const char* const*, size_t, const et_session_options*,
                                   et_training_agent** out_agent) {
  return ET_GUARD({
    ET_REQUIRE(out_agent);
    edgetrain::Fail(edgetrain::ErrorCode::kNotImplemented, function, ": '", ET_REQUIRE_STRING(model_path),
                    "': a training agent's backward model is built by the offline library (autodiff), which this "
                    "device-only build (EDGETRAIN_DEVICE_ONLY) leaves out");
  });
}

// No agent exists here (create always fails), so the rest only check their arguments and name what is missing.
namespace {
[[noreturn]] void NoAgents(const char* function) {
  edgetrain::Fail(edgetrain::ErrorCode::kNotImplemented, function,
                  ": this device-only build (EDGETRAIN_DEVICE_ONLY) has no training agents");
}
}  // namespace

void et_training_agent_free(et_training_agent*) {}

et_error* et_training_agent_input_count(const et_training_agent* agent, size_t*) {
  return ET_GUARD(ET_REQUIRE(agent); NoAgents(function));
}

et_error* et_training_agent_input_name(const et_training_agent* agent, size_t, const char**) {
  return ET_GUARD(ET_REQUIRE(agent); NoAgents(function));
}

et_error* et_training_agent_output_count(const et_training_agent* agent, size_t*) {
  return ET_GUARD(ET_REQUIRE(agent); NoAgents(function));
}

et_error* et_training_agent_output_name(const et_training_agent* agent, size_t, const char**) {
  return ET_GUARD(ET_REQUIRE(agent); NoAgents(function));
}

et_error* et_training_agent_forward(et_training_agent* agent, const et_tensor_view*, size_t, et_values**, int64_t*) {
  return ET_GUARD(ET_REQUIRE(agent); NoAgents(function));
}

et_error* et_training_agent_backward(et_training_agent* agent, int64_t, const et_tensor_view*, size_t, et_values**,
                                     et_values**) {
  return ET_GUARD(ET_REQUIRE(agent); NoAgents(function));
}

et_error* et_training_agent_release(et_training_agent* agent, int64_t) {
  return ET_GUARD(ET_REQUIRE(agent); NoAgents(function));
}

}  // extern "C"
