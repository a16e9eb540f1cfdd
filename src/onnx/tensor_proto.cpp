#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "core/string_tensor.hpp"
#include "onnx/proto.hpp"

namespace edgetrain::onnx_proto {

namespace {

std::string ReadExternalData(const onnxpb::TensorProto& proto, const std::string& base_dir, const std::string& what,
                             uint64_t expected_bytes) {
  std::string location;
  int64_t offset = 0, length = -1;
  auto parse = [&](const std::string& key, const std::string& text) {
    int64_t value = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    ET_CHECK(error == std::errc() && end == text.data() + text.size() && value >= 0, ErrorCode::kInvalidModel, what,
             ": external data ", key, " '", text, "' is not a non-negative integer");
    return value;
  };
  for (const auto& kv : proto.external_data()) {
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") offset = parse("offset", kv.value());
    else if (kv.key() == "length") length = parse("length", kv.value());
  }
  ET_CHECK(!location.empty(), ErrorCode::kInvalidModel, what, ": external data has no location");
  ET_CHECK(location.find("..") == std::string::npos && location[0] != '/', ErrorCode::kInvalidModel, what,
           ": external data location '", location, "' must be a relative path inside the model's directory");
  std::string path = base_dir + "/" + location;
  {  // symbolic links must not lead out of the model's directory either
    namespace fs = std::filesystem;
    std::error_code error;
    const fs::path dir = fs::weakly_canonical(base_dir, error), file = fs::weakly_canonical(path, error);
    const auto [dir_end, file_it] = std::mismatch(dir.begin(), dir.end(), file.begin(), file.end());
    ET_CHECK(!error && dir_end == dir.end(), ErrorCode::kInvalidModel, what, ": external data location '", location,
             "' leads out of the model's directory (to '", file.string(), "')");
  }
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  ET_CHECK(file.good(), ErrorCode::kIoError, what, ": cannot open external data file '", path, "'");
  int64_t file_size = static_cast<int64_t>(file.tellg());
  if (length < 0) length = static_cast<int64_t>(expected_bytes);
  ET_CHECK(static_cast<uint64_t>(length) == expected_bytes, ErrorCode::kInvalidModel, what, ": external data length ",
           length, " does not match the ", expected_bytes, " bytes its shape needs");
  ET_CHECK(length <= file_size && offset <= file_size - length, ErrorCode::kInvalidModel, what, ": external data [", offset,
           ", ", offset + length, ") is outside '", path, "' (", file_size, " bytes)");
  std::string bytes(static_cast<size_t>(length), '\0');
  file.seekg(offset);
  file.read(bytes.data(), length);
  ET_CHECK(file.good(), ErrorCode::kIoError, what, ": failed reading external data from '", path, "'");
  return bytes;
}

template <typename Field, typename T>
void CopyField(const Field& field, Tensor& t, const std::string& what) {
  ET_CHECK(static_cast<int64_t>(field.size()) == t.numel(), ErrorCode::kInvalidModel, what, ": holds ", field.size(),
           " values but its shape ", ShapeToString(t.shape()), " needs ", t.numel());
  T* out = static_cast<T*>(t.raw());
  for (size_t i = 0; i < field.size(); ++i) out[i] = static_cast<T>(field[i]);
}

// Strings live in string_data only (ONNX); their count and total size are checked before the tensor is made.
Tensor StringTensorFromProto(const onnxpb::TensorProto& proto, const Shape& shape, int64_t numel,
                             const std::string& what) {
  ET_CHECK(proto.data_location() != onnxpb::TensorProto::EXTERNAL && !proto.has_raw_data(), ErrorCode::kInvalidModel,
           what, ": a string tensor keeps its strings in string_data, not in raw or external data");
  ET_CHECK(proto.float_data_size() + proto.int32_data_size() + proto.int64_data_size() + proto.double_data_size() +
                   proto.uint64_data_size() == 0,
           ErrorCode::kInvalidModel, what, ": a string tensor holds numeric data fields");
  ET_CHECK(static_cast<int64_t>(proto.string_data_size()) == numel, ErrorCode::kInvalidModel, what, ": holds ",
           proto.string_data_size(), " strings but its shape ", ShapeToString(shape), " needs ", numel);
  uint64_t bytes = 0;
  for (const std::string& s : proto.string_data()) bytes += s.size();
  ET_CHECK(bytes <= kMaxTensorBytes, ErrorCode::kResourceExhausted, what, ": its strings hold ", bytes,
           " bytes, more than the limit of ", kMaxTensorBytes);
  Tensor t(DataType::kString, shape, what);
  std::string* out = t.data<std::string>();
  for (int64_t i = 0; i < numel; ++i) out[i] = proto.string_data(static_cast<int>(i));
  return t;
}

}  // namespace

uint64_t CheckedTensorBytes(const onnxpb::TensorProto& proto, const std::string& what) {
  ET_CHECK(IsKnownDataType(proto.data_type()), ErrorCode::kNotImplemented, what, ": unsupported data type ",
           proto.data_type());
  const DataType dtype = static_cast<DataType>(proto.data_type());
  const Shape shape(proto.dims().begin(), proto.dims().end());
  for (int64_t d : shape)
    ET_CHECK(d >= 0, ErrorCode::kInvalidModel, what, ": negative dimension in shape ", ShapeToString(shape));
  const int64_t numel = NumElements(shape);
  if (dtype == DataType::kString) return 0;
  const uint64_t bytes = static_cast<uint64_t>(numel) * DataTypeSize(dtype);
  ET_CHECK(numel == 0 || bytes / DataTypeSize(dtype) == static_cast<uint64_t>(numel), ErrorCode::kResourceExhausted,
           what, ": shape ", ShapeToString(shape), " overflows");
  ET_CHECK(bytes <= kMaxTensorBytes, ErrorCode::kResourceExhausted, what, ": shape ", ShapeToString(shape),
           " needs ", bytes, " bytes, more than the limit of ", kMaxTensorBytes);
  return bytes;
}

void CheckRawDataSize(const onnxpb::TensorProto& proto, const std::string& what) {
  if (!proto.has_raw_data() || proto.data_location() == onnxpb::TensorProto::EXTERNAL) return;
  if (!IsKnownDataType(proto.data_type())) return;  // refused where it is read (TensorFromProto), if it is
  const uint64_t bytes = CheckedTensorBytes(proto, what);
  const DataType dtype = static_cast<DataType>(proto.data_type());
  ET_CHECK(dtype != DataType::kString, ErrorCode::kInvalidModel, what,
           ": a string tensor keeps its strings in string_data, not in raw or external data");
  ET_CHECK(proto.raw_data().size() == bytes, ErrorCode::kInvalidModel, what, ": has ", proto.raw_data().size(),
           " bytes of data but its shape ", ShapeToString(Shape(proto.dims().begin(), proto.dims().end())), " of ",
           DataTypeName(dtype), " needs ", bytes);
}

Tensor TensorFromProto(const onnxpb::TensorProto& proto, const std::string& base_dir, const std::string& what) {
  const uint64_t bytes = CheckedTensorBytes(proto, what);
  const DataType dtype = static_cast<DataType>(proto.data_type());
  const Shape shape(proto.dims().begin(), proto.dims().end());
  const int64_t numel = NumElements(shape);
  if (dtype == DataType::kString) return StringTensorFromProto(proto, shape, numel, what);
  bool external = proto.data_location() == onnxpb::TensorProto::EXTERNAL;
  std::string external_bytes;
  const std::string* raw = nullptr;
  if (external) {
    external_bytes = ReadExternalData(proto, base_dir, what, bytes);
    raw = &external_bytes;
  } else if (proto.has_raw_data()) {
    CheckRawDataSize(proto, what);  // before allocating
    raw = &proto.raw_data();
  }
  if (raw) {
    Tensor t(dtype, shape, what);
    if (bytes) std::memcpy(t.raw(), raw->data(), bytes);
    return t;
  }
  size_t present = static_cast<size_t>(proto.float_data_size() + proto.int32_data_size() + proto.int64_data_size() +
                                       proto.double_data_size() + proto.uint64_data_size());
  ET_CHECK(present == static_cast<size_t>(numel), ErrorCode::kInvalidModel, what, ": holds ", present,
           " values but its shape ", ShapeToString(shape), " needs ", numel);
  Tensor t(dtype, shape, what);
  switch (dtype) {
    case DataType::kFloat32: CopyField<decltype(proto.float_data()), float>(proto.float_data(), t, what); break;
    case DataType::kFloat64: CopyField<decltype(proto.double_data()), double>(proto.double_data(), t, what); break;
    case DataType::kInt64: CopyField<decltype(proto.int64_data()), int64_t>(proto.int64_data(), t, what); break;
    case DataType::kUint64: CopyField<decltype(proto.uint64_data()), uint64_t>(proto.uint64_data(), t, what); break;
    case DataType::kUint32: CopyField<decltype(proto.uint64_data()), uint32_t>(proto.uint64_data(), t, what); break;
    case DataType::kInt32: CopyField<decltype(proto.int32_data()), int32_t>(proto.int32_data(), t, what); break;
    case DataType::kInt16: CopyField<decltype(proto.int32_data()), int16_t>(proto.int32_data(), t, what); break;
    case DataType::kInt8: CopyField<decltype(proto.int32_data()), int8_t>(proto.int32_data(), t, what); break;
    case DataType::kUint16: CopyField<decltype(proto.int32_data()), uint16_t>(proto.int32_data(), t, what); break;
    case DataType::kUint8: CopyField<decltype(proto.int32_data()), uint8_t>(proto.int32_data(), t, what); break;
    case DataType::kBool: CopyField<decltype(proto.int32_data()), bool>(proto.int32_data(), t, what); break;
    case DataType::kFloat16:
    case DataType::kBFloat16: {  // bit patterns stored in int32_data
      ET_CHECK(proto.int32_data_size() == numel, ErrorCode::kInvalidModel, what, ": holds ", proto.int32_data_size(),
               " values but needs ", numel);
      auto* out = static_cast<uint16_t*>(t.raw());
      for (int64_t i = 0; i < numel; ++i) out[i] = static_cast<uint16_t>(proto.int32_data(static_cast<int>(i)));
      break;
    }
    default: Fail(ErrorCode::kNotImplemented, what, ": unsupported data type ", DataTypeName(dtype));
  }
  return t;
}

void TensorToProto(const Tensor& tensor, const std::string& name, onnxpb::TensorProto* proto) {
  *proto = onnxpb::TensorProto();
  proto->set_name(name);
  proto->set_data_type(static_cast<int32_t>(tensor.dtype()));
  for (int64_t d : tensor.shape()) proto->add_dims(d);
  if (tensor.dtype() == DataType::kString) {
    const std::string* strings = tensor.data<std::string>();
    for (int64_t i = 0; i < tensor.numel(); ++i) proto->add_string_data(strings[i]);
    return;
  }
  proto->set_raw_data(tensor.raw(), tensor.nbytes());
}

ValueInfo ValueInfoFromProto(const onnxpb::ValueInfoProto& proto) {
  ValueInfo info;
  info.name = proto.name();
  const onnxpb::TypeProto* type = &proto.type();
  if (type->has_optional_type()) {
    info.is_optional = true;
    type = &type->optional_type().elem_type();
    ET_CHECK(type->has_tensor_type() || type->has_sequence_type(), ErrorCode::kNotImplemented, "value '",
             proto.name(), "' is an optional of neither a tensor nor a sequence, which is not supported");
  }
  if (type->has_sequence_type()) {
    info.is_sequence = true;
    type = &type->sequence_type().elem_type();
  }
  if (type->has_tensor_type()) {
    const auto& tt = type->tensor_type();
    info.dtype = IsKnownDataType(tt.elem_type()) ? static_cast<DataType>(tt.elem_type()) : DataType::kUndefined;
    if (tt.has_shape()) {
      info.has_shape = true;
      for (const auto& d : tt.shape().dim()) {
        Dim dim;
        if (d.has_dim_value()) dim.value = d.dim_value();
        else if (d.has_dim_param()) dim.symbol = d.dim_param();
        info.shape.push_back(dim);
      }
    }
  }
  return info;
}

void ValueInfoToProto(const ValueInfo& info, onnxpb::ValueInfoProto* proto) {
  proto->set_name(info.name);
  onnxpb::TypeProto* type = info.is_optional ? proto->mutable_type()->mutable_optional_type()->mutable_elem_type()
                                           : proto->mutable_type();
  onnxpb::TypeProto_Tensor* tt = info.is_sequence ? type->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()
                                                : type->mutable_tensor_type();
  tt->set_elem_type(static_cast<int32_t>(info.dtype));
  if (info.has_shape) {
    auto* shape = tt->mutable_shape();
    for (const auto& d : info.shape) {
      auto* dim = shape->add_dim();
      if (d.known()) dim->set_dim_value(d.value);
      else if (!d.symbol.empty()) dim->set_dim_param(d.symbol);
    }
  }
}

}  // namespace edgetrain::onnx_proto
