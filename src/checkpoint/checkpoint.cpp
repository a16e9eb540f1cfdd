#include "checkpoint/checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__unix__) && !defined(__EMSCRIPTEN__)
#include <sys/mman.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>

#include "checkpoint/odtc_generated.h"
#include "core/atomic_file.hpp"

namespace edgetrain {
namespace {

constexpr int32_t kWrittenVersion = 2;
constexpr size_t kVerifierMaxDepth = 64;
constexpr size_t kVerifierMaxTables = size_t{1} << 26;

std::string ExternalDataPath(const std::string& path) { return path + ".data"; }

std::string SystemError() { return std::strerror(errno); }

// ---------------------------------------------------------------------------------------------
// Files

// Opens `path` for reading and returns its descriptor and size; kIoError names `path` and says why.
int OpenForReading(const std::string& path, const char* what, size_t& size) {
  std::error_code ec;
  ET_CHECK(!std::filesystem::is_directory(path, ec), ErrorCode::kIoError, what, " '", path,
           "' is a directory (an old ORT checkpoint directory?); expected an ODTC checkpoint file");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ET_CHECK(fd >= 0, ErrorCode::kIoError, "cannot open ", what, " '", path, "': ", SystemError());
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    std::string reason = SystemError();
    ::close(fd);
    Fail(ErrorCode::kIoError, "cannot read ", what, " '", path, "': ", reason);
  }
  size = static_cast<size_t>(info.st_size);
  return fd;
}

// Reads n bytes at `offset` of the open file, or fails naming `path` (a file that shrank while read, too).
void ReadFully(int fd, size_t offset, size_t n, uint8_t* to, const char* what, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd, to + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    ET_CHECK(got > 0, ErrorCode::kIoError, "cannot read ", what, " '", path, "': ",
             got == 0 ? std::string("file shrank while reading") : SystemError());
    done += static_cast<size_t>(got);
  }
}

// Reads a whole file; kIoError names `path` and says why.
std::vector<uint8_t> ReadWholeFile(const std::string& path, const char* what) {
  size_t size = 0;
  const int fd = OpenForReading(path, what, size);
  std::vector<uint8_t> bytes(size);
  try {
    ReadFully(fd, 0, size, bytes.data(), what, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return bytes;
}

// A checkpoint file read whole into memory that its tensors are then copied out of. Each tensor's bytes are handed
// back to the system once copied (whole pages of them), so that a load holds the file and its tensors at once only
// for one tensor, not for all of them: peak RSS about the file's size, not twice it.
class CheckpointFile {
 public:
  CheckpointFile(const std::string& path, const char* what) : path_(path) {
#if defined(__unix__) && !defined(__EMSCRIPTEN__)
    fd_ = OpenForReading(path, what, size_);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) {
        ::close(fd_);
        Fail(ErrorCode::kResourceExhausted, "cannot read ", what, " '", path, "': out of memory for ", size_, " bytes");
      }
      data_ = static_cast<uint8_t*>(p);
      try {
        ReadFully(fd_, 0, size_, data_, what, path_);
      } catch (...) {
        Close();
        throw;
      }
    }
#else
    bytes_ = ReadWholeFile(path, what);
    data_ = bytes_.data();
    size_ = bytes_.size();
#endif
  }
  CheckpointFile(const CheckpointFile&) = delete;
  CheckpointFile& operator=(const CheckpointFile&) = delete;
  ~CheckpointFile() { Close(); }

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

  // Copies the n bytes at `from` (inside the file's image) to `to`, then returns their pages to the system. Bytes
  // whose pages went back already (two tensors sharing their data) are read from the file again.
  void CopyOut(const uint8_t* from, size_t n, void* to) {
#if defined(__unix__) && !defined(__EMSCRIPTEN__)
    const auto begin = reinterpret_cast<uintptr_t>(from), end = begin + n;
    auto next = released_.upper_bound(begin);
    const bool overlaps = (next != released_.end() && next->first < end) ||
                          (next != released_.begin() && std::prev(next)->second > begin);
    if (overlaps) {
      ReadFully(fd_, static_cast<size_t>(from - data_), n, static_cast<uint8_t*>(to), "checkpoint", path_);
      return;
    }
    std::memcpy(to, from, n);
    const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
    if (first < last && ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) == 0)
      released_.emplace(first, last);
#else
    std::memcpy(to, from, n);
#endif
  }

 private:
  void Close() {
#if defined(__unix__) && !defined(__EMSCRIPTEN__)
    if (data_) ::munmap(data_, size_);
    if (fd_ >= 0) ::close(fd_);
    data_ = nullptr;
    fd_ = -1;
#endif
  }

#if defined(__unix__) && !defined(__EMSCRIPTEN__)
  int fd_ = -1;
  std::map<uintptr_t, uintptr_t> released_;  // page ranges [first, second) handed back, by first
#else
  std::vector<uint8_t> bytes_;
#endif
  std::string path_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Random access to `<checkpoint>.data`, opened on first use.
class ExternalDataReader {
 public:
  explicit ExternalDataReader(std::string path) : path_(std::move(path)) {}
  ExternalDataReader(const ExternalDataReader&) = delete;
  ExternalDataReader& operator=(const ExternalDataReader&) = delete;
  ~ExternalDataReader() {
    if (fd_ >= 0) ::close(fd_);
  }

  void Read(int64_t offset, size_t nbytes, void* out, const std::string& what) {
    Open();
    ET_CHECK(offset >= 0 && static_cast<uint64_t>(offset) <= size_ && nbytes <= size_ - static_cast<uint64_t>(offset),
             ErrorCode::kInvalidModel, what, ": external data at offset ", offset, " (", nbytes,
             " bytes) lies outside '", path_, "' (", size_, " bytes)");
    auto* dst = static_cast<uint8_t*>(out);
    size_t done = 0;
    while (done < nbytes) {
      ssize_t n = ::pread(fd_, dst + done, nbytes - done, static_cast<off_t>(offset + static_cast<int64_t>(done)));
      if (n < 0 && errno == EINTR) continue;
      ET_CHECK(n > 0, ErrorCode::kIoError, "cannot read external data file '", path_, "': ",
               n == 0 ? std::string("unexpected end of file") : SystemError());
      done += static_cast<size_t>(n);
    }
  }

 private:
  void Open() {
    if (fd_ >= 0) return;
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    ET_CHECK(fd_ >= 0, ErrorCode::kIoError, "cannot open external data file '", path_, "': ", SystemError());
    struct stat info {};
    ET_CHECK(::fstat(fd_, &info) == 0, ErrorCode::kIoError, "cannot read external data file '", path_, "': ",
             SystemError());
    size_ = static_cast<uint64_t>(info.st_size);
  }

  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Reading

struct ReadContext {
  const std::string& source;
  ExternalDataReader* external;  // null unless the checkpoint keeps its data in `<path>.data`
  CheckpointFile* file;          // where the bytes came from, when read from a file (else null)
};

std::string Printable(const uint8_t* bytes, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (bytes[i] >= 0x20 && bytes[i] < 0x7f) {
      out += static_cast<char>(bytes[i]);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[bytes[i] >> 4];
      out += kHex[bytes[i] & 15];
    }
  }
  return out;
}

DataType ReadDataType(odtc::TensorDataType stored, const std::string& what) {
  auto value = static_cast<int32_t>(stored);
  ET_CHECK(value != 0, ErrorCode::kInvalidModel, what, " has no element type");
  std::string name = odtc::EnumNameTensorDataType(stored);
  if (name.empty()) name = std::to_string(value);
  ET_CHECK(value != static_cast<int32_t>(odtc::TensorDataType::STRING), ErrorCode::kNotImplemented, what,
           " is a string tensor; edgetrain checkpoints hold numeric tensors only");
  ET_CHECK(IsKnownDataType(value), ErrorCode::kNotImplemented, what, " has element type ", name,
           ", which edgetrain does not support");
  return static_cast<DataType>(value);
}

std::string TensorName(const odtc::Tensor& stored, const std::string& where) {
  ET_CHECK(stored.name() != nullptr && stored.name()->size() > 0, ErrorCode::kInvalidModel, where,
           " holds a tensor without a name");
  return stored.name()->str();
}

// A file's int64 vector may sit 4-byte aligned only (the verifier checks no more): copied, not read in place.
std::vector<int64_t> ReadDims(const flatbuffers::Vector<int64_t>* dims) {
  std::vector<int64_t> out(dims != nullptr ? dims->size() : 0);
  if (!out.empty()) std::memcpy(out.data(), dims->Data(), out.size() * sizeof(int64_t));
  return out;
}

Tensor ReadTensor(const odtc::Tensor& stored, const std::string& what, const ReadContext& ctx) {
  DataType dtype = ReadDataType(stored.data_type(), what);
  Shape shape;
  uint64_t numel = 1;
  if (stored.dims() != nullptr) {
    for (int64_t d : ReadDims(stored.dims())) {
      ET_CHECK(d >= 0, ErrorCode::kInvalidModel, what, " has a negative dimension ", d);
      ET_CHECK(d == 0 || numel <= std::numeric_limits<uint64_t>::max() / 8 / static_cast<uint64_t>(d),
               ErrorCode::kInvalidModel, what, " has too many elements");
      numel *= static_cast<uint64_t>(d);
      shape.push_back(d);
    }
  }
  uint64_t expected = numel * DataTypeSize(dtype);
  if (ctx.external != nullptr && stored.raw_data() == nullptr) {
    Tensor out(dtype, shape, what);
    ctx.external->Read(stored.external_data_offset(), out.nbytes(), out.raw(), what);
    return out;
  }
  size_t have = stored.raw_data() == nullptr ? 0 : stored.raw_data()->size();
  ET_CHECK(have == expected, ErrorCode::kInvalidModel, what, ": raw_data holds ", have, " bytes but a ",
           DataTypeName(dtype), " tensor of shape ", ShapeToString(shape), " needs ", expected);
  Tensor out(dtype, shape, what);
  if (have == 0) return out;
  if (ctx.file) ctx.file->CopyOut(stored.raw_data()->data(), have, out.raw());
  else std::memcpy(out.raw(), stored.raw_data()->data(), have);
  return out;
}

using StoredTensors = flatbuffers::Vector<flatbuffers::Offset<odtc::Tensor>>;

void ReadParameters(const StoredTensors* list, const char* kind, const ReadContext& ctx, Checkpoint& out,
                    std::map<std::string, Tensor>& tensors, std::map<std::string, DataType>& nominal) {
  if (list == nullptr) return;
  std::string where = "checkpoint '" + ctx.source + "'";
  for (const odtc::Tensor* stored : *list) {
    std::string name = TensorName(*stored, where);
    std::string what = where + ": " + kind + " parameter '" + name + "'";
    ET_CHECK(!out.trainable.count(name) && !out.frozen.count(name) && !out.nominal_trainable.count(name) &&
                 !out.nominal_frozen.count(name),
             ErrorCode::kInvalidModel, what, " appears more than once");
    if (out.is_nominal) nominal.emplace(name, ReadDataType(stored->data_type(), what));
    else tensors.emplace(name, ReadTensor(*stored, what, ctx));
  }
}

OptimizerState ReadOptimizerGroup(const odtc::OptimizerGroup& group, const ReadContext& ctx) {
  OptimizerState state;
  std::string where = "checkpoint '" + ctx.source + "'";
  state.group_name = group.group_name() == nullptr ? "" : group.group_name()->str();
  state.step = group.step();
  state.initial_learning_rate = group.initial_learning_rate();
  if (group.optimizer_states() == nullptr) return state;
  for (const odtc::ParameterOptimizerState* param : *group.optimizer_states()) {
    ET_CHECK(param->param_name() != nullptr && param->param_name()->size() > 0, ErrorCode::kInvalidModel, where,
             ": optimizer group '", state.group_name, "' holds a state without a parameter name");
    std::string name = param->param_name()->str();
    ET_CHECK(!state.momentums.count(name), ErrorCode::kInvalidModel, where, ": optimizer state of parameter '",
             name, "' appears more than once");
    std::vector<Tensor>& momentums = state.momentums[name];
    if (param->momentums() == nullptr) continue;
    std::vector<std::pair<std::string, Tensor>> named;
    for (const odtc::Tensor* stored : *param->momentums()) {
      std::string what = where + ": momentum " + std::to_string(named.size()) + " of parameter '" + name + "'";
      named.emplace_back(stored->name() == nullptr ? "" : stored->name()->str(), ReadTensor(*stored, what, ctx));
    }
    // ORT names them momentum0, momentum1 (first and second moment) but stores them in hash order.
    std::stable_sort(named.begin(), named.end(), [](const auto& a, const auto& b) {
      return a.first.size() != b.first.size() ? a.first.size() < b.first.size() : a.first < b.first;
    });
    for (auto& entry : named) momentums.push_back(std::move(entry.second));
  }
  return state;
}

void ReadProperties(const odtc::PropertyBag& bag, const std::string& source, Checkpoint& out) {
  auto add = [&](const flatbuffers::String* name, PropertyValue value) {
    ET_CHECK(name != nullptr && name->size() > 0, ErrorCode::kInvalidModel, "checkpoint '", source,
             "' holds a property without a name");
    ET_CHECK(out.properties.emplace(name->str(), std::move(value)).second, ErrorCode::kInvalidModel,
             "checkpoint '", source, "': property '", name->str(), "' appears more than once");
  };
  if (bag.ints() != nullptr)
    for (const odtc::IntProperty* p : *bag.ints()) add(p->name(), p->value());
  if (bag.floats() != nullptr)
    for (const odtc::FloatProperty* p : *bag.floats()) add(p->name(), p->value());
  if (bag.strings() != nullptr)
    for (const odtc::StringProperty* p : *bag.strings())
      add(p->name(), p->value() == nullptr ? std::string() : p->value()->str());
}

// `external_data_path` is null when loading from memory.
Checkpoint ParseCheckpoint(const uint8_t* data, size_t size, const std::string& source,
                           const std::string* external_data_path, CheckpointFile* file = nullptr) {
  constexpr size_t kHeaderBytes = sizeof(flatbuffers::uoffset_t) + flatbuffers::kFileIdentifierLength;
  ET_CHECK(size >= kHeaderBytes, ErrorCode::kInvalidModel, "checkpoint '", source, "' is truncated (", size,
           " bytes)");
  ET_CHECK(odtc::CheckpointBufferHasIdentifier(data), ErrorCode::kInvalidModel, "checkpoint '", source,
           "' is not an ODTC checkpoint (file identifier '",
           Printable(data + sizeof(flatbuffers::uoffset_t), flatbuffers::kFileIdentifierLength),
           "', expected 'ODTC')");
  ET_CHECK(size < FLATBUFFERS_MAX_BUFFER_SIZE, ErrorCode::kInvalidModel, "checkpoint '", source, "' is ", size,
           " bytes, larger than a FlatBuffer can be");
  flatbuffers::Verifier verifier(data, size, kVerifierMaxDepth, kVerifierMaxTables);
  ET_CHECK(odtc::VerifyCheckpointBuffer(verifier), ErrorCode::kInvalidModel, "checkpoint '", source,
           "' is corrupt or truncated (FlatBuffers verification failed)");

  const odtc::Checkpoint* root = odtc::GetCheckpoint(data);
  Checkpoint out;
  out.version = root->version();
  ET_CHECK(out.version == 1 || out.version == 2, ErrorCode::kInvalidModel, "checkpoint '", source,
           "' has format version ", out.version, "; edgetrain reads versions 1 and 2");

  std::optional<ExternalDataReader> external;
  if (const odtc::ModuleState* module = root->module_state()) {
    out.is_nominal = out.version >= 2 && module->is_nominal_state();
    if (module->has_external_data() && !out.is_nominal) {
      ET_CHECK(external_data_path != nullptr, ErrorCode::kInvalidArgument, "checkpoint '", source,
               "' keeps its tensor data in an external file; load it from its path");
      external.emplace(*external_data_path);
    }
    ReadContext ctx{source, external ? &*external : nullptr, file};
    ReadParameters(module->requires_grad_params(), "trainable", ctx, out, out.trainable, out.nominal_trainable);
    ReadParameters(module->frozen_params(), "frozen", ctx, out, out.frozen, out.nominal_frozen);
  }
  if (const auto* groups = root->optimizer_groups(); groups != nullptr && groups->size() > 0) {
    ET_CHECK(groups->size() == 1, ErrorCode::kNotImplemented, "checkpoint '", source, "' has ", groups->size(),
             " optimizer groups; edgetrain supports one");
    ReadContext ctx{source, external ? &*external : nullptr, file};
    out.optimizer = ReadOptimizerGroup(*groups->Get(0), ctx);
  }
  if (const odtc::PropertyBag* bag = root->property_bag()) ReadProperties(*bag, source, out);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Writing

// Receives tensor bytes when they go to `<checkpoint>.data`; returns each tensor's offset. Without a
// file it only counts, from offset 0, the bytes the tensors will take.
class ExternalDataSink {
 public:
  explicit ExternalDataSink(AtomicFileWriter* file) : file_(file) {}
  int64_t Append(const Tensor& tensor) {
    const uint64_t alignment = DataTypeSize(tensor.dtype()) == 8 ? 8 : 4;
    if (file_) {
      file_->Pad(alignment);
      auto offset = static_cast<int64_t>(file_->position());
      file_->Write(tensor.raw(), tensor.nbytes());
      return offset;
    }
    counted_ = (counted_ + alignment - 1) / alignment * alignment;
    auto offset = static_cast<int64_t>(counted_);
    counted_ += tensor.nbytes();
    return offset;
  }
  uint64_t counted() const { return counted_; }

 private:
  AtomicFileWriter* file_;
  uint64_t counted_ = 0;
};

// The bytes [begin, end) of `<path>.data` that the checkpoint now at `path` reads; nullopt when it
// keeps no external data (or cannot be read: then nothing valid refers to the old data file).
std::optional<std::pair<uint64_t, uint64_t>> LiveExternalRange(const std::string& path) {
  std::vector<uint8_t> bytes;
  try {
    bytes = ReadWholeFile(path, "checkpoint");
  } catch (const Error&) {
    return std::nullopt;
  }
  flatbuffers::Verifier verifier(bytes.data(), bytes.size(), kVerifierMaxDepth, kVerifierMaxTables);
  if (bytes.size() < 8 || !odtc::CheckpointBufferHasIdentifier(bytes.data()) || !odtc::VerifyCheckpointBuffer(verifier))
    return std::nullopt;
  const odtc::Checkpoint* root = odtc::GetCheckpoint(bytes.data());
  const odtc::ModuleState* module = root->module_state();
  if (!module || !module->has_external_data()) return std::nullopt;
  uint64_t begin = UINT64_MAX, end = 0;
  bool bad = false;
  auto add = [&](const flatbuffers::Vector<flatbuffers::Offset<odtc::Tensor>>* tensors) {
    if (!tensors) return;
    for (const odtc::Tensor* t : *tensors) {
      if (t->external_data_offset() < 0) continue;
      uint64_t n = DataTypeSize(ReadDataType(t->data_type(), "tensor"));
      if (t->dims())
        for (int64_t d : ReadDims(t->dims())) {
          if (d < 0 || (d > 0 && n > (uint64_t{1} << 62) / static_cast<uint64_t>(d))) {
            bad = true;
            return;
          }
          n *= static_cast<uint64_t>(d);
        }
      begin = std::min(begin, static_cast<uint64_t>(t->external_data_offset()));
      end = std::max(end, static_cast<uint64_t>(t->external_data_offset()) + n);
    }
  };
  try {
    add(module->requires_grad_params());
    add(module->frozen_params());
    if (root->optimizer_groups())
      for (const odtc::OptimizerGroup* group : *root->optimizer_groups())
        if (group->optimizer_states())
          for (const odtc::ParameterOptimizerState* state : *group->optimizer_states()) add(state->momentums());
  } catch (const Error&) {
    return std::nullopt;
  }
  std::error_code error;
  const uint64_t data_size = std::filesystem::file_size(ExternalDataPath(path), error);
  if (bad || end == 0 || error || end > data_size) return std::nullopt;
  return std::make_pair(begin, end);
}

// Copies bytes [begin, end) of `source` into `file` (which is at offset `begin`).
void CopyFileRange(const std::string& source, uint64_t begin, uint64_t end, AtomicFileWriter& file) {
  int fd = ::open(source.c_str(), O_RDONLY | O_CLOEXEC);
  ET_CHECK(fd >= 0, ErrorCode::kIoError, "cannot read external data file '", source, "': ", SystemError());
  std::vector<uint8_t> chunk(std::min<uint64_t>(end - begin, 1 << 20));
  while (begin < end) {
    ssize_t n = ::pread(fd, chunk.data(), std::min<uint64_t>(chunk.size(), end - begin), static_cast<off_t>(begin));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string reason = n == 0 ? "file is shorter than its checkpoint says" : SystemError();
      ::close(fd);
      Fail(ErrorCode::kIoError, "cannot read external data file '", source, "': ", reason);
    }
    file.Write(chunk.data(), static_cast<size_t>(n));
    begin += static_cast<uint64_t>(n);
  }
  ::close(fd);
}

using TensorOffset = flatbuffers::Offset<odtc::Tensor>;

TensorOffset WriteTensor(flatbuffers::FlatBufferBuilder& fbb, const std::string& name, const Tensor& tensor,
                         const std::string& what, ExternalDataSink* external) {
  ET_CHECK(tensor.defined(), ErrorCode::kInvalidArgument, "cannot save ", what, " '", name,
           "': the tensor holds no data");
  auto name_offset = fbb.CreateString(name);
  auto dims_offset = fbb.CreateVector(tensor.shape().data(), tensor.rank());
  auto dtype = static_cast<odtc::TensorDataType>(tensor.dtype());
  if (external != nullptr) {
    int64_t offset = external->Append(tensor);
    return odtc::CreateTensor(fbb, name_offset, 0, dims_offset, dtype, 0, 0, offset);
  }
  auto raw_offset = fbb.CreateVector(static_cast<const uint8_t*>(tensor.raw()), tensor.nbytes());
  return odtc::CreateTensor(fbb, name_offset, 0, dims_offset, dtype, raw_offset);
}

std::vector<TensorOffset> WriteParameters(flatbuffers::FlatBufferBuilder& fbb, const Checkpoint& c,
                                          const std::map<std::string, Tensor>& tensors,
                                          const std::map<std::string, DataType>& nominal, const char* kind,
                                          ExternalDataSink* external) {
  std::vector<TensorOffset> out;
  if (c.is_nominal) {
    std::map<std::string, DataType> dtypes = nominal;
    for (const auto& [name, tensor] : tensors) dtypes.emplace(name, tensor.dtype());
    for (const auto& [name, dtype] : dtypes) {
      auto name_offset = fbb.CreateString(name);
      out.push_back(odtc::CreateTensor(fbb, name_offset, 0, 0, static_cast<odtc::TensorDataType>(dtype)));
    }
  } else {
    for (const auto& [name, tensor] : tensors) out.push_back(WriteTensor(fbb, name, tensor, kind, external));
  }
  return out;
}

flatbuffers::Offset<odtc::OptimizerGroup> WriteOptimizer(flatbuffers::FlatBufferBuilder& fbb,
                                                         const OptimizerState& state, ExternalDataSink* external) {
  std::vector<flatbuffers::Offset<odtc::ParameterOptimizerState>> params;
  for (const auto& [name, momentums] : state.momentums) {
    std::vector<TensorOffset> tensors;
    for (size_t i = 0; i < momentums.size(); ++i) {  // ORT looks moments up by these names
      tensors.push_back(WriteTensor(fbb, "momentum" + std::to_string(i), momentums[i],
                                    "optimizer state of parameter '" + name + "':", external));
    }
    params.push_back(odtc::CreateParameterOptimizerStateDirect(fbb, name.c_str(), &tensors));
  }
  return odtc::CreateOptimizerGroupDirect(fbb, state.group_name.c_str(), state.step, state.initial_learning_rate,
                                          &params);
}

flatbuffers::Offset<odtc::PropertyBag> WriteProperties(flatbuffers::FlatBufferBuilder& fbb,
                                                       const std::map<std::string, PropertyValue>& properties) {
  std::vector<flatbuffers::Offset<odtc::IntProperty>> ints;
  std::vector<flatbuffers::Offset<odtc::FloatProperty>> floats;
  std::vector<flatbuffers::Offset<odtc::StringProperty>> strings;
  for (const auto& [name, value] : properties) {
    if (const auto* i = std::get_if<int64_t>(&value)) ints.push_back(odtc::CreateIntPropertyDirect(fbb, name.c_str(), *i));
    else if (const auto* f = std::get_if<float>(&value)) floats.push_back(odtc::CreateFloatPropertyDirect(fbb, name.c_str(), *f));
    else strings.push_back(odtc::CreateStringPropertyDirect(fbb, name.c_str(), std::get<std::string>(value).c_str()));
  }
  return odtc::CreatePropertyBagDirect(fbb, ints.empty() ? nullptr : &ints, floats.empty() ? nullptr : &floats,
                                       strings.empty() ? nullptr : &strings);
}

uint64_t TensorBytes(const Checkpoint& c, bool include_optimizer_state) {
  uint64_t total = 0;
  for (const auto& [name, t] : c.trainable) total += t.nbytes();
  for (const auto& [name, t] : c.frozen) total += t.nbytes();
  if (include_optimizer_state && c.optimizer) {
    for (const auto& [name, list] : c.optimizer->momentums)
      for (const Tensor& t : list) total += t.nbytes();
  }
  return total;
}

// A generous bound on what the flatbuffer holds besides tensor bytes.
uint64_t MetadataBytes(const Checkpoint& c) {
  uint64_t total = 4096;
  auto tensor_bytes = [](const std::string& name, const Tensor& t) { return 128 + name.size() + 8 * t.rank(); };
  for (const auto& [name, t] : c.trainable) total += tensor_bytes(name, t);
  for (const auto& [name, t] : c.frozen) total += tensor_bytes(name, t);
  for (const auto& [name, dtype] : c.nominal_trainable) total += 128 + name.size();
  for (const auto& [name, dtype] : c.nominal_frozen) total += 128 + name.size();
  if (c.optimizer) {
    for (const auto& [name, list] : c.optimizer->momentums) {
      total += 64 + name.size();
      for (const Tensor& t : list) total += tensor_bytes(name, t);
    }
  }
  for (const auto& [name, value] : c.properties) {
    total += 64 + name.size();
    if (const auto* s = std::get_if<std::string>(&value)) total += s->size();
  }
  return total;
}

void BuildCheckpoint(flatbuffers::FlatBufferBuilder& fbb, const Checkpoint& c, bool include_optimizer_state,
                     ExternalDataSink* external) {
  auto trainable = WriteParameters(fbb, c, c.trainable, c.nominal_trainable, "trainable parameter", external);
  auto frozen = WriteParameters(fbb, c, c.frozen, c.nominal_frozen, "frozen parameter", external);
  auto module = odtc::CreateModuleStateDirect(fbb, &trainable, &frozen, c.is_nominal,
                                              external != nullptr && !c.is_nominal);
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<odtc::OptimizerGroup>>> groups;
  if (include_optimizer_state && c.optimizer) {
    std::vector<flatbuffers::Offset<odtc::OptimizerGroup>> list{WriteOptimizer(fbb, *c.optimizer, external)};
    groups = fbb.CreateVector(list);
  }
  flatbuffers::Offset<odtc::PropertyBag> properties;
  if (!c.properties.empty()) properties = WriteProperties(fbb, c.properties);
  odtc::FinishCheckpointBuffer(fbb, odtc::CreateCheckpoint(fbb, kWrittenVersion, module, groups, properties));
}

void CheckEmbeddable(const Checkpoint& c, bool include_optimizer_state, const std::string& what) {
  uint64_t total = (c.is_nominal ? 0 : TensorBytes(c, include_optimizer_state)) + MetadataBytes(c);
  ET_CHECK(total < FLATBUFFERS_MAX_BUFFER_SIZE, ErrorCode::kInvalidArgument, "cannot save ", what, ": ", total,
           " bytes do not fit in one FlatBuffer (2 GiB); save it with external data");
}

}  // namespace

Checkpoint LoadCheckpoint(const std::string& path) {
  CheckpointFile file(path, "checkpoint");
  std::string external_path = ExternalDataPath(path);
  return ParseCheckpoint(file.data(), file.size(), path, &external_path, &file);
}

Checkpoint LoadCheckpointFromBuffer(const void* data, size_t size, const std::string& source) {
  ET_CHECK(data != nullptr || size == 0, ErrorCode::kInvalidArgument, "checkpoint '", source, "': null buffer");
  if (reinterpret_cast<uintptr_t>(data) % alignof(int64_t) != 0) {
    std::vector<uint8_t> aligned(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + size);
    return ParseCheckpoint(aligned.data(), aligned.size(), source, nullptr);
  }
  return ParseCheckpoint(static_cast<const uint8_t*>(data), size, source, nullptr);
}

std::vector<uint8_t> SerializeCheckpoint(const Checkpoint& checkpoint, bool include_optimizer_state) {
  CheckEmbeddable(checkpoint, include_optimizer_state, "checkpoint");
  flatbuffers::FlatBufferBuilder fbb(
      static_cast<size_t>(TensorBytes(checkpoint, include_optimizer_state) + MetadataBytes(checkpoint)));
  BuildCheckpoint(fbb, checkpoint, include_optimizer_state, nullptr);
  return std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

void SaveCheckpoint(const Checkpoint& checkpoint, const std::string& path, bool include_optimizer_state,
                    bool external_data) {
  ET_CHECK(!path.empty(), ErrorCode::kInvalidArgument, "cannot save checkpoint: empty path");
  uint64_t tensor_bytes = checkpoint.is_nominal ? 0 : TensorBytes(checkpoint, include_optimizer_state);
  bool use_external = !checkpoint.is_nominal && (external_data || tensor_bytes > kCheckpointExternalDataThreshold);
  std::string what = "checkpoint '" + path + "'";
  if (!use_external) CheckEmbeddable(checkpoint, include_optimizer_state, what);

  AtomicFileWriter file(path);
  std::optional<AtomicFileWriter> data_file;
  std::optional<ExternalDataSink> sink;
  std::optional<std::pair<uint64_t, uint64_t>> keep;  // old bytes to copy after the new tensors
  if (use_external) {
    // `<path>.data` is renamed into place before `path`: it keeps the bytes the old checkpoint reads at
    // their offsets, and the new tensors go before them when they fit there, else after them.
    data_file.emplace(ExternalDataPath(path));
    const auto live = LiveExternalRange(path);
    ExternalDataSink counter(nullptr);
    {
      flatbuffers::FlatBufferBuilder dry_run(static_cast<size_t>(MetadataBytes(checkpoint)));
      BuildCheckpoint(dry_run, checkpoint, include_optimizer_state, &counter);
    }
    if (live && counter.counted() > live->first) {
      CopyFileRange(ExternalDataPath(path), 0, live->second, *data_file);
      data_file->Pad(8);
    } else if (live) {
      keep = live;
    }
    sink.emplace(&*data_file);
  }
  flatbuffers::FlatBufferBuilder fbb(
      static_cast<size_t>((use_external ? 0 : tensor_bytes) + MetadataBytes(checkpoint)));
  BuildCheckpoint(fbb, checkpoint, include_optimizer_state, sink ? &*sink : nullptr);
  if (keep) {
    static constexpr uint8_t kZeros[4096] = {};
    while (data_file->position() < keep->first)
      data_file->Write(kZeros, static_cast<size_t>(std::min<uint64_t>(sizeof(kZeros), keep->first - data_file->position())));
    CopyFileRange(ExternalDataPath(path), keep->first, keep->second, *data_file);
  }
  file.Write(fbb.GetBufferPointer(), fbb.GetSize());
  file.Sync();
  if (data_file) data_file->Commit();
  file.Commit();
  if (!data_file) ::unlink(ExternalDataPath(path).c_str());  // stale side file of an earlier external save
}

}  // namespace edgetrain
