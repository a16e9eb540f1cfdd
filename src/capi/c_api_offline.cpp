// The C ABI functions that need the offline library: a training agent's backward model comes from
// the reverse walk over its inference model.
#include "autodiff/agent_models.hpp"
#include "capi/c_api_internal.hpp"

using namespace edgetrain::capi;

extern "C" {

et_error* et_training_agent_create(const char* model_path, const char* const* trainable_names, size_t trainable_count,
                                   const et_session_options* options, et_training_agent** out_agent) {
  return ET_GUARD({
    et_training_agent** out = ET_REQUIRE(out_agent);
    std::string path = ET_REQUIRE_STRING(model_path);
    std::vector<std::string> trainable = FromStrings(trainable_names, trainable_count, function, "trainable_names");
    edgetrain::TrainingSessionOptions training_options = ToTrainingOptions(options);
    ET_CHECK(!training_options.memory_budget_bytes, edgetrain::ErrorCode::kInvalidArgument, function, ": '", path,
             "': memory_budget_bytes applies to training sessions; a training agent has no budget planner");
    edgetrain::SessionOptions session_options;
    session_options.num_threads = training_options.num_threads;
    session_options.seed = training_options.seed;
    session_options.memory_limit_bytes = training_options.memory_limit_bytes;
    *out = new et_training_agent{edgetrain::LoadTrainingAgent(path, std::move(trainable), session_options), {}};
  });
}

}  // extern "C"
