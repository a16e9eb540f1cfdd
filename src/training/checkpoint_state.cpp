#include "training/checkpoint_state.hpp"

#include <cstring>

#include "core/error.hpp"

namespace edgetrain {

CheckpointState::CheckpointState() : checkpoint_(std::make_shared<Checkpoint>()) {}

CheckpointState::CheckpointState(Checkpoint checkpoint)
    : checkpoint_(std::make_shared<Checkpoint>(std::move(checkpoint))) {}

CheckpointState CheckpointState::Load(const std::string& path) { return CheckpointState(LoadCheckpoint(path)); }

CheckpointState CheckpointState::LoadFromBuffer(const void* data, size_t size, const std::string& source) {
  return CheckpointState(LoadCheckpointFromBuffer(data, size, source));
}

void CheckpointState::Save(const CheckpointState& state, const std::string& path, bool include_optimizer_state,
                           bool external_data) {
  SaveCheckpoint(state.checkpoint(), path, include_optimizer_state, external_data);
}

void CheckpointState::AddProperty(const std::string& name, PropertyValue value) {
  ET_CHECK(!name.empty(), ErrorCode::kInvalidArgument, "AddProperty: the property name is empty");
  checkpoint_->properties[name] = std::move(value);
}

PropertyValue CheckpointState::GetProperty(const std::string& name) const {
  auto it = checkpoint_->properties.find(name);
  ET_CHECK(it != checkpoint_->properties.end(), ErrorCode::kInvalidArgument, "checkpoint has no property '", name,
           "'");
  return it->second;
}

bool CheckpointState::HasProperty(const std::string& name) const { return checkpoint_->properties.count(name) != 0; }

std::vector<std::string> CheckpointState::PropertyNames() const {
  std::vector<std::string> names;
  for (const auto& [name, value] : checkpoint_->properties) names.push_back(name);
  return names;
}

std::vector<std::string> CheckpointState::ParameterNames() const {
  std::vector<std::string> names;
  const Checkpoint& c = *checkpoint_;
  if (c.is_nominal) {
    for (const auto& [name, dtype] : c.nominal_trainable) names.push_back(name);
    for (const auto& [name, dtype] : c.nominal_frozen) names.push_back(name);
  } else {
    for (const auto& [name, tensor] : c.trainable) names.push_back(name);
    for (const auto& [name, tensor] : c.frozen) names.push_back(name);
  }
  return names;
}

bool CheckpointState::IsTrainable(const std::string& name) const {
  const Checkpoint& c = *checkpoint_;
  return c.is_nominal ? c.nominal_trainable.count(name) != 0 : c.trainable.count(name) != 0;
}

namespace {

Tensor* FindParameter(Checkpoint& c, const std::string& name, const char* what) {
  ET_CHECK(!c.is_nominal, ErrorCode::kInvalidArgument, what, ": the checkpoint is nominal (parameter '", name,
           "' has no value yet)");
  if (auto it = c.trainable.find(name); it != c.trainable.end()) return &it->second;
  if (auto it = c.frozen.find(name); it != c.frozen.end()) return &it->second;
  Fail(ErrorCode::kInvalidArgument, what, ": checkpoint has no parameter '", name, "'");
}

}  // namespace

Tensor CheckpointState::GetParameter(const std::string& name) const {
  return FindParameter(*checkpoint_, name, "GetParameter")->Clone();
}

void CheckpointState::UpdateParameter(const std::string& name, const Tensor& value) {
  Tensor* target = FindParameter(*checkpoint_, name, "UpdateParameter");
  ET_CHECK(value.dtype() == target->dtype(), ErrorCode::kInvalidArgument, "UpdateParameter: parameter '", name,
           "' is ", DataTypeName(target->dtype()), ", the new value is ", DataTypeName(value.dtype()));
  ET_CHECK(value.shape() == target->shape(), ErrorCode::kInvalidArgument, "UpdateParameter: parameter '", name,
           "' has shape ", ShapeToString(target->shape()), ", the new value has shape ", ShapeToString(value.shape()));
  if (!value.SameData(*target)) std::memcpy(target->raw(), value.raw(), value.nbytes());
  if (checkpoint_->frozen.count(name)) ++checkpoint_->frozen_revision;
}

bool CheckpointState::is_nominal() const { return checkpoint_->is_nominal; }

bool CheckpointState::has_optimizer_state() const { return checkpoint_->optimizer.has_value(); }

}  // namespace edgetrain
