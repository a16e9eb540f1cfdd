// edgetrain._edgetrain: the C++ API for the Python package (python/edgetrain). NumPy arrays come in
// borrowed where they are C-contiguous and go out over the tensor's own memory; every edgetrain::Error
// becomes the Python exception of its ErrorCode, with the same message.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "edgetrain/edgetrain.h"
#include "edgetrain/edgetrain.hpp"
#include "autodiff/optimizers.hpp"
#include "core/byte_size.hpp"
#include "onnx/exporter.hpp"
#include "onnx/importer.hpp"
#include "onnx/ort_format.hpp"
#include "runtime/export_options.hpp"

namespace py = pybind11;

namespace edgetrain {
namespace {

// ---- errors ----

constexpr ErrorCode kErrorCodes[] = {
    ErrorCode::kInvalidArgument, ErrorCode::kInvalidModel,      ErrorCode::kNotImplemented, ErrorCode::kOutOfRange,
    ErrorCode::kIoError,         ErrorCode::kResourceExhausted, ErrorCode::kInternal};

// Python exception types: edgetrain.Error(RuntimeError), then one subclass per ErrorCode (named as
// ErrorCodeName says), which also derives from the built-in exception of the same meaning where one exists.
std::map<ErrorCode, PyObject*>& ExceptionTypes() {
  static std::map<ErrorCode, PyObject*> types;
  return types;
}

PyObject* BuiltinExceptionFor(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return PyExc_ValueError;
    case ErrorCode::kNotImplemented: return PyExc_NotImplementedError;
    case ErrorCode::kOutOfRange: return PyExc_IndexError;
    default: return nullptr;
  }
}

void RegisterExceptions(py::module_& m) {
  PyObject* base = PyErr_NewExceptionWithDoc(
      "edgetrain.Error", "An error edgetrain reports (its message names the cause).", PyExc_RuntimeError, nullptr);
  if (base == nullptr) throw py::error_already_set();
  m.attr("Error") = py::handle(base);
  for (ErrorCode code : kErrorCodes) {
    const std::string name = ErrorCodeName(code);
    PyObject* builtin = BuiltinExceptionFor(code);
    py::tuple bases =
        builtin ? py::make_tuple(py::handle(base), py::handle(builtin)) : py::make_tuple(py::handle(base));
    PyObject* type = PyErr_NewException(("edgetrain." + name).c_str(), bases.ptr(), nullptr);
    if (type == nullptr) throw py::error_already_set();
    ExceptionTypes()[code] = type;
    m.attr(name.c_str()) = py::handle(type);
  }
  py::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const Error& e) {
      PyErr_SetString(ExceptionTypes().at(e.code()), e.what());
    }
  });
}

// ---- NumPy <-> Tensor ----

DataType DataTypeOf(const py::dtype& dtype, const std::string& what) {
  const auto size = dtype.itemsize();
  switch (dtype.kind()) {
    case 'f':
      if (size == 2) return DataType::kFloat16;
      if (size == 4) return DataType::kFloat32;
      if (size == 8) return DataType::kFloat64;
      break;
    case 'i':
      if (size == 1) return DataType::kInt8;
      if (size == 2) return DataType::kInt16;
      if (size == 4) return DataType::kInt32;
      if (size == 8) return DataType::kInt64;
      break;
    case 'u':
      if (size == 1) return DataType::kUint8;
      if (size == 2) return DataType::kUint16;
      if (size == 4) return DataType::kUint32;
      if (size == 8) return DataType::kUint64;
      break;
    case 'b': return DataType::kBool;
  }
  Fail(ErrorCode::kInvalidArgument, what, ": NumPy element type ",
       py::str(static_cast<const py::handle&>(dtype)).cast<std::string>(), " is not supported");
}

py::dtype NumpyTypeOf(DataType type, const std::string& what) {
  ET_CHECK(DataTypeSize(type) != 0 && type != DataType::kBFloat16, ErrorCode::kNotImplemented, what, ": element type ",
           DataTypeName(type), " has no NumPy equivalent");
  return py::dtype(DataTypeName(type));  // the names are NumPy's
}

// An array in native byte order and C order: the same object when it already is one, else a converted copy.
py::array ContiguousArray(const py::handle& value) {
  py::array array = py::array::ensure(value, py::array::c_style);
  if (!array) throw py::error_already_set();
  if (array.dtype().byteorder() == '>')
    array = py::array(array.attr("astype")(array.dtype().attr("newbyteorder")("=")));
  return array;
}

// A Tensor over the array's memory; the caller keeps `array` alive while the tensor is used.
Tensor BorrowArray(const py::array& array, const std::string& what) {
  Shape shape(array.shape(), array.shape() + array.ndim());
  return Tensor::Borrow(DataTypeOf(array.dtype(), what), std::move(shape), const_cast<void*>(array.data()));
}

// The tensor as an array over the tensor's own memory (kept alive by the array), or over a copy when
// `copy` is set (memory the tensor merely borrows).
py::array ToArray(const Tensor& tensor, const std::string& what, bool copy = false) {
  if (tensor.dtype() == DataType::kBFloat16) {  // NumPy has no bfloat16: widen to float32
    Tensor widened(DataType::kFloat32, tensor.shape());
    const BFloat16* in = tensor.data<BFloat16>();
    float* out = widened.data<float>();
    for (int64_t i = 0; i < tensor.numel(); ++i) out[i] = static_cast<float>(in[i]);
    return ToArray(widened, what);
  }
  py::dtype dtype = NumpyTypeOf(tensor.dtype(), what);
  auto* owner = new Tensor(copy ? tensor.Clone() : tensor);
  py::capsule keep_alive(owner, [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(dtype, owner->shape(), owner->raw(), keep_alive);
}

// Arrays fed to one call: converted once, kept alive for the call, borrowed by the tensors.
struct Feeds {
  std::vector<py::array> arrays;
  std::vector<Tensor> tensors;

  Feeds(const py::sequence& values, const std::vector<std::string>& names, const char* step) {
    for (size_t i = 0; i < values.size(); ++i) {
      std::string what = std::string(step) + " input " + (i < names.size() ? "'" + names[i] + "'" : std::to_string(i));
      arrays.push_back(ContiguousArray(values[i]));
      tensors.push_back(BorrowArray(arrays.back(), what));
    }
  }
  // Whether `t` lies in the memory of one of the fed arrays (an output that passes an input through).
  bool Aliases(const Tensor& t) const {
    const auto* p = static_cast<const uint8_t*>(t.raw());
    for (const Tensor& fed : tensors) {
      const auto* begin = static_cast<const uint8_t*>(fed.raw());
      if (p != nullptr && p >= begin && p < begin + fed.nbytes()) return true;
    }
    return false;
  }
};

py::list ToArrays(const std::vector<Tensor>& tensors, const std::vector<std::string>& names, const Feeds& feeds) {
  py::list out;
  for (size_t i = 0; i < tensors.size(); ++i)
    out.append(
        ToArray(tensors[i], i < names.size() ? "output '" + names[i] + "'" : "output", feeds.Aliases(tensors[i])));
  return out;
}

// ---- models given as a path or as bytes ----

// A model file path or the bytes of a model (kept here, since a session may be rebuilt from them).
struct ModelArgument {
  std::string path, bytes;
  bool is_bytes = false;

  static std::optional<ModelArgument> From(const py::object& value) {
    if (value.is_none()) return std::nullopt;
    ModelArgument model;
    model.is_bytes = py::isinstance<py::bytes>(value);
    (model.is_bytes ? model.bytes : model.path) = value.cast<std::string>();
    return model;
  }
  ModelSource Source() const {
    return is_bytes ? ModelSource::FromBuffer(bytes.data(), bytes.size(), "<model bytes>") : ModelSource(path);
  }
};

ModelSource SourceOf(const std::optional<ModelArgument>& model) { return model ? model->Source() : ModelSource(); }

// Module's memory_budget (and cache_frozen_prefix's size): None, a positive int of bytes, or a size such
// as "512M" or "2G".
std::optional<int64_t> MemoryBudget(const py::object& value, const char* what = "memory_budget") {
  if (value.is_none()) return std::nullopt;
  if (py::isinstance<py::str>(value)) return ParseByteSize(value.cast<std::string>(), what);
  if (py::isinstance<py::int_>(value) && !py::isinstance<py::bool_>(value)) {
    const py::int_ bytes = py::reinterpret_borrow<py::int_>(value);
    const std::string text = py::repr(value).cast<std::string>();
    ET_CHECK(bytes > py::int_(0), ErrorCode::kInvalidArgument, what, ": must be a positive number of bytes, got ", text);
    ET_CHECK(bytes <= py::int_(INT64_MAX), ErrorCode::kInvalidArgument, what, ": ", text, " bytes is too large");
    return bytes.cast<int64_t>();
  }
  throw py::type_error(std::string(what) + ": expected None, an int of bytes or a str such as '512M', got " +
                       py::str(py::type::handle_of(value).attr("__name__")).cast<std::string>());
}

// Module's cache_frozen_prefix: None or False (no cache), True (the default size), or a size as above.
void FrozenPrefixCache(const py::object& value, TrainingSessionOptions& options) {
  if (value.is_none() || (py::isinstance<py::bool_>(value) && !value.cast<bool>())) return;
  options.cache_frozen_prefix = true;
  if (py::isinstance<py::bool_>(value)) return;
  options.frozen_prefix_cache_bytes = *MemoryBudget(value, "cache_frozen_prefix");
}

// ---- the session a Module and its Optimizer share ----

// TrainingSession takes its models at construction, while ORT's Python API creates the Optimizer after the
// Module: attaching an optimizer model rebuilds the session over the same state.
class SharedSession {
 public:
  SharedSession(CheckpointState state, const py::object& training, const py::object& eval, int num_threads,
                const py::object& memory_budget, const py::object& cache_frozen_prefix)
      : state_(std::move(state)), training_(*ModelArgument::From(training)), eval_(ModelArgument::From(eval)) {
    options_.num_threads = num_threads;
    options_.memory_budget_bytes = MemoryBudget(memory_budget);
    FrozenPrefixCache(cache_frozen_prefix, options_);
    Rebuild();
  }

  void AttachOptimizer(const py::object& optimizer) {
    ET_CHECK(!gradients_pending_, ErrorCode::kInvalidArgument,
             "Optimizer: create it before the module's first train step, or after lazy_reset_grad (the "
             "gradients accumulated so far would be lost)");
    optimizer_ = ModelArgument::From(optimizer);
    Rebuild();
  }

  py::list Step(bool training, const py::sequence& inputs) {
    TrainingSession& s = *session_;
    const std::vector<std::string> names = training ? s.TrainingInputNames() : s.EvalInputNames();
    Feeds feeds(inputs, names, training ? "TrainStep" : "EvalStep");
    std::vector<Tensor> outputs;
    {
      py::gil_scoped_release release;
      outputs = training ? s.TrainStep(feeds.tensors) : s.EvalStep(feeds.tensors);
    }
    if (training) gradients_pending_ = true;
    return ToArrays(outputs, training ? s.TrainingOutputNames() : s.EvalOutputNames(), feeds);
  }

  void LazyResetGrad() {
    session_->LazyResetGrad();
    gradients_pending_ = false;
  }

  void OptimizerStep() {
    py::gil_scoped_release release;
    session_->OptimizerStep();
  }

  py::array CopyParametersToBuffer(bool trainable_only) const {
    Tensor buffer(DataType::kFloat32, {static_cast<int64_t>(session_->GetParametersSize(trainable_only))});
    session_->CopyParametersToBuffer(buffer, trainable_only);
    return ToArray(buffer, "parameters");
  }

  void CopyBufferToParameters(const py::handle& buffer, bool trainable_only) {
    py::array array = ContiguousArray(buffer);
    session_->CopyBufferToParameters(BorrowArray(array, "CopyBufferToParameters buffer"), trainable_only);
  }

  TrainingSession& session() { return *session_; }

 private:
  void Rebuild() {
    session_ =
        std::make_unique<TrainingSession>(state_, training_.Source(), SourceOf(eval_), SourceOf(optimizer_), options_);
    gradients_pending_ = false;
  }

  CheckpointState state_;
  ModelArgument training_;
  std::optional<ModelArgument> eval_, optimizer_;
  TrainingSessionOptions options_;
  std::unique_ptr<TrainingSession> session_;
  bool gradients_pending_ = false;
};

// ---- checkpoint properties ----

PropertyValue ToProperty(const py::handle& value, const std::string& name) {
  if (py::isinstance<py::int_>(value)) return value.cast<int64_t>();  // bool too, as 0 or 1
  if (py::isinstance<py::float_>(value)) return value.cast<float>();
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  throw py::type_error("property '" + name + "': a value must be int, float or str, got " +
                       py::str(py::type::handle_of(value).attr("__name__")).cast<std::string>());
}

py::object FromProperty(const PropertyValue& value) {
  return std::visit([](const auto& v) -> py::object { return py::cast(v); }, value);
}

// ---- loss composition ----

// One dimension given from Python: an int (known size), a str (symbolic, such as "batch") or None.
Dim ToDim(const py::handle& value) {
  if (value.is_none()) return Dim{};
  if (py::isinstance<py::str>(value)) return Dim{-1, value.cast<std::string>()};
  return Dim{value.cast<int64_t>(), ""};
}

py::object FromDims(const ValueInfo& info) {
  if (!info.has_shape) return py::none();
  py::list dims;
  for (const Dim& d : info.shape)
    dims.append(d.known()          ? py::object(py::int_(d.value))
                : d.symbol.empty() ? py::object(py::none())
                                   : py::object(py::str(d.symbol)));
  return dims;
}

Attribute ToAttribute(const py::handle& value, const std::string& name) {
  if (py::isinstance<py::bool_>(value) || py::isinstance<py::int_>(value)) return Attribute::Int(value.cast<int64_t>());
  if (py::isinstance<py::float_>(value)) return Attribute::Float(value.cast<float>());
  if (py::isinstance<py::str>(value)) return Attribute::String(value.cast<std::string>());
  if (py::isinstance<py::array>(value)) {
    py::array array = ContiguousArray(value);
    return Attribute::TensorValue(BorrowArray(array, "attribute '" + name + "'").Clone());
  }
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    py::sequence items = py::reinterpret_borrow<py::sequence>(value);
    bool all_int = true, all_str = items.size() > 0;
    for (const auto& item : items) {
      all_int &= py::isinstance<py::int_>(item);
      all_str &= py::isinstance<py::str>(item);
    }
    if (all_str) {
      Attribute attribute;
      attribute.kind = Attribute::Kind::kStrings;
      attribute.strings = items.cast<std::vector<std::string>>();
      return attribute;
    }
    return all_int ? Attribute::Ints(items.cast<std::vector<int64_t>>())
                   : Attribute::Floats(items.cast<std::vector<float>>());
  }
  throw py::type_error("attribute '" + name + "': unsupported value of type " +
                       py::str(py::type::handle_of(value).attr("__name__")).cast<std::string>());
}

// LossSpec::compose calling a Python callable with the composer.
std::function<std::string(LossComposer&)> PythonCompose(py::function compose) {
  return [compose = std::move(compose)](LossComposer& composer) {
    return compose(py::cast(&composer, py::return_value_policy::reference)).cast<std::string>();
  };
}

// ---- artifacts ----

// GenerateArtifacts, plus ORT's nominal checkpoint: with `nominal_checkpoint` the complete checkpoint is
// written as usual and its nominal form (names and types only) beside it as "<prefix>nominal_checkpoint".
py::dict GenerateArtifactsForPython(const std::string& model_path, const std::string& out_dir, ArtifactOptions options,
                                    bool nominal_checkpoint) {
  options.nominal_checkpoint = false;
  ArtifactPaths paths = GenerateArtifacts(model_path, out_dir, options);
  py::dict out;
  out["training_model"] = paths.training_model;
  out["eval_model"] = paths.eval_model;
  if (!paths.optimizer_model.empty()) out["optimizer_model"] = paths.optimizer_model;
  out["checkpoint"] = paths.checkpoint;
  if (nominal_checkpoint) {
    Checkpoint nominal = LoadCheckpoint(paths.checkpoint);
    nominal.is_nominal = true;
    std::string path = (std::filesystem::path(out_dir) / (options.prefix + "nominal_checkpoint")).string();
    SaveCheckpoint(nominal, path, /*include_optimizer_state=*/false);
    out["nominal_checkpoint"] = path;
  }
  return out;
}

// The optimizer model for parameters given as (name, NumPy dtype, shape), serialized.
py::bytes OptimizerModelBytes(const OptimizerSpec& spec, const py::list& parameters) {
  std::vector<std::string> names;
  std::vector<ValueInfo> infos;
  for (const auto& item : parameters) {
    auto [name, dtype, shape] = item.cast<std::tuple<std::string, py::object, std::vector<int64_t>>>();
    ValueInfo info;
    info.name = name;
    info.dtype = DataTypeOf(py::dtype::from_args(dtype), "parameter '" + name + "'");
    info.has_shape = true;
    for (int64_t d : shape) info.shape.push_back(Dim{d, ""});
    names.push_back(name);
    infos.push_back(std::move(info));
  }
  return py::bytes(SerializeModel(BuildOptimizerModel(spec, names, infos), ExecutionExportOptions()));
}

// An ODTC checkpoint of (name, array) pairs; `nominal` keeps only the names and element types.
void SaveParameters(const py::list& trainable, const py::list& frozen, const std::string& path, bool nominal) {
  Checkpoint checkpoint;
  checkpoint.is_nominal = nominal;
  for (auto [list, target] : {std::pair{&trainable, &checkpoint.trainable}, std::pair{&frozen, &checkpoint.frozen}})
    for (const auto& item : *list) {
      auto [name, value] = item.cast<std::pair<std::string, py::object>>();
      ET_CHECK(!checkpoint.trainable.count(name) && !checkpoint.frozen.count(name), ErrorCode::kInvalidArgument,
               "save_checkpoint: parameter '", name, "' is given twice");
      py::array array = ContiguousArray(value);
      (*target)[name] = BorrowArray(array, "parameter '" + name + "'").Clone();
    }
  SaveCheckpoint(checkpoint, path, /*include_optimizer_state=*/false);
}

std::vector<std::string> ModelOutputNames(const std::string& model_path) {
  ImportOptions options;
  options.infer_shapes = false;
  std::vector<std::string> names;
  for (const ValueInfo& output : LoadModel(model_path, options).graph.outputs) names.push_back(output.name);
  return names;
}

}  // namespace
}  // namespace edgetrain

PYBIND11_MODULE(_edgetrain, m) {
  using namespace edgetrain;
  m.doc() = "edgetrain's C++ API (use the edgetrain package: edgetrain.artifacts, edgetrain.api)";
  m.attr("__version__") = EDGETRAIN_VERSION;
  RegisterExceptions(m);

  // ---- offline phase ----
  py::enum_<LossType>(m, "LossKind")
      .value("MSE", LossType::kMSE)
      .value("CROSS_ENTROPY", LossType::kCrossEntropy)
      .value("BCE_WITH_LOGITS", LossType::kBCEWithLogits)
      .value("L1", LossType::kL1)
      .value("HUBER", LossType::kHuber)
      .value("SMOOTH_L1", LossType::kSmoothL1)
      .value("NLL", LossType::kNLL)
      .value("KL_DIV", LossType::kKLDiv)
      .value("CUSTOM", LossType::kCustom);
  py::enum_<Reduction>(m, "Reduction").value("MEAN", Reduction::kMean).value("SUM", Reduction::kSum);
  py::enum_<OptimizerType>(m, "OptimizerKind")
      .value("ADAMW", OptimizerType::kAdamW)
      .value("ADAM", OptimizerType::kAdam)
      .value("SGD", OptimizerType::kSGD);

  py::class_<LossSpec>(m, "LossSpec")
      .def(py::init<>())
      .def_readwrite("type", &LossSpec::type)
      .def_readwrite("reduction", &LossSpec::reduction)
      .def_readwrite("ignore_index", &LossSpec::ignore_index)
      .def_readwrite("class_weights", &LossSpec::class_weights)
      .def_readwrite("pos_weight", &LossSpec::pos_weight)
      .def_readwrite("delta", &LossSpec::delta)
      .def_property(
          "label_type", [](const LossSpec& s) { return NumpyTypeOf(s.label_type, "label_type"); },
          [](LossSpec& s, const py::object& dtype) {
            s.label_type = DataTypeOf(py::dtype::from_args(dtype), "label_type");
          })
      .def_readwrite("log_target", &LossSpec::log_target)
      .def_readwrite("custom_loss_path", &LossSpec::custom_loss_path)
      .def_property(
          "compose", [](const LossSpec& s) { return static_cast<bool>(s.compose); },
          [](LossSpec& s, py::function compose) { s.compose = PythonCompose(std::move(compose)); },
          "A callable taking a LossComposer and returning the loss value's name (set only).");

  py::class_<OptimizerSpec>(m, "OptimizerSpec")
      .def(py::init<>())
      .def_readwrite("type", &OptimizerSpec::type)
      .def_readwrite("beta1", &OptimizerSpec::beta1)
      .def_readwrite("beta2", &OptimizerSpec::beta2)
      .def_readwrite("epsilon", &OptimizerSpec::epsilon)
      .def_readwrite("weight_decay", &OptimizerSpec::weight_decay)
      .def_readwrite("hugging_face_mode", &OptimizerSpec::hugging_face_mode)
      .def_readwrite("correct_bias", &OptimizerSpec::correct_bias)
      .def_readwrite("momentum", &OptimizerSpec::momentum)
      .def_readwrite("dampening", &OptimizerSpec::dampening)
      .def_readwrite("nesterov", &OptimizerSpec::nesterov)
      .def_readwrite("max_grad_norm", &OptimizerSpec::max_grad_norm)
      .def_readwrite("l1_penalty", &OptimizerSpec::l1_penalty)
      .def_readwrite("l2_penalty", &OptimizerSpec::l2_penalty);

  py::class_<ArtifactOptions>(m, "ArtifactOptions")
      .def(py::init<>())
      .def_readwrite("requires_grad", &ArtifactOptions::requires_grad)
      .def_readwrite("frozen", &ArtifactOptions::frozen)
      .def_readwrite("loss", &ArtifactOptions::loss)
      .def_readwrite("loss_inputs", &ArtifactOptions::loss_inputs)
      .def_readwrite("additional_outputs", &ArtifactOptions::additional_outputs)
      .def_readwrite("optimizer", &ArtifactOptions::optimizer)
      .def_readwrite("prefix", &ArtifactOptions::prefix)
      .def_readwrite("unlisted_are_constants", &ArtifactOptions::unlisted_are_constants)
      .def_readwrite("frozen_backbone_as_exported", &ArtifactOptions::frozen_backbone_as_exported);

  py::class_<LossComposer>(m, "LossComposer", "Builds a loss inside generate_artifacts (valid only there).")
      .def("num_predictions", &LossComposer::NumPredictions)
      .def("prediction", &LossComposer::Prediction)
      .def(
          "target",
          [](LossComposer& c, const std::string& name, const py::object& dtype, const py::sequence& shape) {
            std::vector<Dim> dims;
            for (const auto& d : shape) dims.push_back(ToDim(d));
            return c.Target(name, DataTypeOf(py::dtype::from_args(dtype), "target '" + name + "'"), dims);
          },
          py::arg("name"), py::arg("dtype"), py::arg("shape"))
      .def("constant",
           [](LossComposer& c, const py::handle& value) {
             py::array array = ContiguousArray(value);
             return c.Constant(BorrowArray(array, "constant").Clone());
           })
      .def(
          "op",
          [](LossComposer& c, const std::string& op_type, const std::vector<std::string>& inputs,
             const py::dict& attributes) {
            AttributeMap converted;
            for (const auto& [key, value] : attributes) {
              std::string name = key.cast<std::string>();
              converted[name] = ToAttribute(value, name);
            }
            return c.Op(op_type, inputs, std::move(converted));
          },
          py::arg("op_type"), py::arg("inputs"), py::arg("attributes") = py::dict())
      .def("describe",
           [](const LossComposer& c, const std::string& value) {
             ValueInfo info = c.Describe(value);
             py::object dtype = info.dtype == DataType::kUndefined ? py::object(py::none())
                                                                   : py::object(NumpyTypeOf(info.dtype, value));
             return py::make_tuple(dtype, FromDims(info));
           })
      .def("loss", &LossComposer::Loss, py::arg("spec"), py::arg("prediction"), py::arg("target_name") = "");

  m.def("generate_artifacts", &GenerateArtifactsForPython, py::arg("model_path"), py::arg("out_dir"),
        py::arg("options"), py::arg("nominal_checkpoint") = false);
  m.def("model_output_names", &ModelOutputNames, py::arg("model_path"));
  m.def(
      "onnx_to_ort_format",
      [](const py::bytes& model, const std::string& source) {
        return py::bytes(ConvertOnnxToOrtFormat(std::string(model), source));
      },
      py::arg("model"), py::arg("source"));
  m.def("optimizer_model", &OptimizerModelBytes, py::arg("spec"), py::arg("parameters"));
  m.def("save_parameters", &SaveParameters, py::arg("trainable"), py::arg("frozen"), py::arg("path"),
        py::arg("nominal") = false);

  // ---- training phase ----
  py::class_<CheckpointState>(m, "CheckpointState")
      .def_static("load", &CheckpointState::Load, py::arg("path"))
      .def_static(
          "load_from_buffer",
          [](const py::bytes& data) {
            std::string_view view = data;
            return CheckpointState::LoadFromBuffer(view.data(), view.size(), "<checkpoint bytes>");
          },
          py::arg("data"))
      .def_static("save", &CheckpointState::Save, py::arg("state"), py::arg("path"),
                  py::arg("include_optimizer_state") = false, py::arg("external_data") = false)
      .def_property_readonly("is_nominal", &CheckpointState::is_nominal)
      .def("parameter_names", &CheckpointState::ParameterNames)
      .def("is_trainable", &CheckpointState::IsTrainable)
      .def("get_parameter",
           [](const CheckpointState& s, const std::string& name) {
             return ToArray(s.GetParameter(name), "parameter '" + name + "'");
           })
      .def("update_parameter",
           [](CheckpointState& s, const std::string& name, const py::handle& value) {
             py::array array = ContiguousArray(value);
             s.UpdateParameter(name, BorrowArray(array, "parameter '" + name + "'"));
           })
      .def("property_names", &CheckpointState::PropertyNames)
      .def("has_property", &CheckpointState::HasProperty)
      .def("get_property",
           [](const CheckpointState& s, const std::string& name) { return FromProperty(s.GetProperty(name)); })
      .def("add_property", [](CheckpointState& s, const std::string& name, const py::handle& value) {
        s.AddProperty(name, ToProperty(value, name));
      });

  py::class_<SharedSession>(m, "TrainingSession")
      .def(py::init<CheckpointState, py::object, py::object, int, py::object, py::object>(), py::arg("state"),
           py::arg("training_model"), py::arg("eval_model") = py::none(), py::arg("num_threads") = 1,
           py::arg("memory_budget") = py::none(), py::arg("cache_frozen_prefix") = py::none())
      .def("frozen_prefix_cache",
           [](SharedSession& s) {
             const FrozenPrefixStats stats = s.session().frozen_prefix_stats();
             py::dict cache;
             cache["samples"] = stats.cached_samples;
             cache["bytes"] = stats.cache_bytes;
             cache["hits"] = stats.hits;
             cache["misses"] = stats.misses;
             return cache;
           })
      .def("memory_plan",
           [](SharedSession& s) {
             py::dict plan;
             plan["arena_bytes"] = s.session().training_arena_bytes();
             plan["recomputed_values"] = s.session().recomputed_values();
             return plan;
           })
      .def("attach_optimizer", &SharedSession::AttachOptimizer, py::arg("optimizer_model"))
      .def("train_step", [](SharedSession& s, const py::sequence& inputs) { return s.Step(true, inputs); })
      .def("eval_step", [](SharedSession& s, const py::sequence& inputs) { return s.Step(false, inputs); })
      .def("lazy_reset_grad", &SharedSession::LazyResetGrad)
      .def("optimizer_step", &SharedSession::OptimizerStep)
      .def("get_learning_rate", [](SharedSession& s) { return s.session().GetLearningRate(); })
      .def("set_learning_rate", [](SharedSession& s, float lr) { s.session().SetLearningRate(lr); })
      .def("register_linear_lr_scheduler",
           [](SharedSession& s, int64_t warmup, int64_t total, float initial_lr) {
             s.session().RegisterLinearLRScheduler(warmup, total, initial_lr);
           })
      .def("scheduler_step", [](SharedSession& s) { s.session().SchedulerStep(); })
      .def("gradient",
           [](SharedSession& s, const std::string& name) {
             return ToArray(s.session().GetGradient(name), "gradient of '" + name + "'");
           })
      .def("get_parameters_size",
           [](SharedSession& s, bool trainable_only) { return s.session().GetParametersSize(trainable_only); })
      .def("copy_parameters_to_buffer", &SharedSession::CopyParametersToBuffer, py::arg("trainable_only"))
      .def("copy_buffer_to_parameters", &SharedSession::CopyBufferToParameters, py::arg("buffer"),
           py::arg("trainable_only"))
      .def("input_names",
           [](SharedSession& s, bool training) {
             return training ? s.session().TrainingInputNames() : s.session().EvalInputNames();
           })
      .def("output_names",
           [](SharedSession& s, bool training) {
             return training ? s.session().TrainingOutputNames() : s.session().EvalOutputNames();
           })
      .def("export_model_for_inference",
           [](SharedSession& s, const std::string& path, const std::vector<std::string>& output_names) {
             s.session().ExportModelForInference(path, output_names);
           });
}
