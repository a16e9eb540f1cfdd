// `edgetrain generate-artifacts` and `edgetrain check-gradients`: the offline phase.
#include <iostream>
#include <memory>

#include "autodiff/artifacts.hpp"
#include "autodiff/gradient_check.hpp"
#include "commands.hpp"

namespace edgetrain::cli {

namespace {

void AddLossOptions(CLI::App* cmd, LossSpec& loss, std::string& loss_name, std::string& reduction,
                    std::string& label_type) {
  cmd->add_option("--loss", loss_name,
                  "mse, cross_entropy, bce_with_logits, l1, huber, smooth_l1, nll, kl_div (default cross_entropy)");
  cmd->add_option("--custom-loss", loss.custom_loss_path,
                  "ONNX loss graph: inputs = model outputs then targets, one scalar output");
  cmd->add_option("--reduction", reduction, "mean or sum")->check(CLI::IsMember({"mean", "sum"}));
  cmd->add_option("--ignore-index", loss.ignore_index, "cross_entropy/nll: label to ignore");
  cmd->add_option("--class-weights", loss.class_weights, "cross_entropy/nll: one weight per class")->delimiter(',');
  cmd->add_option("--pos-weight", loss.pos_weight, "bce_with_logits: weight of positives (per class)")->delimiter(',');
  cmd->add_option("--delta", loss.delta, "huber delta / smooth_l1 beta");
  cmd->add_option("--label-type", label_type, "int64 or int32 labels")->check(CLI::IsMember({"int64", "int32"}));
  cmd->add_flag("--log-target", loss.log_target, "kl_div: targets are log-probabilities");
}

void AddOptimizerOptions(CLI::App* cmd, OptimizerSpec& opt, std::string& name) {
  cmd->add_option("--optimizer", name, "adamw, adam or sgd (default adamw)");
  cmd->add_option("--beta1", opt.beta1, "Adam first-moment decay");
  cmd->add_option("--beta2", opt.beta2, "Adam second-moment decay");
  cmd->add_option("--eps", opt.epsilon, "Adam epsilon");
  cmd->add_option_function<float>(
      "--weight-decay", [&opt](const float& value) { opt.weight_decay = value; },
      "AdamW decoupled decay (default 0.01); Adam/SGD L2 added to the gradient (default 0)");
  cmd->add_flag("--hf-mode", opt.hugging_face_mode, "AdamW in ORT's Hugging Face mode (adam_mode 1)");
  cmd->add_option("--momentum", opt.momentum, "SGD momentum");
  cmd->add_option("--dampening", opt.dampening, "SGD dampening");
  cmd->add_flag("--nesterov", opt.nesterov, "SGD Nesterov momentum");
  cmd->add_option("--max-grad-norm", opt.max_grad_norm, "clip the global gradient norm (0: off)");
  cmd->add_option("--l1", opt.l1_penalty, "L1 penalty on the parameters");
  cmd->add_option("--l2", opt.l2_penalty, "L2 penalty on the parameters");
}

}  // namespace

void AddArtifactCommands(CLI::App& app) {
  struct Options {
    std::string model, out_dir, loss_name = "cross_entropy", reduction = "mean", label_type = "int64";
    std::string optimizer = "adamw";
    ArtifactOptions artifacts;
  };
  auto o = std::make_shared<Options>();
  auto* gen = app.add_subcommand("generate-artifacts",
                                 "Turn a forward ONNX model into training, eval and optimizer models and a checkpoint");
  gen->add_option("model", o->model, "forward ONNX model")->required();
  gen->add_option("--out,-o", o->out_dir, "output directory")->required();
  gen->add_option("--requires-grad", o->artifacts.requires_grad, "parameters that train (default: all float but quantization scales)")
      ->delimiter(',');
  gen->add_option("--frozen", o->artifacts.frozen, "parameters that stay fixed")->delimiter(',');
  gen->add_option("--loss-input", o->artifacts.loss_inputs, "model outputs that feed the loss (default: the first)")
      ->delimiter(',');
  gen->add_option("--additional-output", o->artifacts.additional_outputs,
                  "model outputs the train and eval steps also return")
      ->delimiter(',');
  gen->add_option("--prefix", o->artifacts.prefix, "prefix of every artifact file name");
  gen->add_flag("--nominal-checkpoint", o->artifacts.nominal_checkpoint, "write names and types only");
  gen->add_flag_callback(
      "--keep-cheap-values", [o] { o->artifacts.recompute_cheap_values = false; },
      "keep activation and normalization outputs for the backward pass instead of recomputing them there "
      "(more memory, less compute)");
  gen->add_flag("--frozen-backbone-as-exported", o->artifacts.frozen_backbone_as_exported,
                "BatchNormalization and Dropout exported in eval mode that no trainable parameter reaches stay in "
                "eval mode in the training model (a frozen backbone under model.eval())");
  AddLossOptions(gen, o->artifacts.loss, o->loss_name, o->reduction, o->label_type);
  AddOptimizerOptions(gen, o->artifacts.optimizer, o->optimizer);
  gen->callback([o] {
    ArtifactOptions options = o->artifacts;
    options.loss.type = options.loss.custom_loss_path.empty() ? ParseLossType(o->loss_name) : LossType::kCustom;
    options.loss.reduction = o->reduction == "sum" ? Reduction::kSum : Reduction::kMean;
    options.loss.label_type = o->label_type == "int32" ? DataType::kInt32 : DataType::kInt64;
    options.optimizer.type = ParseOptimizerType(o->optimizer);
    ArtifactPaths paths = GenerateArtifacts(o->model, o->out_dir, options);
    std::cout << "wrote " << paths.training_model << "\n      " << paths.eval_model << "\n      "
              << paths.optimizer_model << "\n      " << paths.checkpoint << "\n";
  });

  struct CheckOptions {
    std::string dir, prefix;
    GradientCheckOptions check;
  };
  auto c = std::make_shared<CheckOptions>();
  auto* check = app.add_subcommand("check-gradients",
                                   "Finite-difference check (float64) of a training model's gradients");
  check->add_option("dir", c->dir, "artifact directory")->required();
  check->add_option("--prefix", c->prefix, "artifact file name prefix");
  check->add_option("--batch", c->check.batch_size, "batch size for symbolic dimensions");
  check->add_option("--samples", c->check.samples_per_parameter, "elements checked per parameter");
  check->add_option("--seed", c->check.seed, "random seed");
  check->add_option("--tolerance", c->check.tolerance, "largest accepted relative error");
  check->callback([c] {
    std::vector<ParameterGradientError> errors = CheckTrainingGradients(c->dir, c->prefix, c->check);
    bool ok = true;
    std::cout << "parameter  worst relative error\n";
    for (const auto& e : errors) {
      std::cout << e.parameter << "  " << e.worst_relative_error << "\n";
      ok &= e.worst_relative_error <= c->check.tolerance;
    }
    ET_CHECK(ok, ErrorCode::kInternal, "gradients differ from finite differences by more than ", c->check.tolerance);
  });
}

}  // namespace edgetrain::cli
