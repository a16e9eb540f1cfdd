// Learning-rate schedules, as a pure function of the optimizer's step count (so a resumed session
// continues the schedule exactly). The linear schedule is ORT's LinearLRScheduler.
#pragma once

#include <cstdint>

namespace edgetrain {

struct LRScheduler {
  enum class Kind { kLinear, kCosine, kStep };
  Kind kind = Kind::kLinear;
  float initial_lr = 0.0f;
  int64_t warmup_steps = 0;  // linear, cosine: the factor rises from 0 to 1 over these steps
  int64_t total_steps = 0;   // linear: the factor reaches 0 here; cosine: it reaches min_lr here
  float min_lr = 0.0f;       // cosine
  int64_t step_size = 1;     // step: multiply by gamma every step_size steps
  float gamma = 0.1f;

  // ORT: initial_lr * (step < warmup ? step / max(1, warmup) : max(0, (total - step) / max(1, total - warmup))).
  static LRScheduler Linear(int64_t warmup_steps, int64_t total_steps, float initial_lr);
  // Linear warmup, then min_lr + (initial_lr - min_lr) * (1 + cos(pi * progress)) / 2.
  static LRScheduler Cosine(int64_t warmup_steps, int64_t total_steps, float initial_lr, float min_lr = 0.0f);
  // initial_lr * gamma^floor(step / step_size).
  static LRScheduler Step(int64_t step_size, float gamma, float initial_lr);

  float LearningRate(int64_t step) const;
};

}  // namespace edgetrain
