#include "training/lr_scheduler.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.hpp"

namespace edgetrain {

LRScheduler LRScheduler::Linear(int64_t warmup_steps, int64_t total_steps, float initial_lr) {
  ET_CHECK(warmup_steps >= 0 && total_steps >= 0, ErrorCode::kInvalidArgument,
           "linear LR scheduler: warmup_steps and total_steps must be >= 0 (got ", warmup_steps, ", ", total_steps,
           ")");
  LRScheduler s;
  s.kind = Kind::kLinear;
  s.warmup_steps = warmup_steps;
  s.total_steps = total_steps;
  s.initial_lr = initial_lr;
  return s;
}

LRScheduler LRScheduler::Cosine(int64_t warmup_steps, int64_t total_steps, float initial_lr, float min_lr) {
  ET_CHECK(warmup_steps >= 0 && total_steps >= 0, ErrorCode::kInvalidArgument,
           "cosine LR scheduler: warmup_steps and total_steps must be >= 0 (got ", warmup_steps, ", ", total_steps,
           ")");
  LRScheduler s = Linear(warmup_steps, total_steps, initial_lr);
  s.kind = Kind::kCosine;
  s.min_lr = min_lr;
  return s;
}

LRScheduler LRScheduler::Step(int64_t step_size, float gamma, float initial_lr) {
  ET_CHECK(step_size > 0, ErrorCode::kInvalidArgument, "step LR scheduler: step_size must be > 0 (got ", step_size,
           ")");
  LRScheduler s;
  s.kind = Kind::kStep;
  s.step_size = step_size;
  s.gamma = gamma;
  s.initial_lr = initial_lr;
  return s;
}

float LRScheduler::LearningRate(int64_t step) const {
  const double warmup = static_cast<double>(std::max<int64_t>(1, warmup_steps));
  switch (kind) {
    case Kind::kLinear: {  // in float, as ORT computes it
      const float warmup_f = static_cast<float>(std::max<int64_t>(1, warmup_steps));
      if (step < warmup_steps) return initial_lr * (static_cast<float>(step) / warmup_f);
      const float decay = static_cast<float>(std::max<int64_t>(1, total_steps - warmup_steps));
      return initial_lr * std::max(0.0f, static_cast<float>(total_steps - step) / decay);
    }
    case Kind::kCosine: {
      if (step < warmup_steps) return static_cast<float>(initial_lr * (static_cast<double>(step) / warmup));
      const double decay = static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
      const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / decay);
      return static_cast<float>(min_lr + (initial_lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress)));
    }
    case Kind::kStep:
      return static_cast<float>(initial_lr * std::pow(static_cast<double>(gamma), static_cast<double>(step / step_size)));
  }
  return initial_lr;
}

}  // namespace edgetrain
