"""The training phase, as ``onnxruntime.training.api``: CheckpointState, Module, Optimizer, LinearLRScheduler.

Inputs are NumPy arrays (or anything NumPy converts, such as torch tensors); C-contiguous arrays are
used in place, without a copy. Outputs are NumPy arrays over the memory edgetrain computed them in.
A Module and the Optimizer made from it share one edgetrain TrainingSession.
"""

import os

import numpy as np

from .. import _edgetrain
from .._edgetrain import InvalidArgument


def _model_argument(uri):
    """A model file path, or the bytes of a model."""
    return uri if isinstance(uri, bytes) else os.fspath(uri)


class Parameter:
    """A parameter of a CheckpointState (from ``state.parameters[name]``)."""

    def __init__(self, owner, name):
        self._owner = owner
        self._state = owner._state
        self._name = name

    @property
    def name(self):
        return self._name

    @property
    def data(self):
        """A copy of the parameter's current value."""
        return self._state.get_parameter(self._name)

    @data.setter
    def data(self, value):
        self._state.update_parameter(self._name, value)

    @property
    def grad(self):
        """A copy of the gradient accumulated by the Module training this state; None for a parameter that
        does not require grad or a state no Module trains yet (zeros before the first train step)."""
        session = self._owner._session
        if session is None or not self.requires_grad:
            return None
        return session.gradient(self._name)

    @property
    def requires_grad(self):
        return self._state.is_trainable(self._name)

    def __repr__(self):
        return f"Parameter(name={self._name}, requires_grad={self.requires_grad})"


class _NamedValues:
    """Access by name as a dict, iteration over (name, value) pairs as ORT's API does."""

    def __init__(self, owner):
        self._owner = owner
        self._state = owner._state

    def __len__(self):
        return len(self.keys())

    def __iter__(self):
        for name in self.keys():
            yield name, self[name]

    def items(self):
        return list(self)

    def values(self):
        return [value for _, value in self]

    def get(self, name, default=None):
        return self[name] if name in self else default

    def __repr__(self):
        return f"{type(self).__name__}({self.keys()})"

    @staticmethod
    def _raise_unknown(name, access):
        """Raises KeyError with edgetrain's message about the unknown `name`, which `access` reports."""
        try:
            access(name)
        except InvalidArgument as error:
            raise KeyError(str(error)) from error
        raise KeyError(name)


class Parameters(_NamedValues):
    """The parameters of a CheckpointState by name: ``state.parameters["fc1.weight"].data``."""

    def keys(self):
        return self._state.parameter_names()

    def __contains__(self, name):
        return name in self.keys()

    def __getitem__(self, name):
        if name not in self:
            self._raise_unknown(name, self._state.get_parameter)
        if self._state.is_nominal:  # as ORT: a nominal state's parameters are not there to read
            raise InvalidArgument(f"Cannot get parameter '{name}' from a nominal state: load the parameter values "
                                  "first (Module.copy_buffer_to_parameters(buffer, trainable_only=False))")
        return Parameter(self._owner, name)

    def __setitem__(self, name, value):
        """Overwrites the parameter's value (same element type and shape)."""
        if name not in self:
            self._raise_unknown(name, lambda unknown: self._state.update_parameter(unknown, value))
        self._state.update_parameter(name, value)


class Properties(_NamedValues):
    """The user properties of a CheckpointState (int, float or str values) by name."""

    def keys(self):
        return self._state.property_names()

    def __contains__(self, name):
        return self._state.has_property(name)

    def __getitem__(self, name):
        if name not in self:
            self._raise_unknown(name, self._state.get_property)
        return self._state.get_property(name)

    def __setitem__(self, name, value):
        self._state.add_property(name, value)


class CheckpointState:
    """The parameters, optimizer state and properties training works on (from ``load_checkpoint``)."""

    def __init__(self, state):
        if not isinstance(state, _edgetrain.CheckpointState):
            raise TypeError(f"Invalid argument for CheckpointState received {type(state)}")
        self._state = state
        self._session = None  # the session of the Module that trains this state (for Parameter.grad)
        self._parameters = Parameters(self)
        self._properties = Properties(self)

    @classmethod
    def load_checkpoint(cls, checkpoint_uri):
        """Loads a checkpoint file (complete or nominal), or a checkpoint given as bytes."""
        if isinstance(checkpoint_uri, bytes):
            return cls(_edgetrain.CheckpointState.load_from_buffer(checkpoint_uri))
        return cls(_edgetrain.CheckpointState.load(os.fspath(checkpoint_uri)))

    @classmethod
    def save_checkpoint(cls, state, checkpoint_uri, include_optimizer_state=False):
        """Writes the state atomically; with the optimizer state, training can resume exactly."""
        _edgetrain.CheckpointState.save(state._state, os.fspath(checkpoint_uri), include_optimizer_state)

    @property
    def parameters(self):
        return self._parameters

    @property
    def properties(self):
        return self._properties

    # Property access on the state itself, as in ORT 1.15.
    def __getitem__(self, name):
        return self._properties[name]

    def __setitem__(self, name, value):
        self._properties[name] = value

    def __contains__(self, name):
        return name in self._properties


class _ParameterBuffer(np.ndarray):
    """A flat float32 array of parameters that also answers ``numpy()``, as ORT's OrtValue does."""

    def numpy(self):
        return self.view(np.ndarray)


class Module:
    """Runs train steps (forward, backward, gradients accumulated until lazy_reset_grad) and eval steps.

    Args:
        train_model_uri: the training model (a path, or bytes).
        state: the CheckpointState to train.
        eval_model_uri: the eval model (a path, or bytes), needed for eval steps and export.
        device: "cpu" (edgetrain trains on the CPU).
        session_options: its ``intra_op_num_threads`` (0: every CPU core) sets the thread count.
        memory_budget: (edgetrain's addition, keyword only) bytes for a train step's intermediate tensors, an
            int or a str such as "512M" or "2G" (K, M, G, T: powers of 1024). Forward values are recomputed in
            the backward pass to fit (gradient checkpointing), with the same results; a train step raises
            ``edgetrain.ResourceExhausted`` naming the smallest budget that fits when none does.
        cache_frozen_prefix: (edgetrain's addition, keyword only) True, or the cache's size in bytes (an int or a
            str such as "1G"; True: 1 GiB): caches the outputs of the frozen prefix (the nodes before every
            trainable parameter) per sample, keyed by a hash of the sample's input bytes, so that later epochs of
            head-only training skip the frozen backbone. ``edgetrain.InvalidArgument`` names the node when the
            prefix mixes the samples of a batch (BatchNorm in training mode, Dropout).
    """

    training: bool

    def __init__(self, train_model_uri, state, eval_model_uri=None, device="cpu", session_options=None, *,
                 memory_budget=None, cache_frozen_prefix=None):
        if device.split(":")[0] != "cpu":
            raise ValueError(f"device '{device}': edgetrain trains on the CPU only")
        num_threads = getattr(session_options, "intra_op_num_threads", 0) or os.cpu_count() or 1
        self.training = True
        self._state = state
        eval_model = None if eval_model_uri is None else _model_argument(eval_model_uri)
        self._session = _edgetrain.TrainingSession(state._state, _model_argument(train_model_uri), eval_model,
                                                   num_threads, memory_budget, cache_frozen_prefix)
        state._session = self._session

    def __call__(self, *user_inputs):
        """A train step (training mode) or an eval step: the outputs, one array or a tuple of them."""
        step = self._session.train_step if self.training else self._session.eval_step
        outputs = step(user_inputs)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def train(self, mode=True):
        self.training = mode
        return self

    def eval(self):
        return self.train(False)

    def lazy_reset_grad(self):
        """The next train step overwrites the gradients instead of adding to them."""
        self._session.lazy_reset_grad()

    def get_parameters_size(self, trainable_only=True):
        return self._session.get_parameters_size(trainable_only)

    def get_contiguous_parameters(self, trainable_only=False):
        """The parameters (float32), flat, in training-model order."""
        return self._session.copy_parameters_to_buffer(trainable_only).view(_ParameterBuffer)

    def copy_buffer_to_parameters(self, buffer, trainable_only=True):
        """Sets the parameters from a flat float32 buffer (as get_contiguous_parameters returns)."""
        if hasattr(buffer, "numpy") and not isinstance(buffer, np.ndarray):
            buffer = buffer.numpy()
        self._session.copy_buffer_to_parameters(buffer, trainable_only)

    def export_model_for_inferencing(self, inference_model_uri, graph_output_names):
        """Writes the eval model reduced to ``graph_output_names``, with the current parameters baked in."""
        self._session.export_model_for_inference(os.fspath(inference_model_uri), list(graph_output_names))

    def input_names(self):
        """The user inputs of the training model (training mode) or of the eval model."""
        return self._session.input_names(self.training)

    def output_names(self):
        return self._session.output_names(self.training)

    def memory_plan(self):
        """(edgetrain's addition) The train step's planned intermediate tensors: ``{"arena_bytes": ...,
        "recomputed_values": ...}`` (0 bytes before the first train step)."""
        return self._session.memory_plan()

    def frozen_prefix_cache(self):
        """(edgetrain's addition) The frozen prefix cache: ``{"samples", "bytes", "hits", "misses"}`` (all 0
        without ``cache_frozen_prefix``)."""
        return self._session.frozen_prefix_cache()


class Optimizer:
    """Updates the module's parameters from its accumulated gradients (the optimizer model's rule)."""

    def __init__(self, optimizer_uri, module):
        self._session = module._session
        self._session.attach_optimizer(_model_argument(optimizer_uri))

    def step(self):
        self._session.optimizer_step()

    def set_learning_rate(self, learning_rate):
        self._session.set_learning_rate(learning_rate)

    def get_learning_rate(self):
        return self._session.get_learning_rate()


class LinearLRScheduler:
    """Linear warmup from 0 to ``initial_lr`` over ``warmup_step_count`` steps, then linear decay to 0 at
    ``total_step_count``. Call ``step()`` after each optimizer step."""

    def __init__(self, optimizer, warmup_step_count, total_step_count, initial_lr):
        self._session = optimizer._session
        self._session.register_linear_lr_scheduler(warmup_step_count, total_step_count, initial_lr)

    def step(self):
        self._session.scheduler_step()
