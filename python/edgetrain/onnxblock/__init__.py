"""Offline model building, as ORT's ``onnxruntime.training.onnxblock``: blocks that build on a base model
(``base``/``empty_base``), forward and training blocks, losses, optimizers and checkpoints.

A custom loss is a :class:`Block` whose ``build`` composes other blocks over value names::

    class WeightedLoss(onnxblock.Block):
        def __init__(self):
            super().__init__()
            self.mse, self.l1 = onnxblock.loss.MSELoss(), onnxblock.loss.L1Loss()
            self.add, self.mul = onnxblock.blocks.Add(), onnxblock.blocks.Mul()
            self.weight = onnxblock.blocks.Constant(0.5)

        def build(self, output_name):
            return self.add(self.mse(output_name), self.mul(self.weight(), self.l1(output_name, "target")))

    artifacts.generate_artifacts(model, requires_grad=[...], loss=WeightedLoss())
"""

from . import blocks, loss, optim
from .blocks import Block
from .checkpoint_utils import load_checkpoint_to_model, save_checkpoint
from .model_accessor import base, custom_op_library, empty_base
from .onnxblock import ForwardBlock, TrainingBlock

__all__ = ["Block", "ForwardBlock", "TrainingBlock", "base", "blocks", "custom_op_library", "empty_base",
           "load_checkpoint_to_model", "loss", "optim", "save_checkpoint"]
