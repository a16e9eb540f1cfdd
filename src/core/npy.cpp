#include "core/npy.hpp"

#include <charconv>
#include <cstdio>
#include <fstream>
#include <map>

namespace edgetrain {

namespace {

const std::map<std::string, DataType>& DescrTypes() {
  static const std::map<std::string, DataType> types = {
      {"<f4", DataType::kFloat32}, {"<f8", DataType::kFloat64}, {"<f2", DataType::kFloat16},
      {"<i8", DataType::kInt64},   {"<i4", DataType::kInt32},   {"<i2", DataType::kInt16},
      {"|i1", DataType::kInt8},    {"|u1", DataType::kUint8},   {"<u2", DataType::kUint16},
      {"<u4", DataType::kUint32},  {"<u8", DataType::kUint64},  {"|b1", DataType::kBool}};
  return types;
}

// Value of `key` in the header dict, e.g. 'descr': '<f4' -> <f4.
std::string HeaderField(const std::string& header, const std::string& key, const std::string& path) {
  size_t at = header.find("'" + key + "'");
  ET_CHECK(at != std::string::npos, ErrorCode::kInvalidArgument, "'", path, "': .npy header has no '", key, "'");
  size_t colon = header.find(':', at);
  size_t begin = colon == std::string::npos ? colon : header.find_first_not_of(" ", colon + 1);
  ET_CHECK(begin != std::string::npos, ErrorCode::kInvalidArgument, "'", path, "': .npy header field '", key,
           "' has no value");
  if (header[begin] == '\'') return header.substr(begin + 1, header.find('\'', begin + 1) - begin - 1);
  if (header[begin] == '(') return header.substr(begin + 1, header.find(')', begin) - begin - 1);
  size_t end = header.find_first_of(",}", begin);
  return header.substr(begin, end - begin);
}

}  // namespace

Tensor ReadNpy(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  ET_CHECK(file.good(), ErrorCode::kIoError, "cannot open .npy file '", path, "'");
  char magic[8];
  file.read(magic, 8);
  ET_CHECK(file.good() && std::string(magic, 6) == "\x93NUMPY", ErrorCode::kInvalidArgument, "'", path,
           "' is not a .npy file");
  uint32_t header_len = 0;
  unsigned char len_bytes[4] = {0, 0, 0, 0};
  int len_size = magic[6] == 1 ? 2 : 4;
  file.read(reinterpret_cast<char*>(len_bytes), len_size);
  for (int i = len_size - 1; i >= 0; --i) header_len = header_len * 256 + len_bytes[i];
  ET_CHECK(header_len < (1u << 20), ErrorCode::kInvalidArgument, "'", path, "': .npy header is too long");
  std::string header(header_len, '\0');
  file.read(header.data(), header_len);
  ET_CHECK(file.good(), ErrorCode::kInvalidArgument, "'", path, "': truncated .npy header");

  std::string descr = HeaderField(header, "descr", path);
  auto type = DescrTypes().find(descr);
  ET_CHECK(type != DescrTypes().end(), ErrorCode::kNotImplemented, "'", path, "': .npy element type '", descr,
           "' is not supported");
  ET_CHECK(HeaderField(header, "fortran_order", path) == "False", ErrorCode::kNotImplemented, "'", path,
           "': Fortran-ordered .npy files are not supported");
  Shape shape;
  std::string dims = HeaderField(header, "shape", path);
  size_t pos = 0;
  while (pos < dims.size()) {
    size_t end = dims.find(',', pos);
    std::string item = dims.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    const size_t first = item.find_first_not_of(" "), last = item.find_last_not_of(" ");
    if (first != std::string::npos) {
      int64_t dim = -1;
      auto [stop, error] = std::from_chars(item.data() + first, item.data() + last + 1, dim);
      ET_CHECK(error == std::errc() && stop == item.data() + last + 1 && dim >= 0, ErrorCode::kInvalidArgument, "'",
               path, "': .npy shape '", dims, "' is not a tuple of non-negative integers");
      shape.push_back(dim);
    }
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  // Size the read from the file before allocating, so a lying header cannot force a huge allocation.
  std::streampos data_start = file.tellg();
  file.seekg(0, std::ios::end);
  uint64_t available = static_cast<uint64_t>(file.tellg() - data_start);
  const uint64_t elements = static_cast<uint64_t>(NumElements(shape));
  uint64_t needed = elements * DataTypeSize(type->second);
  ET_CHECK(elements <= available / DataTypeSize(type->second) && available >= needed, ErrorCode::kInvalidArgument, "'", path, "': holds ", available,
           " bytes of data but its shape ", ShapeToString(shape), " needs ", needed);
  file.seekg(data_start);
  Tensor t(type->second, shape, path);
  file.read(static_cast<char*>(t.raw()), static_cast<std::streamsize>(t.nbytes()));
  return t;
}

void WriteNpy(const std::string& path, const Tensor& tensor) {
  std::string descr;
  for (const auto& [d, type] : DescrTypes())
    if (type == tensor.dtype()) descr = d;
  ET_CHECK(!descr.empty(), ErrorCode::kNotImplemented, "cannot write ", DataTypeName(tensor.dtype()), " to .npy");
  std::string shape = "(";
  for (size_t i = 0; i < tensor.rank(); ++i) shape += std::to_string(tensor.dim(i)) + (tensor.rank() == 1 ? "," : i + 1 < tensor.rank() ? ", " : "");
  shape += ")";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string tmp = path + ".tmp";
  {
    std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
    ET_CHECK(file.good(), ErrorCode::kIoError, "cannot write '", path, "'");
    file.write("\x93NUMPY\x01\x00", 8);
    uint16_t len = static_cast<uint16_t>(header.size());
    char len_bytes[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
    file.write(len_bytes, 2);
    file.write(header.data(), static_cast<std::streamsize>(header.size()));
    file.write(static_cast<const char*>(tensor.raw()), static_cast<std::streamsize>(tensor.nbytes()));
    file.flush();
    ET_CHECK(file.good(), ErrorCode::kIoError, "failed writing '", path, "'");
  }
  ET_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, ErrorCode::kIoError, "cannot rename '", tmp, "' to '", path,
           "'");
}

}  // namespace edgetrain
