"""Losses and optimizers for ``edgetrain.artifacts.generate_artifacts``, as ORT's ``onnxblock``.

A custom loss is a :class:`Block` whose ``build`` composes other blocks over value names, the names of
the model outputs it receives first::

    class WeightedLoss(onnxblock.Block):
        def __init__(self):
            super().__init__()
            self.mse = onnxblock.loss.MSELoss()
            self.l1 = onnxblock.loss.L1Loss()
            self.add, self.mul = onnxblock.blocks.Add(), onnxblock.blocks.Mul()
            self.weight = onnxblock.blocks.Constant(0.5)

        def build(self, output_name):
            return self.add(self.mse(output_name), self.mul(self.weight(), self.l1(output_name, "target")))

    artifacts.generate_artifacts("model.onnx", loss=WeightedLoss())
"""

from . import blocks, loss, optim
from .blocks import Block

__all__ = ["Block", "blocks", "loss", "optim"]
