// AtomicFileWriter: writes a file through a temporary file in the same directory, fsyncs it and
// renames it into place on Commit(), so readers never see a half-written file. Without Commit()
// (an error, an exception) the temporary file is removed and the old file stays.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace edgetrain {

class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);  // kIoError naming `path` when it cannot be created
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  uint64_t position() const { return position_; }
  void Write(const void* data, size_t nbytes);
  void Pad(uint64_t alignment);  // zero bytes up to the next multiple of `alignment`
  void Sync();                   // flushes the data to disk; after this only the rename remains
  void Commit();

 private:
  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
  uint64_t position_ = 0;
};

// Writes `bytes` to `path` atomically.
void WriteFileAtomically(const std::string& path, const void* bytes, size_t nbytes);

}  // namespace edgetrain
