"""One onnxruntime.training script, run on ONNX Runtime (argument "ort") or on edgetrain ("edgetrain") with
only its imports changed; prints what it computed as JSON for test_ort_oracle.py to compare."""

import json
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

if sys.argv[1] == "ort":
    from onnxruntime.training import artifacts, onnxblock
    from onnxruntime import SessionOptions
    from onnxruntime.training.api import CheckpointState, Module, Optimizer
    from onnxruntime.training.api import LinearLRScheduler as _OrtLinearLRScheduler

    def LinearLRScheduler(optimizer, warmup_step_count, total_step_count, initial_lr):  # noqa: N802
        # ORT 1.19.2's binding swaps the two counts against its documentation (which edgetrain follows)
        return _OrtLinearLRScheduler(optimizer, total_step_count, warmup_step_count, initial_lr)
else:
    from types import SimpleNamespace as SessionOptions

    from edgetrain import artifacts, onnxblock
    from edgetrain.api import CheckpointState, LinearLRScheduler, Module, Optimizer
OPTIONS = SessionOptions()
OPTIONS.intra_op_num_threads = 1

rng = np.random.default_rng(5)
W1, B1 = rng.standard_normal((6, 8)).astype(np.float32) * 0.5, rng.standard_normal(8).astype(np.float32) * 0.1
W2, B2 = rng.standard_normal((8, 3)).astype(np.float32) * 0.5, rng.standard_normal(3).astype(np.float32) * 0.1
X = rng.standard_normal((5, 6)).astype(np.float32)
PARAMETERS = ["w1", "b1", "w2", "b2"]


def model():
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h0"]), helper.make_node("Add", ["h0", "b1"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["h"]), helper.make_node("MatMul", ["h", "w2"], ["o0"]),
             helper.make_node("Add", ["o0", "b2"], ["output"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 3])],
                              [numpy_helper.from_array(v, n) for v, n in ((W1, "w1"), (B1, "b1"), (W2, "w2"),
                                                                            (B2, "b2"))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


class MSEPlusL1(onnxblock.Block):
    def __init__(self):
        super().__init__()
        self.mse, self.l1, self.add = onnxblock.loss.MSELoss(), onnxblock.loss.L1Loss(), onnxblock.blocks.Add()

    def build(self, output_name):
        return self.add(self.mse(output_name, "target"), self.l1(output_name, "target"))


CASES = {
    "cross_entropy_adamw": dict(loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.AdamW,
                                target=rng.integers(0, 3, 5).astype(np.int64)),
    "mse_sgd_frozen": dict(loss=artifacts.LossType.MSELoss, optimizer=artifacts.OptimType.SGD, frozen=["b2"],
                           target=rng.standard_normal((5, 3)).astype(np.float32)),
    "bce_adamw_options": dict(loss=artifacts.LossType.BCEWithLogitsLoss,
                              optimizer=onnxblock.optim.AdamW(betas=(0.8, 0.99), eps=1e-7, weight_decay=0.1),
                              target=(rng.random((5, 3)) > 0.5).astype(np.float32)),
    "l1_sum_clip": dict(loss=onnxblock.loss.L1Loss(reduction="sum"),
                        optimizer=onnxblock.optim.AdamW(clip_grad=onnxblock.optim.ClipGradNorm(0.05)),
                        target=rng.standard_normal((5, 3)).astype(np.float32)),
    "cross_entropy_sum_ignore": dict(loss=onnxblock.loss.CrossEntropyLoss(reduction="sum", ignore_index=1),
                                   optimizer=artifacts.OptimType.AdamW, target=np.array([0, 1, 2, 1, 0], np.int64)),
    "custom_block": dict(loss=MSEPlusL1(), optimizer=artifacts.OptimType.AdamW,
                         target=rng.standard_normal((5, 3)).astype(np.float32)),
}


def run_case(directory, loss, optimizer, target, frozen=()):
    trainable = [name for name in PARAMETERS if name not in frozen]
    artifacts.generate_artifacts(model(), requires_grad=trainable, frozen_params=list(frozen) or None, loss=loss,
                                 optimizer=optimizer, artifact_directory=directory,
                                 additional_output_names=["output"])
    state = CheckpointState.load_checkpoint(os.path.join(directory, "checkpoint"))
    module = Module(os.path.join(directory, "training_model.onnx"), state,
                    os.path.join(directory, "eval_model.onnx"), session_options=OPTIONS)
    opt = Optimizer(os.path.join(directory, "optimizer_model.onnx"), module)
    scheduler = LinearLRScheduler(opt, warmup_step_count=1, total_step_count=4, initial_lr=0.05)
    result = {"losses": [], "learning_rates": [], "parameter_names": sorted(n for n, _ in state.parameters),
              "requires_grad": sorted(n for n, p in state.parameters if p.requires_grad),
              "train_inputs": module.input_names(), "size": module.get_parameters_size(False),
              "trainable_size": module.get_parameters_size(True)}
    for _ in range(3):
        module.train()
        loss, output = module(X, target)
        result["losses"].append(float(loss))
        result["grad_w1"] = state.parameters["w1"].grad.ravel().tolist()
        opt.step()
        scheduler.step()
        result["learning_rates"].append(opt.get_learning_rate())
        module.lazy_reset_grad()
    module.eval()
    loss, output = module(X, target)
    result["eval_loss"], result["eval_output"] = float(loss), output.ravel().tolist()
    result["eval_inputs"] = module.input_names()
    result["parameters"] = module.get_contiguous_parameters(trainable_only=False).numpy().ravel().tolist()
    result["w2"] = state.parameters["w2"].data.ravel().tolist()
    return result


with tempfile.TemporaryDirectory() as scratch:
    results = {}
    for name, case in CASES.items():
        os.makedirs(os.path.join(scratch, name))
        results[name] = run_case(os.path.join(scratch, name), **case)
print(json.dumps(results))
