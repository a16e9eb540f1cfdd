// edgetrain's C++ API in one include: artifact generation (offline phase), and CheckpointState,
// TrainingSession, LR schedulers, TrainingAgent and inference Session (on device).
// Apps that need a stable ABI use the C API (edgetrain.h) or its C++ wrapper (edgetrain_capi.hpp).
#pragma once

#include "autodiff/agent_models.hpp"
#include "autodiff/artifacts.hpp"
#include "runtime/session.hpp"
#include "training/checkpoint_state.hpp"
#include "training/lr_scheduler.hpp"
#include "training/training_agent.hpp"
#include "training/training_session.hpp"
